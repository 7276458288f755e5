"""The full recomputation priced as one host/GPU timeline with the backward
(``job.compute.block_pricing.recompute_overlap_s``): what it hides is the smaller of the
forward's host excess and the backward's GPU excess, and nothing when both halves are bound
the same way; the separate gradient accumulation's adds launched in the backward
(``accumulation_launch_s``): one per parameter tensor at the backward's launch cost, paid
only where the host sets the pace; the TP collectives filling the GPU's wait for the host
(``hidden_collectives_s``)."""

from __future__ import annotations

import pytest

from dlsched.job.compute.block_pricing import (
    KernelOptions,
    accumulation_launch_s,
    hidden_collectives_s,
    layer_halves,
    layer_work,
    ops_works,
    recompute_overlap_s,
)
from dlsched.job.compute.layer_costs import decoder_model, gpu_compute
from dlsched.job.model_spec import Model

# vTrain's GPT shapes (hidden 1024 / 2048, 16 heads, sequence 1024, vocabulary 50,257).
SPECS = {hidden: Model(name=f"gpt-h{hidden}", layers=12, hidden=hidden, heads=16,
                       seq=1024, vocab=50257) for hidden in (1024, 2048)}


def _halves(hidden: int, microbatch: int) -> tuple[float, float, float, float]:
    """GPU and host seconds of one layer's forward and backward on the a100 preset (fp16)."""
    compute = gpu_compute("a100", "fp16")
    model = decoder_model(SPECS[hidden], 1, attention="unfused")
    ops = tuple(op for item in model.layers if item.block == "h.0" for op in item.ops)
    spec = compute.gpu.spec
    out = []
    for backward, overhead in ((False, spec.kernel_overhead), (True, spec.backward_overhead)):
        works = ops_works(ops, microbatch, compute, KernelOptions(), backward)
        out += [sum(w.gpu_s for w in works), sum(w.launches for w in works) * overhead]
    return out[0], out[1], out[2], out[3]


def _overlap(hidden: int, microbatch: int) -> float:
    model = decoder_model(SPECS[hidden], 1, attention="unfused")
    return recompute_overlap_s(layer_halves(model, microbatch, gpu_compute("a100", "fp16"),
                                            KernelOptions()))


def test_a_host_bound_forward_hides_under_a_gpu_bound_backward() -> None:
    """Hidden 2048, microbatch 1: the forward waits on the host (14 launches at 77.44 us),
    the backward on the GPU; max(f_gpu, f_host) + max(b_gpu, b_host) - max(f_gpu + b_gpu,
    f_host + b_host) reduces to min(f_host - f_gpu, b_gpu - b_host) > 0."""
    gpu_f, host_f, gpu_b, host_b = _halves(2048, 1)
    assert host_f > gpu_f and gpu_b > host_b
    assert host_f == pytest.approx(14 * 77.44e-6) and host_b == pytest.approx(26 * 23.81e-6)
    assert _overlap(2048, 1) == pytest.approx(min(host_f - gpu_f, gpu_b - host_b), rel=1e-12)
    assert _overlap(2048, 1) > 1e-4


def test_nothing_is_hidden_when_both_halves_are_bound_alike() -> None:
    """Hidden 2048, microbatch 4: both halves GPU-bound; hidden 1024, microbatch 1: both
    host-bound. The one timeline then costs what the two halves cost."""
    gpu_f, host_f, gpu_b, host_b = _halves(2048, 4)
    assert gpu_f > host_f and gpu_b > host_b
    assert _overlap(2048, 4) == pytest.approx(0.0, abs=1e-12)
    gpu_f, host_f, gpu_b, host_b = _halves(1024, 1)
    assert host_f > gpu_f and host_b > gpu_b
    assert _overlap(1024, 1) == pytest.approx(0.0, abs=1e-12)


def test_the_separate_accumulation_launches_one_add_per_parameter_tensor() -> None:
    """A GPT layer with biases and LayerNorm has 12 parameter tensors (two norms' weight and
    bias, four linears' weight and bias): hidden 1024, microbatch 1, its backward host-bound,
    the adds cost 12 x 23.81 us = 285.72 us; hidden 2048, microbatch 4, GPU-bound (5.2 ms
    against 0.9 ms of launches), nothing. Without the option, the backward's launches alone."""
    compute = gpu_compute("a100", "fp16")
    separate = KernelOptions(accumulation_launches=True)
    small = decoder_model(SPECS[1024], 1, attention="unfused")
    assert sum(1 for item in small.layers if item.block == "h.0" and item.params) == 12
    assert accumulation_launch_s(layer_work(small, 1, compute, separate)) == pytest.approx(
        12 * 23.81e-6)
    assert layer_halves(small, 1, compute, separate)[3] - layer_halves(
        small, 1, compute, KernelOptions())[3] == pytest.approx(12 * 23.81e-6)
    large = decoder_model(SPECS[2048], 1, attention="unfused")
    gpu_b, host_b = layer_halves(large, 4, compute, separate)[2:]
    assert gpu_b > host_b == pytest.approx(38 * 23.81e-6)
    assert accumulation_launch_s(layer_work(large, 4, compute, separate)) == 0.0


def test_collectives_fill_only_the_gpus_wait_for_the_host() -> None:
    """Halves (ms) GPU 1 / host 3 forward, GPU 2 / host 1 backward: the forward's 2 ms of
    slack hide its 0.5 ms of collectives whole; the backward alone has no slack (1 - 2 < 0),
    with the rerun forward 1 - 2 + 3 - 1 = 1 ms, so 1 of its 3 ms hide; a GPU-bound layer
    hides nothing."""
    halves = (1e-3, 3e-3, 2e-3, 1e-3)
    assert hidden_collectives_s(halves, 0.5e-3, 3e-3, rerun=False) == pytest.approx((0.5e-3, 0))
    assert hidden_collectives_s(halves, 0.5e-3, 3e-3, rerun=True) == pytest.approx(
        (0.5e-3, 1e-3))
    assert hidden_collectives_s((3e-3, 1e-3, 6e-3, 1e-3), 1e-3, 1e-3, rerun=True) == (0.0, 0.0)
