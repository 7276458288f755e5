"""The experts' grouped GEMMs launched one cuBLASLt GEMM per local expert, each at TE's measured
per-launch host cost (``job.compute.expert_launches``), checked by hand on the timeline."""

from __future__ import annotations

import pytest

from dlsched.job.compute.expert_launches import (
    EXPERT_GEMM_LAUNCH_S,
    expert_launch_ops,
    routed_seconds,
)
from dlsched.job.compute.layer_costs import gpu_compute
from dlsched.job.compute.moe_costs import routed_ops
from dlsched.job.model_spec import Model
from dlsched.models.layer import Layer

# Qwen3-30B-A3B's MoE shape (hidden 2048, 128 experts of width 768, top 8) at a short sequence
QWEN = Model(name="qwen-moe", layers=2, hidden=2048, heads=32, seq=256, vocab=1000,
             experts=128, top_k=8, expert_ffn_hidden=768, gated_ffn=True, bias=False,
             rms_norm=True, learned_positions=False)


def test_the_measured_per_launch_cost() -> None:
    # TE PR #3134: 8 expert GEMMs through the multi-stream loop in 0.267 ms
    assert pytest.approx(33.375e-6) == EXPERT_GEMM_LAUNCH_S


def test_one_launch_per_local_expert_forward_two_backward() -> None:
    before, experts, _ = routed_ops(QWEN, 1, 1, 8)
    launched = expert_launch_ops(experts, 16)
    fc1, act, fc2 = launched
    assert (fc1.kernels, fc1.launches_backward) == (16.0, 32.0)
    assert (fc2.kernels, fc2.launches_backward) == (16.0, 32.0)
    assert act == experts[1]  # the activation is one kernel, unchanged
    assert expert_launch_ops(before, 16) == before
    with pytest.raises(ValueError, match="local_experts"):
        expert_launch_ops(experts, 0)


def test_host_bound_loop_by_hand() -> None:
    """256 tokens x top 8 over 16 local experts (EP 8): 128 rows per expert, microseconds of
    GPU work per product, so the loop's launches set the pace: from an idle host the GPU ends
    at n x 33.4 us + the last expert's share (``models.timeline``)."""
    compute = gpu_compute("b200", "bf16")
    _, experts, _ = routed_ops(QWEN, 1, 1, 8)
    fc1 = expert_launch_ops(experts, 16)[0]
    for backward, launches in ((False, 16), (True, 32)):
        gpu_s = compute.work(fc1, 1, backward).gpu_s
        assert gpu_s < launches * EXPERT_GEMM_LAUNCH_S  # host-bound
        expected = launches * EXPERT_GEMM_LAUNCH_S + gpu_s / launches
        assert routed_seconds(Layer("e", 0, ops=(fc1,)), compute, None, backward) == \
            pytest.approx(expected, rel=1e-12)


def test_gpu_bound_loop_hides_the_launches() -> None:
    """At 64k tokens per rank (256 x 256 microbatch) each expert's product outlasts its
    launch: the GPU starts after the first launch and never waits again."""
    compute = gpu_compute("b200", "bf16")
    _, experts, _ = routed_ops(QWEN, 256, 1, 8)
    fc1 = expert_launch_ops(experts, 16)[0]
    gpu_s = compute.work(fc1, 1).gpu_s
    assert gpu_s / 16 > EXPERT_GEMM_LAUNCH_S
    assert routed_seconds(Layer("e", 0, ops=(fc1,)), compute, None, False) == \
        pytest.approx(EXPERT_GEMM_LAUNCH_S + gpu_s, rel=1e-12)


def test_other_ops_keep_the_presets_launch_cost() -> None:
    """The permutation (one kernel) at the preset's 77.4 us forward launch, then the loop:
    the GPU ends at 77.4 us + 16 x 33.4 us + the last expert's share."""
    compute = gpu_compute("b200", "bf16")
    before, experts, _ = routed_ops(QWEN, 1, 1, 8)
    permute = before[2]
    fc1 = expert_launch_ops(experts, 16)[0]
    overhead = compute.gpu.spec.kernel_overhead
    assert permute.label == "permute" and compute.work(permute, 1).gpu_s < overhead
    seconds = routed_seconds(Layer("e", 0, ops=(permute, fc1)), compute, None, False)
    assert seconds == pytest.approx(overhead + 16 * EXPERT_GEMM_LAUNCH_S
                                    + compute.work(fc1, 1).gpu_s / 16, rel=1e-12)
