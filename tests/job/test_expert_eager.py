"""The experts' eager work around the grouped GEMMs as Megatron-Core's TEGroupedMLP runs it
(``job.compute.moe_costs.expert_eager_ops``): fc2's per-expert bias loop and a clamped GLU's
clamp, checked by hand."""

from __future__ import annotations

import pytest

from dlsched.job.compute.layer_costs import gpu_compute
from dlsched.job.compute.moe_costs import (
    BIAS_PASSES,
    CLAMP_PASSES,
    expert_eager_ops,
    routed_ops,
)
from dlsched.job.model_spec import Model, bundled_specs

# GPT-OSS's MoE shape (hidden 2880, experts of 2880, top 4, biased, clamped) at 256 tokens
OSS = Model(name="oss-moe", layers=2, hidden=2880, heads=64, head_dim=64, seq=256,
            vocab=1000, experts=128, top_k=4, expert_ffn_hidden=2880,
            gated_ffn=True, bias=True, rms_norm=True, learned_positions=False,
            glu_clamp=7.0)


def test_passes_read_from_the_code() -> None:
    # _apply_bias: b*p written (1), t + b*p read twice written once (3), cat (2); backward
    # two broadcast products written and reduced (3 each), split's concatenation (2)
    assert BIAS_PASSES == (1 + 3 + 2, 3 + 3 + 2)
    # in GLU-output units (a half of fc1's output): two clamps over a half each (2 + 2), cat
    # over the whole fc1 output (4); backward each clamp's masked gradient (gradient and input
    # read, result written: 3) and chunk's join of the two halves' gradients (4)
    assert CLAMP_PASSES == (2 + 2 + 4, 3 + 3 + 4)


def test_ops_by_hand() -> None:
    """256 tokens x top 4 = 1,024 routed rows over 16 local experts (EP 8): 64 rows each.
    fc1's up width is 2 x 2880 (gated), the GLU's output 1,024 x 2880 = 2,949,120 elements."""
    _, experts, _ = routed_ops(OSS, 1, 1, 8)
    fc1, act, fc2 = experts
    assert fc1.shape == (64, 5760, 2880, 16)
    out = 1024 * 2880
    assert act.elements == 3 * out  # the fused GLU: two halves read, one written
    ops = expert_eager_ops(experts, OSS.hidden, 16, OSS.bias, OSS.glu_clamp)
    assert ops[0] == fc1 and ops[2] == fc2
    clamped = ops[1]
    assert clamped.label == act.label  # still the moe_act module's one op (recomputed whole)
    assert clamped.elements == 3 * out + 8 * out
    assert clamped.backward_elements == 6 * out + 10 * out
    assert (clamped.kernels, clamped.launches_backward) == (4.0, 4.0)  # 1 fused + 3 each way
    bias = ops[3]
    assert bias.label == "expert-fc2-bias" and bias.upcast  # 4-byte units of 16-bit passes
    assert bias.elements == 6 * 1024 * 2880 / 2
    assert bias.backward_elements == 8 * 1024 * 2880 / 2
    assert (bias.kernels, bias.launches_backward) == (33.0, 66.0)  # 2G+1, 4G+2 with G = 16


def test_nothing_added_without_bias_or_clamp() -> None:
    _, experts, _ = routed_ops(OSS, 1, 1, 8)
    assert expert_eager_ops(experts, OSS.hidden, 16, False, 0.0) == experts
    only_bias = expert_eager_ops(experts, OSS.hidden, 16, True, 0.0)
    assert only_bias[:3] == experts and len(only_bias) == 4
    with pytest.raises(ValueError, match="local_experts"):
        expert_eager_ops(experts, OSS.hidden, 0, True, 7.0)


def test_bias_loop_bytes_at_the_memory_rate() -> None:
    """The loop's forward on a B200 in BF16: 6 passes of 1,024 x 2880 16-bit elements,
    35.4 MB, at the preset's memory rate; the backward 8 passes (47.2 MB)."""
    compute = gpu_compute("b200", "bf16")
    _, experts, _ = routed_ops(OSS, 1, 1, 8)
    bias = expert_eager_ops(experts, OSS.hidden, 16, True, 0.0)[3]
    rate = compute.gpu.memory_rate
    assert compute.work(bias, 1, False).gpu_s == pytest.approx(6 * 1024 * 2880 * 2 / rate)
    assert compute.work(bias, 1, True).gpu_s == pytest.approx(8 * 1024 * 2880 * 2 / rate)
    # FP8 runs keep these tensors in 16 bits: the same bytes
    fp8 = gpu_compute("b200", "fp8")
    assert fp8.work(bias, 1, False).gpu_s == pytest.approx(6 * 1024 * 2880 * 2 / rate)


def test_bundled_gpt_oss_is_clamped() -> None:
    # OpenAI's config.json: swiglu_limit 7.0; Qwen3's experts neither biased nor clamped
    specs = bundled_specs()
    assert specs["gpt-oss-120b"].glu_clamp == 7.0 and specs["gpt-oss-20b"].glu_clamp == 7.0
    qwen = specs["qwen3-30b-a3b"]
    assert qwen.glu_clamp == 0.0 and not qwen.bias
