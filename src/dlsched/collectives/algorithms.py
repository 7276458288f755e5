"""Cost of one collective stage on one dimension (Themis paper, Table 1).

A stage is one phase (Reduce-Scatter, All-Gather or All-to-All) of one chunk over one
dimension. ``data`` is the per-NPU size the stage works on in bytes: for RS and AG the larger
of its input and output, for All-to-All the buffer that is exchanged. A stage costs
``steps x step latency + bytes sent / bandwidth`` seconds.
"""

from __future__ import annotations

import math
from enum import StrEnum

from dlsched.hardware.topology import DimAlgorithm, Dimension


class Phase(StrEnum):
    """What a stage does on its dimension."""

    REDUCE_SCATTER = "RS"
    ALL_GATHER = "AG"
    ALL_TO_ALL = "A2A"


def stage_steps(dim: Dimension, phase: Phase) -> int:
    """Number of latency-paying steps of the dimension's algorithm."""
    if dim.algorithm is DimAlgorithm.DIRECT:
        return 1
    if dim.algorithm is DimAlgorithm.HALVING_DOUBLING:
        return int(math.log2(dim.size))
    return dim.size - 1


def stage_bytes(dim: Dimension, phase: Phase, data: float) -> float:
    """Bytes one NPU sends in the stage.

    RS/AG: (P-1)/P x data for every algorithm (ring: P-1 messages of data/P; direct: the same
    bytes to all peers at once; halving-doubling: data/2 + data/4 + ...). All-to-All: direct
    sends (P-1)/P x data; a ring forwards each of the P-1 pieces of data/P over its shorter
    way round, min(h, P-h) hops; halving-doubling (Bruck) sends data/2 in each of log2 P steps.
    """
    size = dim.size
    if phase is not Phase.ALL_TO_ALL or dim.algorithm is DimAlgorithm.DIRECT:
        return data * (size - 1) / size
    if dim.algorithm is DimAlgorithm.HALVING_DOUBLING:
        return data / 2 * math.log2(size)
    return data / size * sum(min(h, size - h) for h in range(1, size))


def stage_latency(dim: Dimension, phase: Phase) -> float:
    """Fixed part of a stage's cost: steps x step latency, seconds."""
    return stage_steps(dim, phase) * dim.latency


def stage_time(dim: Dimension, phase: Phase, data: float) -> float:
    """Time of a stage running alone on its dimension, seconds."""
    return stage_latency(dim, phase) + stage_bytes(dim, phase, data) / dim.bandwidth


def data_after(dim: Dimension, phase: Phase, data_in: float) -> float:
    """Per-NPU chunk size after the stage: RS divides by P, AG multiplies, A2A keeps it."""
    if phase is Phase.REDUCE_SCATTER:
        return data_in / dim.size
    if phase is Phase.ALL_GATHER:
        return data_in * dim.size
    return data_in


def stage_data(dim: Dimension, phase: Phase, data_in: float) -> float:
    """The ``data`` argument of a stage whose input is ``data_in`` bytes per NPU."""
    return max(data_in, data_after(dim, phase, data_in))
