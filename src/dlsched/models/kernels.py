"""How well a GPU's SMs are used by one kernel of a given shape (tile and wave quantization).

A cuBLAS/CUTLASS GEMM of C[M x N] = A[M x K] B[K x N] splits C into output tiles, one thread
block each, and runs them in waves over the GPU's SMs (NVIDIA, *Matrix Multiplication
Background User's Guide*, DU-09799-001, 2023, §2.3 "Typical tile dimensions in cuBLAS" and
§3 "Dimension quantization effects": tiles of 256x128, 128x256, 128x128, 256x64, 64x256,
128x64, 64x128 and 64x64; a partial tile costs a whole one, a partial wave a whole one; larger
tiles reuse more operands and are more efficient). ``gemm_utilization`` is the fraction of
the GPU's large-GEMM rate one kernel reaches:

    useful M x N x groups / (waves x tiles per wave x tile area) x tile efficiency

with the best of those tiles, as cuBLAS's heuristics choose. A tile's efficiency is its
operand reuse, tm x tn / (tm + tn) (output elements per operand element loaded), relative to
a 128x128 tile's (64), capped at 1: tiles of 128x128 and larger run at the full rate, a 64x64
tile at half (the per-SM roofline of shared-memory traffic; 128x128 is CUTLASS's default
tensor-op tile for Ampere and Hopper). Tiles smaller than 128x128 run several thread blocks
per SM (as many as fit in a 128x128 tile's resources). When K is long, the K dimension may be
split (split-K, as cuBLAS does for weight-gradient GEMMs) into up to ``MAX_SPLIT_K`` slices of
at least ``SPLIT_K_MIN``, whichever fills the waves best (the partial sums' reduction is not
priced).

A fused attention kernel (FlashAttention-2, what PyTorch's scaled-dot-product attention runs
for 16-bit inputs) gives one thread block to each 128-query block of each (sample, head), so
its utilization is the same wave quantization over ``ceil(seq / 128) x batch x heads``
blocks (Dao, *FlashAttention-2*, 2023, §3.2: block size 128 for the queries).
"""

from __future__ import annotations

import math
from functools import lru_cache

TILES = ((256, 128), (128, 256), (128, 128), (256, 64), (64, 256), (128, 64), (64, 128),
         (64, 64))
FULL_TILE = 128 * 128
FULL_REUSE = FULL_TILE / (128 + 128)
SPLIT_K_MIN = 128
MAX_SPLIT_K = 32
ATTENTION_BLOCK = 128


def tile_efficiency(rows: int, cols: int) -> float:
    """Fraction of the full rate a ``rows`` x ``cols`` output tile runs at (its operand reuse
    relative to a 128x128 tile's, capped at 1)."""
    return min(1.0, rows * cols / (rows + cols) / FULL_REUSE)


@lru_cache(maxsize=65536)
def gemm_utilization(m: int, n: int, k: int, groups: int, sms: int) -> float:
    """Fraction (0, 1] of the large-GEMM rate that ``groups`` independent ``m`` x ``n`` x
    ``k`` GEMMs in one kernel reach on ``sms`` SMs (see the module docstring)."""
    if min(m, n, k, groups, sms) < 1:
        raise ValueError(f"gemm shape: m, n, k, groups and sms must be >= 1 (got {m}, {n}, "
                         f"{k}, {groups}, {sms})")
    best = 0.0
    for rows, cols in TILES:
        per_sm = max(1, FULL_TILE // (rows * cols))
        slots = sms * per_sm
        tiles = math.ceil(m / rows) * math.ceil(n / cols) * groups
        filled = max(_filled(tiles * split, slots) for split in
                     range(1, max(1, min(MAX_SPLIT_K, k // SPLIT_K_MIN)) + 1))
        useful = m * n * groups / (tiles * rows * cols)
        best = max(best, useful * filled * tile_efficiency(rows, cols))
    return best


def _filled(blocks: int, slots: int) -> float:
    """Fraction of the waves' thread-block slots that ``blocks`` fill."""
    return blocks / (math.ceil(blocks / slots) * slots)


@lru_cache(maxsize=65536)
def attention_utilization(seq: int, sequences: int, sms: int) -> float:
    """Fraction (0, 1] of the fused attention kernel's full rate on ``sms`` SMs for
    ``sequences`` (batch x heads) attention problems of ``seq`` queries each."""
    if min(seq, sequences, sms) < 1:
        raise ValueError(f"attention shape: seq, sequences and sms must be >= 1 (got {seq}, "
                         f"{sequences}, {sms})")
    blocks = math.ceil(seq / ATTENTION_BLOCK) * sequences
    waves = math.ceil(blocks / sms)
    return seq * sequences / (waves * sms * ATTENTION_BLOCK)
