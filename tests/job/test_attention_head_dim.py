"""cuDNN's fused attention by head dimension (``Gpu.fused_attention_scale``, the presets'
``fused_attention_head_dim_64``): the preset fraction follows from the published benchmark
times it cites, GPT-OSS's head dimension 64 core is priced at that fraction of the head
dimension 128 rate (hand-computed seconds on gb200 and h100), head dimensions of 128 and
above and the FlashAttention-2 kind are unchanged, and a bad value is refused naming the
field."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dlsched.errors import ConfigError
from dlsched.hardware.gpu import get_gpu, gpu_from_data
from dlsched.job.attention_layers import executed_pairs
from dlsched.job.compute.layer_costs import ATTENTION_CORE, decoder_model, gpu_compute
from dlsched.job.model_spec import bundled_specs
from dlsched.models.calibration import gpu_document
from dlsched.models.kernels import attention_utilization

GPT_OSS = bundled_specs()["gpt-oss-120b"]
LLAMA_8B = bundled_specs()["llama3-8b"]


def _core(spec, attention: str = "fused"):
    model = decoder_model(spec, attention=attention)
    (op,) = [op for layer in model.layers if layer.block == "h.0" for op in layer.ops
             if op.label in ATTENTION_CORE]
    return op


def _rate(fwd_ms: float, bwd_ms: float, pairs_per_head: int, heads: int, dim: int) -> float:
    """FLOP/s of one forward and a 2.5x backward over the executed pairs."""
    return 3.5 * 4 * pairs_per_head * heads * dim / ((fwd_ms + bwd_ms) * 1e-3)


@pytest.mark.parametrize(("gpu", "times", "fraction"), [
    # cudnn-frontend sdpa_benchmark_training, cuDNN 9.19.1, 4,096 tokens, 64 / 8 heads:
    # (head dim 128 causal, batch 1) and (head dim 64, causal + 1,024 window, batch 2), ms
    ("gb200", ((0.206, 0.607), (0.209, 0.487)), 0.5575),
    ("h200", ((0.465, 1.450), (0.358, 1.042)), 0.6528),
])
def test_the_preset_fraction_is_the_benchmarks_ratio(gpu, times, fraction) -> None:
    """Over the 128 x 128 tiles each run executes (528 a head causal, 252 under the 1,024
    window, at 4,096 tokens), the head-dimension-64 rate over the 128 one is the preset's."""
    causal = executed_pairs("F", 4096, 4096)
    window = executed_pairs("S", 4096, 1024)
    assert (causal // 128**2, window // 128**2) == (528, 252)
    (f128, b128), (f64, b64) = times
    ratio = _rate(f64, b64, window, 2 * 64, 64) / _rate(f128, b128, causal, 64, 128)
    assert ratio == pytest.approx(fraction, abs=5e-5)
    assert get_gpu(gpu).spec.fused_attention_head_dim_64 == fraction


def test_scale_by_head_dimension() -> None:
    """The fraction at 64 and below, 1 from 128, linear between; 1 without the constant."""
    gpu = get_gpu("gb200")
    assert [gpu.fused_attention_scale(d) for d in (32, 64, 128, 192)] == [0.5575, 0.5575,
                                                                           1.0, 1.0]
    assert gpu.fused_attention_scale(96) == pytest.approx((0.5575 + 1) / 2)
    document = gpu_document(gpu)
    del document["fused_attention_head_dim_64"]
    assert gpu_from_data(document, "plain").fused_attention_scale(64) == 1.0
    assert get_gpu("b200").fused_attention_scale(64) == 0.5575
    assert get_gpu("h100").fused_attention_scale(64) == 0.6528


def test_bad_fraction_is_refused_naming_the_field() -> None:
    document = gpu_document(get_gpu("h100"))
    for bad in (0.0, 1.5):
        with pytest.raises(ConfigError, match="fused_attention_head_dim_64"):
            gpu_from_data({**document, "fused_attention_head_dim_64": bad}, "bad")


@pytest.mark.parametrize(("gpu", "peak", "sms", "fraction"), [
    ("gb200", 2500e12, 148, 0.5575), ("h100", 989.4e12, 132, 0.6528)])
def test_gpt_oss_core_at_the_head_dim_64_rate(gpu, peak, sms, fraction) -> None:
    """GPT-OSS (64 heads of 64) at 4 sequences: the causal half of 4 s^2 x 4,096 FLOP a
    sequence over peak x 0.5267 x the fraction x the wave quantization of 4 x 64 problems."""
    op = _core(GPT_OSS)
    assert GPT_OSS.heads * (GPT_OSS.head_dim or 0) == 4096 and op.shape[2] == 64
    s = GPT_OSS.seq
    util = attention_utilization(s, 4 * 64, sms)
    by_hand = 4 * 0.5 * 4 * s * s * 4096 / (peak * 0.5267 * fraction * util)
    compute = gpu_compute(gpu, "bf16")
    assert compute.work(op, 4).gpu_s == pytest.approx(by_hand, rel=1e-6)
    assert compute.work(op, 4, backward=True).gpu_s == pytest.approx(2.5 * by_hand, rel=1e-6)
    # the same FLOP at head dimension 128 (32 heads of 128) is priced at the full rate
    wide = replace(op, shape=(s, s, 32, 1))
    assert compute.work(op, 4).gpu_s / compute.work(wide, 4).gpu_s == pytest.approx(
        1 / fraction * attention_utilization(s, 4 * 32, sms) / util, rel=1e-6)


def test_head_dim_128_and_flash_kind_unchanged() -> None:
    """Llama 3 8B's core (head dimension 128) and FlashAttention-2's kind on any head
    dimension keep their rates (the fraction is cuDNN's, measured against 128)."""
    compute = gpu_compute("gb200", "bf16")
    op = _core(LLAMA_8B)
    s = LLAMA_8B.seq
    by_hand = 0.5 * 4 * s * s * LLAMA_8B.hidden / (
        2500e12 * 0.5267 * attention_utilization(s, LLAMA_8B.heads, 148))
    assert compute.work(op, 1).gpu_s == pytest.approx(by_hand, rel=1e-6)
    flash = _core(GPT_OSS, "flash")
    by_hand = 0.5 * 4 * GPT_OSS.seq ** 2 * 4096 / (
        2500e12 * 0.3386 * attention_utilization(GPT_OSS.seq, 64, 148))
    assert compute.work(flash, 1).gpu_s == pytest.approx(by_hand, rel=1e-6)
