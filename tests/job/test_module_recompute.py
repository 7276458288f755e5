"""Megatron-Core's per-module recomputation (``job.compute.module_recompute``,
``job.memory.recompute_modules``): names, the time each module adds to the backward, the FLOP
and the bytes it frees, by hand on one layer."""

from __future__ import annotations

import pytest

from dlsched.errors import ConfigError
from dlsched.job.compute.layer_costs import ATTENTION_CORE, block_costs, gpu_compute
from dlsched.job.compute.module_recompute import (
    ATTENTION_CORE as CORE_LABELS,
)
from dlsched.job.compute.module_recompute import (
    modules_of,
    modules_recompute,
)
from dlsched.job.compute.moe_costs import moe_layer_costs, routed_ops
from dlsched.job.evaluation.evaluate import _flops
from dlsched.job.execution import Execution
from dlsched.job.memory.per_gpu import layer_activations, memory_per_gpu
from dlsched.job.model_spec import Model, load_spec

SMALL = Model(name="moe-small", layers=4, hidden=1024, heads=8, seq=1024, vocab=32000,
              ffn_hidden=2048, kv_heads=8, tied_embeddings=False, gated_ffn=True,
              bias=False, rms_norm=True, learned_positions=False, experts=8, top_k=2)
RATE = 2288.72e9  # h100 preset's memory rate (B/s) as job.compute prices it


def _costs(spec: Model, recompute: str, tp: int = 1, sp: bool = False):
    return block_costs(spec, 1, "h100", "bf16", tp, sp, recompute, None, "baseline")


def test_names_in_megatron_core_order_and_refused_with_the_accepted():
    assert modules_recompute(["layernorm", "moe_act"]) == "modules:moe_act,layernorm"
    assert modules_of("modules:moe_act,layernorm") == {"moe_act", "layernorm"}
    assert modules_of("selective") == frozenset()
    with pytest.raises(ConfigError, match=r"^recompute_modules: attn .*accepted: core_attn"):
        modules_recompute(["attn"])
    with pytest.raises(ConfigError, match=r"^recompute: foo is not a module") as refused:
        Execution(1, 1, 8, 1, 8, recompute="modules:mlp,foo")
    assert refused.value.field == "recompute"
    assert CORE_LABELS == ATTENTION_CORE


def test_core_attn_module_is_megatron_selective():
    """``core_attn`` is Korthikanti et al.'s selective recomputation: same backward, same
    stash, same executed FLOP."""
    spec = load_spec("gpt3-2.7b") if "gpt3-2.7b" in _bundled() else load_spec("llama3-8b")
    a, b = _costs(spec, "selective", 2, True), _costs(spec, "modules:core_attn", 2, True)
    assert a.layer_b == b.layer_b and a.tp_backward_s == b.tp_backward_s
    for attention in ("unfused", "flash"):
        sel = Execution(2, 1, 4, 1, 8, recompute="selective", sequence_parallel=True)
        mod = Execution(2, 1, 4, 1, 8, recompute="modules:core_attn", sequence_parallel=True)
        assert layer_activations(spec, sel, "bf16", attention) == \
            layer_activations(spec, mod, "bf16", attention)
        assert _flops(spec, sel, attention) == _flops(spec, mod, attention)


def test_layernorm_reruns_the_two_norms_by_hand():
    """Llama 3 8B, one sequence of 8192 on one H100: each RMSNorm reads its input and writes
    its output at FP32 statistics, 3 s h 16-bit elements (the zoo's norm op) and its weight
    (16 kB as the zoo counts it), 201.3 MB at 2.29 TB/s = 88.0 us; the two run again: +176 us
    on the backward, nothing on the forward."""
    spec = load_spec("llama3-8b")
    none, norms = _costs(spec, "none"), _costs(spec, "modules:layernorm")
    assert gpu_compute("h100", "bf16").gpu.memory_rate == RATE
    one = (3 * 8192 * 4096 * 2 + 16384) / RATE
    assert one == pytest.approx(87.97e-6, rel=1e-3)
    assert norms.layer_b - none.layer_b == pytest.approx(2 * one, rel=1e-9)
    assert norms.layer_f == none.layer_f


