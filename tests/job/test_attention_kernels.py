"""The attention core's kernels (``--attention flash|fused|unfused``): cuDNN's fused attention is
the flash kernel's op at its own rate (hand-computed seconds on h100), refused with the field's
name on a GPU without that rate and outside 16 bits, exported under Megatron-Core's backend
name, and a GPU file's optional ``fused_attention`` kind is checked at the edge."""

from __future__ import annotations

import pytest

from dlsched.errors import ConfigError
from dlsched.hardware.gpu import get_gpu, gpu_from_data
from dlsched.job.cluster import load_cluster
from dlsched.job.compute.layer_costs import ATTENTION_CORE, block_costs, decoder_model, gpu_compute
from dlsched.job.evaluation.evaluate import Job, check_run, evaluate
from dlsched.job.execution import Execution
from dlsched.job.exports.writers import megatron_args
from dlsched.job.model_spec import bundled_specs
from dlsched.job.run_settings import RunSettings
from dlsched.models.calibration import gpu_document
from dlsched.models.kernels import attention_utilization

LLAMA_8B = bundled_specs()["llama3-8b"]


def _core(attention: str):
    model = decoder_model(LLAMA_8B, attention=attention)
    return [op for layer in model.layers for op in layer.ops if op.label in ATTENTION_CORE]


def test_fused_is_the_flash_kernel_at_cudnns_rate() -> None:
    """Same op (one causal kernel, same FLOP, bytes and shape), kind ``fused_attention``;
    priced by cuDNN's tiles on h100 (tests/models/test_fused_attention.py has the hand sum),
    FlashAttention-2's by its executed half of the FLOP at 989.4 TFLOP/s x 0.3386 x the
    128-query blocks' wave quantization, the backward 2.5 times that."""
    (flash,), (fused,) = _core("flash"), _core("fused")
    assert (flash.kind, fused.kind) == ("attention", "fused_attention")
    assert (fused.flops, fused.elements, fused.shape) == (flash.flops, flash.elements,
                                                          flash.shape)
    compute = gpu_compute("h100", "bf16")
    s, heads = LLAMA_8B.seq, LLAMA_8B.heads
    util = attention_utilization(s, heads, 132)
    by_hand = 0.5 * 4 * s * s * LLAMA_8B.hidden / (989.4e12 * 0.3386 * util)
    assert compute.work(flash, 1).gpu_s == pytest.approx(by_hand, rel=1e-6)
    assert compute.work(flash, 1, backward=True).gpu_s == pytest.approx(2.5 * by_hand, rel=1e-6)
    assert compute.work(fused, 1).gpu_s < compute.work(flash, 1).gpu_s


def test_fused_attention_shortens_only_the_attention() -> None:
    """The layer's forward differs between the kernels by the attention op's time alone."""
    cluster = load_cluster("dgx-h100", 8, "h100")
    group = cluster.group_topology(1, 1)
    args = (LLAMA_8B, 1, "h100", "bf16", 1, False, "none", group, "baseline")
    flash = block_costs(*args, attention="flash")
    fused = block_costs(*args, attention="fused")
    compute = gpu_compute("h100", "bf16")
    (core_flash,), (core_fused,) = _core("flash"), _core("fused")
    saved = compute.work(core_flash, 1).gpu_s - compute.work(core_fused, 1).gpu_s
    assert flash.layer_f - fused.layer_f == pytest.approx(saved, rel=1e-3)
    job = Job(LLAMA_8B, cluster)
    layout = Execution(1, 1, 8, 1, 64, run=RunSettings("bf16", attention="fused"))
    assert evaluate(job, layout).iteration_s < evaluate(job, layout.with_run(attention="flash")
                                                        ).iteration_s


def test_fused_attention_is_refused_where_no_rate_is_given() -> None:
    """The a100 preset measures no cuDNN attention rate, and cuDNN's kernel is 16-bit only:
    both refusals name the field."""
    with pytest.raises(ConfigError, match=r"efficiency\.fused_attention\.bf16"):
        check_run(Job(LLAMA_8B, load_cluster("dgx-a100", 8, "a100")),
                  RunSettings("bf16", attention="fused"))
    with pytest.raises(ConfigError, match=r"efficiency\.fused_attention\.fp32"):
        get_gpu("h100").efficiency("fused_attention", "fp32")
    with pytest.raises(ConfigError, match=r"^attention: 'cudnn' is not accepted") as error:
        RunSettings("bf16", attention="cudnn")
    assert error.value.field == "attention"


def test_a_gpu_files_fused_attention_takes_bf16_alone() -> None:
    """A GPU document round-trips its optional kind; fp32 in it, or the kind without a bf16
    peak, is refused naming ``efficiency.fused_attention``; leaving it out is accepted."""
    document = gpu_document(get_gpu("h100"))
    assert gpu_from_data(document, "copy").efficiency("fused_attention", "bf16") == 0.7385
    bad = {**document, "efficiency": {**document["efficiency"],
                                      "fused_attention": {"fp32": 0.5, "bf16": 0.5}}}
    with pytest.raises(ConfigError, match=r"efficiency\.fused_attention"):
        gpu_from_data(bad, "bad")
    without = {**{k: v for k, v in document.items() if k != "fused_attention_kernel"},
               "efficiency": {k: v for k, v in document["efficiency"].items()
                              if k != "fused_attention"}}
    assert "fused_attention" not in gpu_from_data(without, "plain").spec.efficiency


def test_megatron_export_names_the_backend() -> None:
    """``--attention-backend`` carries Megatron-Core's name of the planned kernel."""
    layout = Execution(1, 1, 8, 1, 64)
    for attention in ("flash", "fused", "unfused"):
        words = megatron_args(LLAMA_8B, layout.with_run(attention=attention)).split()
        assert words[words.index("--attention-backend") + 1] == attention
