"""A compiled full recomputation does not rerun the FFN's output projection
(``job.compute.layer_costs.unneeded_rerun_s``; evidence: ``benchmarks/inductor_tp_layouts.py
--ac full``), checked by hand on Llama 3 8B at TP 8 with sequence parallelism."""

from __future__ import annotations

import pytest
from llama3_8b import L8

from dlsched.job.cluster import load_cluster
from dlsched.job.compute import layer_costs
from dlsched.job.compute.block_pricing import KernelOptions, ops_works
from dlsched.job.compute.layer_costs import (
    block_costs,
    gpu_compute,
    rank_decoder,
    unneeded_rerun_s,
)

MB, TP = 12, 8


def _gemms() -> dict[str, object]:
    model = rank_decoder(L8, 1, "ring", "flash", TP, "local")
    return {op.label: op for item in model.layers if item.block == "h.0" for op in item.ops
            if op.kind == "gemm"}


def test_fc2_forward_is_a_third_of_the_gated_ffn() -> None:
    """FC2 does 2 x tokens x (14336 / 8) x 4096 FLOP, half of the fused gate + up projection's
    (twice its width): its forward seconds are >= those FLOP at the GPU's GEMM rate and half
    of FC1's within the two shapes' tile utilization (5%)."""
    compute = gpu_compute("h100", "bf16", TP, True)
    model = rank_decoder(L8, 1, "ring", "flash", TP, "local")
    skipped = unneeded_rerun_s(model, MB, compute, KernelOptions(compiled=True))
    flops = 2 * MB * 8192 * (14336 / TP) * 4096
    assert skipped >= flops / compute.gpu.kind_rate("gemm", "bf16") * (1 - 1e-9)
    fc1 = next(op for label, op in _gemms().items() if label.endswith("mlp.c_fc"))
    fc1_s = ops_works((fc1,), MB, compute, KernelOptions(compiled=True), False)[0].gpu_s
    assert skipped == pytest.approx(fc1_s / 2, rel=0.05)


def test_fp8_skips_the_forward_casts_too() -> None:
    """Under torchao tensorwise FP8 the skipped rerun is FC2's FP8 forward: its GEMM at the FP8
    rate plus its input and weight casts, so more than the FP8 GEMM's FLOP time alone."""
    compute = gpu_compute("h100", "fp8", TP, True)
    model = rank_decoder(L8, 1, "ring", "flash", TP, "local")
    skipped = unneeded_rerun_s(model, MB, compute,
                               KernelOptions(fp8_recipe="tensorwise", compiled=True))
    flops = 2 * MB * 8192 * (14336 / TP) * 4096
    fp8_rate = compute.gpu.kind_rate("gemm", "fp8")
    assert skipped > flops / fp8_rate
    assert skipped < unneeded_rerun_s(model, MB, compute, KernelOptions(compiled=True))


def test_only_compiled_full_recomputation_drops_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Full AC compiled: the layer's backward is exactly FC2's forward shorter than with the
    rerun priced whole; eager full AC (a replay of the whole forward) and compiled per-op
    checkpointing are unchanged."""
    group = load_cluster("dgx-h100", 8, None).group_topology(1, 8)
    compute = gpu_compute("h100", "bf16", TP, True)
    model = rank_decoder(L8, 1, "ring", "flash", TP, "local")
    compiled = KernelOptions(compiled=True)
    fc2 = unneeded_rerun_s(model, MB, compute, compiled)

    def costs(recompute: str, kernels: KernelOptions) -> float:
        block_costs.cache_clear()
        return block_costs(L8, MB, "h100", "bf16", TP, True, recompute, group, "baseline",
                           kernels=kernels).layer_b

    full, eager, per_op = (costs("full", compiled), costs("full", KernelOptions()),
                           costs("selective-op", compiled))
    monkeypatch.setattr(layer_costs, "unneeded_rerun_s", lambda *a, **k: 0.0)
    assert costs("full", compiled) - full == pytest.approx(fc2, rel=1e-9)
    assert costs("full", KernelOptions()) == eager
    assert costs("selective-op", compiled) == per_op
    block_costs.cache_clear()