def test_layernorm_frees_both_norm_outputs():
    """Without SP each norm's output (the QKV and FFN inputs) is whole on every TP rank: 2 s
    b h 16-bit elements freed per layer; with SP a 1/t shard of each."""
    spec = load_spec("llama3-8b")
    s, h = 8192, 4096
    for tp, sp, split in ((1, False, 1), (4, False, 1), (4, True, 4)):
        none = Execution(tp, 1, 8 // tp, 1, 8 // tp, sequence_parallel=sp)
        mod = Execution(tp, 1, 8 // tp, 1, 8 // tp, sequence_parallel=sp,
                        recompute="modules:layernorm")
        kept_none, _ = layer_activations(spec, none, "bf16", "flash")
        kept, transient = layer_activations(spec, mod, "bf16", "flash")
        assert kept_none - kept == pytest.approx(2 * 2 * s * h / split)
        assert transient == pytest.approx(2 * 2 * s * h / split)


def test_mlp_reruns_the_dense_ffn_and_adds_its_flop():
    """``mlp`` reruns the FFN's two GEMMs and SwiGLU (the forward's FFN part) and adds its
    matmul FLOP: 2 x 3 h f per token per layer."""
    spec = load_spec("llama3-8b")
    none, mlp = _costs(spec, "none"), _costs(spec, "modules:mlp")
    assert 0 < mlp.layer_b - none.layer_b < none.layer_f
    layout = Execution(1, 1, 8, 1, 8, recompute="modules:mlp")
    flops = _flops(spec, layout)
    tokens = 8 * 8192
    assert flops["hardware"] - flops["model"] == pytest.approx(
        tokens * 32 * 2 * 3 * 4096 * 14336)


def test_moe_act_and_layernorm_on_an_moe_layer_by_hand():
    """The small MoE model (h 1024, 8 experts of 1024 x 2048 SwiGLU, top 2) on EP 8, one
    sequence of 1024: ``moe_act`` reruns SwiGLU over the 2048 routed copies (3 passes over
    2048 x 2048 elements, as the forward runs it) and frees its output, fc2's input, 2048 x
    2048 x 2 B; ``layernorm`` frees the two norms' outputs, 2 x 1024 x 1024 x 2 B; no matmul
    FLOP is added."""
    layout = Execution(1, 1, 8, 1, 8, ep=8)
    costs = {r: moe_layer_costs(SMALL, Execution(1, 1, 8, 1, 8, ep=8, recompute=r), "h100",
                                "bf16", None, layout.group("ep", _cluster()), "baseline")
             for r in ("none", "modules:moe_act", "modules:moe")}
    _, experts, _ = routed_ops(SMALL, 1, 1, 8)
    act = experts[1]
    assert act.label == "swiglu" and act.elements == 3 * (1024 * 2) * 2048
    added = costs["modules:moe_act"].layer_b - costs["none"].layer_b
    assert added == pytest.approx(3 * 2048 * 2048 * 2 / RATE, rel=1e-6)  # 11.0 us
    assert costs["modules:moe_act"].a2a_backward_s == costs["none"].a2a_backward_s
    # the whole MoE layer again: both All-to-Alls run a second time in the backward
    assert costs["modules:moe"].a2a_backward_s == pytest.approx(
        2 * costs["none"].a2a_backward_s)
    mems = {r: memory_per_gpu(SMALL, Execution(1, 1, 8, 1, 8, ep=8, recompute=r), "bf16")
            for r in ("none", "modules:moe_act,layernorm")}
    freed = SMALL.layers * (2048 * 2048 * 2 + 2 * 1024 * 1024 * 2)
    assert mems["none"].activations - mems["modules:moe_act,layernorm"].activations == \
        pytest.approx(freed)
    flops = _flops(SMALL, Execution(1, 1, 8, 1, 8, ep=8, recompute="modules:moe_act,layernorm"))
    assert flops["hardware"] == flops["model"]


def test_modules_the_model_has_not_are_refused():
    from dlsched.job.compute.module_recompute import check_for_model
    with pytest.raises(ConfigError, match="moe_act"):
        check_for_model("modules:moe_act", 0, 0, False)
    with pytest.raises(ConfigError, match="mla_up_proj"):
        check_for_model("modules:mla_up_proj", 8, 0, False)
    check_for_model("modules:layernorm,mlp", 0, 0, False)


def _cluster():
    from dlsched.job.cluster import node_cluster
    return node_cluster("dgx-h100", 8)


def _bundled() -> set[str]:
    from dlsched.job.model_spec import bundled_specs
    return set(bundled_specs())


def test_exports_name_the_modules_or_refuse():
    """Megatron-LM's arguments carry the modules as Megatron-Core's flags; TorchTitan has no
    per-module recomputation and says so."""
    from dlsched.job.exports.writers import megatron_args, torchtitan_toml
    layout = Execution(1, 1, 8, 1, 8, ep=8, recompute="modules:moe_act,layernorm")
    line = megatron_args(SMALL, layout).splitlines()[-1]
    assert "--recompute-granularity selective --recompute-modules moe_act layernorm" in line
    dense = Execution(1, 1, 8, 1, 8, recompute="modules:layernorm")
    with pytest.raises(ConfigError, match="no TorchTitan equivalent"):
        torchtitan_toml(load_spec("llama3-8b"), dense)
