"""What a collective costs on a group of ``size`` NPUs, one formula per algorithm.

The one place where dlsched writes the cost of ring, tree, halving-doubling and direct
collectives (the collectives' per-dimension stages, the data-parallel all-reduce models and the
pipeline's ring all-reduce of replicated stages all use it). Units: bytes, seconds,
bytes/s. ``data`` is the per-NPU buffer a phase works on: for Reduce-Scatter and All-Gather
the larger of its input and output, for All-to-All the buffer exchanged.

A phase (Reduce-Scatter, All-Gather or All-to-All) costs ``phase_steps x step latency +
phase_bytes / bandwidth`` alone on its links (Themis paper, Table 1); an All-Reduce is a
Reduce-Scatter then an All-Gather, so ``2 x`` the steps and bytes of one.
"""

from __future__ import annotations

import math
from collections.abc import Callable

RING = "ring"
DIRECT = "direct"
HALVING_DOUBLING = "halving-doubling"
TREE = "tree"


def phase_steps(algorithm: str, size: int) -> int:
    """Latency-paying steps of one phase over ``size`` NPUs: ring P-1, halving-doubling
    log2 P, direct 1 (every peer at once)."""
    if algorithm == DIRECT:
        return 1
    if algorithm == HALVING_DOUBLING:
        return int(math.log2(size))
    return size - 1


def phase_bytes(algorithm: str, size: int, data: float, all_to_all: bool = False) -> float:
    """Bytes one NPU sends in one phase on ``data`` bytes.

    RS/AG: (P-1)/P x data for every algorithm (ring: P-1 messages of data/P; direct: the same
    bytes to all peers at once; halving-doubling: data/2 + data/4 + ...). All-to-All: direct
    sends (P-1)/P x data; a ring forwards each of the P-1 pieces of data/P over its shorter
    way round, min(h, P-h) hops; halving-doubling (Bruck) sends data/2 in each of log2 P steps.
    """
    if not all_to_all or algorithm == DIRECT:
        return data * (size - 1) / size
    if algorithm == HALVING_DOUBLING:
        return data / 2 * math.log2(size)
    return data / size * sum(min(h, size - h) for h in range(1, size))


def ring_allreduce_steps(size: int) -> int:
    """Steps of a ring All-Reduce over ``size`` NPUs: 2(P-1), each moving data/P per NPU."""
    return 2 * (size - 1)


def allreduce_alpha_beta(algorithm: str, size: int, bandwidth: float,
                         latency: float) -> tuple[float, float]:
    """(alpha s, beta s/byte) of an All-Reduce over ``size`` NPUs whose links move
    ``bandwidth`` bytes/s after ``latency`` seconds per step: it costs alpha + beta x bytes.

    ring: 2(P-1) steps, 2(P-1)/P x bytes per link; tree (pipelined double binary tree, reduce
    up then broadcast down a tree of depth ceil(log2 P)): 2 ceil(log2 P) steps, every byte
    crosses a link twice; halving-doubling and direct: twice one phase's steps and bytes.
    """
    if algorithm == RING:
        return (ring_allreduce_steps(size) * latency,
                ring_allreduce_steps(size) / size / bandwidth)
    if algorithm == TREE:
        return 2 * math.ceil(math.log2(size)) * latency, 2 / bandwidth
    return (2 * phase_steps(algorithm, size) * latency,
            2 * phase_bytes(algorithm, size, 1.0) / bandwidth)


def ring_allreduce_time(size: int, num_bytes: float,
                        step_time: Callable[[float], float]) -> float:
    """Seconds of a ring All-Reduce of ``num_bytes`` over ``size`` NPUs alone on its links:
    2(P-1) steps, each as long as its slowest link takes to move ``num_bytes / P``
    (``step_time(bytes)`` gives that, seconds); 0 for one NPU."""
    if size == 1:
        return 0.0
    return ring_allreduce_steps(size) * step_time(num_bytes / size)
