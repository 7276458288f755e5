"""torchao's tensorwise float8 under TorchTitan's TP checked by hand (Llama 3 8B, TP 8, SP):
the output gradients all-gathered in FP8 (``Float8RowwiseParallel``) and the decomposed
collective matmuls' pieces priced without the casts that run once per linear
(``block_pricing.gemm_seconds``)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from llama3_8b import L8

from dlsched.job.cluster import load_cluster
from dlsched.job.communication.async_tp import async_tp_exposed, piece
from dlsched.job.communication.collective_costs import curve
from dlsched.job.compute.block_pricing import KernelOptions, gemm_seconds, ops_works
from dlsched.job.compute.layer_costs import gpu_compute, rank_decoder
from dlsched.models.pricing import product_seconds

TP, MB = 8, 2
MESSAGE = MB * 8192 * 4096 * 2  # one sequence-parallel buffer, bf16
TENSORWISE = KernelOptions(fp8_recipe="tensorwise", compiled=True)


def _gemms() -> dict:
    model = rank_decoder(L8, 1, "ring", "flash", TP, "local")
    return {op.label: op for item in model.layers if item.block == "h.0" for op in item.ops
            if op.kind == "gemm"}


def _fc1():
    return next(op for label, op in _gemms().items() if label.endswith("mlp.c_fc"))


def test_gemm_seconds_leave_the_fp8_casts_out() -> None:
    """An FP8 linear's GEMM seconds are its FP8 product alone (the casts are the rest of
    ``ops_works``); a 16-bit op is priced as ``ops_works`` prices it."""
    compute = gpu_compute("h100", "fp8", TP, True)
    fc1 = _fc1()
    fp8 = replace(compute, precision="fp8", autocast=False)
    for back in (False, True):
        alone = gemm_seconds(fc1, MB, compute, TENSORWISE, back)
        assert alone == pytest.approx(product_seconds(fp8, fc1, MB, back), rel=1e-12)
        assert alone < ops_works((fc1,), MB, compute, TENSORWISE, back)[0].gpu_s
    bf16 = gpu_compute("h100", "bf16", TP, True)
    plain = KernelOptions(compiled=True)
    assert gemm_seconds(fc1, MB, bf16, plain, False) == \
        ops_works((fc1,), MB, bf16, plain, False)[0].gpu_s


def test_pieces_do_not_repeat_the_weight_cast() -> None:
    """Split into 8 row pieces, FC1's FP8 GEMM sums to the whole GEMM within tile effects
    (5%); with the casts priced per piece (``ops_works``) the 8 pieces would pay the
    weight's forward cast 7 times more: at least 7 x 3 bytes (read 2, write 1) per weight
    element at the memory rate beyond the whole linear's work."""
    compute = gpu_compute("h100", "fp8", TP, True)
    fc1 = _fc1()
    part = piece(fc1, TP)
    pieces = TP * gemm_seconds(part, MB, compute, TENSORWISE, False)
    assert pieces == pytest.approx(gemm_seconds(fc1, MB, compute, TENSORWISE, False), rel=0.05)
    with_casts = TP * ops_works((part,), MB, compute, TENSORWISE, False)[0].gpu_s
    whole = ops_works((fc1,), MB, compute, TENSORWISE, False)[0].gpu_s
    weight = 4096 * 2 * 14336 / TP  # FC1's (w1 + w3) weight elements on one rank
    assert with_casts - whole >= 7 * 3 * weight / compute.gpu.memory_rate


def test_backward_gathers_move_the_gathered_bytes() -> None:
    """With GEMMs of no length every decomposed collective is exposed whole: the backward's
    two all-gathers (the projection's and FC2's output gradients) then differ between FP8
    (half the bytes) and 16-bit gathers by exactly 2 x (AG(M) - AG(M / 2)); the forward's
    two likewise."""
    group = load_cluster("dgx-h100", 8, None).group_topology(1, 8)
    rate = gpu_compute("h100", "bf16", TP, True).gpu.memory_rate

    def exposed(gathered: float) -> tuple[float, float]:
        return async_tp_exposed(_gemms(), lambda op, back: 0.0, TP, MESSAGE, group,
                                "baseline", rate, gathered)

    gather = curve(group, "all-gather", "baseline")
    saved = 2 * (gather.seconds(MESSAGE) - gather.seconds(MESSAGE / 2))
    (f16, b16), (f8, b8) = exposed(MESSAGE), exposed(MESSAGE / 2)
    assert saved > 0
    assert f16 - f8 == pytest.approx(saved, rel=1e-9)
    assert b16 - b8 == pytest.approx(saved, rel=1e-9)
