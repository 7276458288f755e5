"""Collective plans: each chunk's route (its stages over the dimensions), and their validator.

A plan is plain immutable data. Its string form lists one chunk per line, e.g.
``c0 16MB: RS0 RS1 AG1 AG0`` (stage = phase + dimension index, dimension 0 first).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

from dlsched.collectives.algorithms import Phase, data_after, stage_bytes, stage_data
from dlsched.errors import PlanError
from dlsched.hardware.topology import Topology
from dlsched.units import format_bytes


class CollectiveOp(StrEnum):
    """The collective operation; ``size`` is always the per-NPU buffer (input for RS, output for
    AG, both for All-Reduce and All-to-All)."""

    ALL_REDUCE = "all-reduce"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_GATHER = "all-gather"
    ALL_TO_ALL = "all-to-all"


class IntraPolicy(StrEnum):
    """Which waiting chunk a free dimension serves next."""

    FIFO = "fifo"
    SCF = "scf"


@dataclass(frozen=True, slots=True)
class Stage:
    """One phase of one chunk on one dimension (``dim`` is 0-based)."""

    phase: Phase
    dim: int

    def __str__(self) -> str:
        return f"{self.phase.value}{self.dim}"


@dataclass(frozen=True)
class ChunkRoute:
    """A chunk of ``size`` bytes of the per-NPU buffer and the stages it passes, in order."""

    chunk: int
    size: int
    stages: tuple[Stage, ...]


@dataclass(frozen=True)
class CollectivePlan:
    """What a policy decides: chunk sizes, routes, intra-dimension order and concurrency."""

    topology: Topology
    op: CollectiveOp
    size: int
    routes: tuple[ChunkRoute, ...]
    intra: IntraPolicy = IntraPolicy.FIFO
    concurrency: int = 1
    policy: str = ""

    def __str__(self) -> str:
        return "\n".join(
            f"c{r.chunk} {format_bytes(r.size)}: " + " ".join(str(s) for s in r.stages)
            for r in self.routes
        )


def initial_data(topology: Topology, op: CollectiveOp, chunk_size: float) -> float:
    """Per-NPU bytes a chunk holds before its first stage (an All-Gather starts scattered)."""
    if op is CollectiveOp.ALL_GATHER:
        return chunk_size / topology.num_npus
    return float(chunk_size)


def route_stage_data(topology: Topology, op: CollectiveOp,
                     route: ChunkRoute) -> list[tuple[Stage, float, float]]:
    """For each stage of the route: (stage, input bytes per NPU, bytes sent per NPU)."""
    data = initial_data(topology, op, route.size)
    result = []
    for stage in route.stages:
        dim = topology.dims[stage.dim]
        sent = stage_bytes(dim, stage.phase, stage_data(dim, stage.phase, data))
        result.append((stage, data, sent))
        data = data_after(dim, stage.phase, data)
    return result


@lru_cache(maxsize=1 << 12)
def route_from_order(op: CollectiveOp, order: tuple[int, ...],
                     ag_order: tuple[int, ...] | None = None) -> tuple[Stage, ...]:
    """Stages for a dimension order: RS/AG/A2A over ``order``; All-Reduce adds AG over
    ``ag_order`` (default: the reverse of ``order``)."""
    if op is CollectiveOp.ALL_REDUCE:
        gather = tuple(reversed(order)) if ag_order is None else ag_order
        return tuple(Stage(Phase.REDUCE_SCATTER, d) for d in order) + tuple(
            Stage(Phase.ALL_GATHER, d) for d in gather)
    phase = {CollectiveOp.REDUCE_SCATTER: Phase.REDUCE_SCATTER,
             CollectiveOp.ALL_GATHER: Phase.ALL_GATHER,
             CollectiveOp.ALL_TO_ALL: Phase.ALL_TO_ALL}[op]
    return tuple(Stage(phase, d) for d in order)


def equal_chunks(size: int, num_chunks: int) -> list[int]:
    """Split ``size`` bytes into ``num_chunks`` sizes differing by at most one byte."""
    base, extra = divmod(size, num_chunks)
    return [base + (1 if i < extra else 0) for i in range(num_chunks)]


def weighted_chunks(size: int, weights: list[float]) -> list[int]:
    """Split ``size`` bytes (at least one per weight) in proportion to ``weights``
    (largest-remainder rounding), every chunk at least one byte: when rounding leaves a
    chunk empty (a few bytes over many weights), one byte each and the rest in proportion."""
    if size < len(weights):
        raise ValueError(f"{size} bytes cannot make {len(weights)} non-empty chunks")
    sizes = _proportional(size, weights)
    if min(sizes) > 0:
        return sizes
    return [1 + extra for extra in _proportional(size - len(weights), weights)]


def _proportional(size: int, weights: list[float]) -> list[int]:
    """``size`` bytes in proportion to ``weights``, largest-remainder rounding (may be 0)."""
    total = sum(weights)
    exact = [size * w / total for w in weights]
    sizes = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: (sizes[i] - exact[i], i))
    for i in by_remainder[: size - sum(sizes)]:
        sizes[i] += 1
    return sizes


def _expected_phases(op: CollectiveOp) -> list[Phase]:
    if op is CollectiveOp.ALL_REDUCE:
        return [Phase.REDUCE_SCATTER, Phase.ALL_GATHER]
    return [route_from_order(op, (0,))[0].phase]


def _route_problem(plan: CollectivePlan, route: ChunkRoute) -> str | None:
    num_dims = len(plan.topology.dims)
    if route.size <= 0:
        return f"chunk size must be > 0 bytes (got {route.size})"
    position = 0
    for phase in _expected_phases(plan.op):
        dims = [s.dim for s in route.stages[position:position + num_dims]]
        phases = {s.phase for s in route.stages[position:position + num_dims]}
        if phases != {phase} or sorted(dims) != list(range(num_dims)):
            return f"needs {phase.value} on every dimension 0..{num_dims - 1} exactly once here"
        position += num_dims
    if position != len(route.stages):
        return f"has {len(route.stages) - position} stage(s) beyond the operation's phases"
    return None


def validate_plan(plan: CollectivePlan) -> None:
    """Raise PlanError unless every chunk passes each phase on every dimension exactly once
    (RS before AG), chunk ids are 0..C-1 and chunk sizes add up to the buffer size."""
    problems: dict[int, str] = {}
    for index, route in enumerate(plan.routes):
        if route.chunk != index:
            problems[index] = f"chunk id {route.chunk} out of order (expected {index})"
        elif (problem := _route_problem(plan, route)) is not None:
            problems[index] = problem
    total = sum(r.size for r in plan.routes)
    if not problems and total != plan.size:
        raise PlanError(f"chunk sizes add up to {total} B, not the buffer size {plan.size} B")
    if plan.concurrency < 1:
        raise PlanError(f"concurrency must be >= 1 (got {plan.concurrency})")
    if problems:
        lines = [
            ("-> " if i in problems else "   ")
            + f"c{r.chunk}: " + " ".join(str(s) for s in r.stages)
            + (f"   <- {problems[i]}" if i in problems else "")
            for i, r in enumerate(plan.routes)
        ]
        raise PlanError("invalid collective plan:\n" + "\n".join(lines))
