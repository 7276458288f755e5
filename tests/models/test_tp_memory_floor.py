"""A tensor-parallel linear's memory floor (``models.pricing.product_seconds``): the side of a
TP linear that is whole on every rank is counted whole, by hand on one narrow GEMM."""

from __future__ import annotations

import pytest

from dlsched.models.compute import calibrated
from dlsched.models.ops import matmul
from dlsched.models.pricing import product_seconds

TOKENS, HIDDEN, NARROW = 8192, 4096, 64  # a 64-wide linear: 8 columns per rank at TP 8


def test_column_parallel_reads_its_gathered_input_whole() -> None:
    """TP 8 with SP, bf16: a column-parallel 4096 -> 64 linear reads the whole gathered input
    (8192 x 4096) and writes 8192 x 8, with its 4096 x 8 weight shard: (8192 x (4096 + 8) +
    4096 x 8) x 2 bytes at the memory rate, well above its 8192 x 4096 x 8 x 2 FLOP; the
    row-parallel 64 -> 4096 reads 8192 x 8 and writes the whole 8192 x 4096 partial sum."""
    compute = calibrated("h100", "bf16", tensor_parallel=8, sequence_parallel=True)
    rate = compute.gpu.memory_rate
    column = matmul("h.0.attn.c_attn", HIDDEN, NARROW, TOKENS, bias=False)
    moved = (TOKENS * (HIDDEN + NARROW / 8) + HIDDEN * NARROW / 8) * 2
    assert product_seconds(compute, column, 1, False) == pytest.approx(moved / rate)
    assert product_seconds(compute, column, 1, True) == pytest.approx(2 * moved / rate)
    row = matmul("h.0.mlp.c_proj", NARROW, HIDDEN, TOKENS, bias=False)
    moved_row = (TOKENS * (NARROW / 8 + HIDDEN) + HIDDEN * NARROW / 8) * 2
    assert product_seconds(compute, row, 1, False) == pytest.approx(moved_row / rate)


def test_an_unsplit_gemm_keeps_its_share() -> None:
    """Without TP nothing changes: the same linear at TP 1 moves all its operands once."""
    compute = calibrated("h100", "bf16")
    column = matmul("h.0.attn.c_attn", HIDDEN, NARROW, TOKENS, bias=False)
    moved = (TOKENS * (HIDDEN + NARROW) + HIDDEN * NARROW) * 2
    assert product_seconds(compute, column, 1, False) == pytest.approx(
        moved / compute.gpu.memory_rate)  # 69 MB against 4.3 GFLOP: memory-bound
