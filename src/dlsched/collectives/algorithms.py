"""Cost of one collective stage on one dimension (Themis paper, Table 1).

A stage is one phase (Reduce-Scatter, All-Gather or All-to-All) of one chunk over one
dimension. ``data`` is the per-NPU size the stage works on in bytes: for RS and AG the larger
of its input and output, for All-to-All the buffer that is exchanged. A stage costs
``steps x step latency + bytes sent / bandwidth`` seconds, the dimension's algorithm's
formulas in ``sim.collective_cost``.
"""

from __future__ import annotations

from enum import StrEnum

from dlsched.hardware.topology import Dimension
from dlsched.sim.collective_cost import phase_bytes, phase_steps


class Phase(StrEnum):
    """What a stage does on its dimension."""

    REDUCE_SCATTER = "RS"
    ALL_GATHER = "AG"
    ALL_TO_ALL = "A2A"


def stage_steps(dim: Dimension, phase: Phase) -> int:
    """Number of latency-paying steps of the dimension's algorithm
    (``sim.collective_cost.phase_steps``)."""
    return phase_steps(dim.algorithm, dim.size)


def stage_bytes(dim: Dimension, phase: Phase, data: float) -> float:
    """Bytes one NPU sends in the stage (``sim.collective_cost.phase_bytes``)."""
    return phase_bytes(dim.algorithm, dim.size, data, phase is Phase.ALL_TO_ALL)


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
