"""Lower bounds on the time of a collective (seconds).

* ``ideal_time`` — the Themis paper's "100% bandwidth utilised" time: per-NPU bytes sent by the
  hierarchical collective divided by the sum of the dimension bandwidths. The bytes do not
  depend on the dimension order (2S(1-1/P) for an All-Reduce), so no plan can beat it.
* ``order_mix_bound`` — tighter and still provable: the bytes one chunk puts on each dimension
  depend on its dimension order, and any plan's per-dimension load is a size-weighted mix of
  the per-order loads. Every dimension must carry its load at no more than its bandwidth, so
  the plan takes at least min over mixes of max over dimensions of load/bandwidth: a small LP
  over the D! orders (solved exactly by HiGHS). Latency is left out (the bandwidth-only bound).
* ``latency_bound`` — the order-mix LP plus the step latency no schedule can hide: a chunk's
  transfer on a dimension cannot start before the latencies of its earlier stages and its own
  have passed (its *release*), and must end early enough for the latencies of its later stages
  (its *tail*). A dimension moves at most its bandwidth, so for every window [a, T - b] the
  transfer work of the stages released at or after a with tails of at least b must fit in
  T - b - a (the preemptive single-machine feasibility condition). Proof and scope in
  docs/collectives.md ("Bounds").
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cache

import numpy as np

from dlsched.collectives.algorithms import stage_latency
from dlsched.collectives.order_mix import min_max_mix
from dlsched.collectives.plan import (
    ChunkRoute,
    CollectiveOp,
    route_from_order,
    route_stage_data,
)
from dlsched.hardware.topology import Topology


def order_loads(topology: Topology, op: CollectiveOp, order: tuple[int, ...],
                ag_order: tuple[int, ...] | None = None) -> np.ndarray:
    """Transfer time (s) each dimension spends on one byte of buffer sent with this order."""
    route = ChunkRoute(0, 1, route_from_order(op, order, ag_order))
    loads = np.zeros(len(topology.dims))
    for stage, _, sent in route_stage_data(topology, op, route):
        loads[stage.dim] += sent / topology.dims[stage.dim].bandwidth
    return loads


def bytes_per_npu(topology: Topology, op: CollectiveOp, size: int) -> float:
    """Bytes one NPU sends in the hierarchical collective (independent of dimension order)."""
    route = ChunkRoute(0, size, route_from_order(op, tuple(range(len(topology.dims)))))
    return sum(sent for _, _, sent in route_stage_data(topology, op, route))


def ideal_time(topology: Topology, op: CollectiveOp, size: int) -> float:
    """Per-NPU bytes / sum of dimension bandwidths, seconds (the paper's ideal)."""
    return bytes_per_npu(topology, op, size) / topology.total_bandwidth


def _halves(op: CollectiveOp) -> list[CollectiveOp]:
    """The independently ordered halves of a chunk's route: an All-Reduce chunk is an RS and
    then an AG of the same size (its AG order need not mirror the RS order)."""
    if op is CollectiveOp.ALL_REDUCE:
        return [CollectiveOp.REDUCE_SCATTER, CollectiveOp.ALL_GATHER]
    return [op]


@cache
def _mix_bound_per_byte(topology: Topology, op: CollectiveOp) -> float:
    orders = list(itertools.permutations(range(len(topology.dims))))
    columns, groups = [], []
    for half in _halves(op):
        groups.append(range(len(columns), len(columns) + len(orders)))
        columns += [order_loads(topology, half, o) for o in orders]
    return min_max_mix(columns, groups)[1]


@dataclass(frozen=True)
class _Job:
    """The transfer one routing column puts on one dimension: ``load`` seconds per byte of
    buffer, possible only ``release`` s after the chunk starts and ``tail`` s before it ends."""

    column: int
    dim: int
    release: float
    tail: float
    load: float


@cache
def _latency_jobs(topology: Topology,
                  op: CollectiveOp) -> tuple[list[range], list[_Job], float]:
    """Columns (one per order of each half), their jobs and a chunk's total latency (s)."""
    dims = topology.dims
    orders = list(itertools.permutations(range(len(dims))))
    halves = _halves(op)
    half_latency = [sum(stage_latency(dims[s.dim], s.phase)
                        for s in route_from_order(h, orders[0])) for h in halves]
    total = sum(half_latency)
    groups, jobs = [], []
    for index, half in enumerate(halves):
        before = sum(half_latency[:index])
        start = len(groups) * len(orders)
        groups.append(range(start, start + len(orders)))
        for offset, order in enumerate(orders):
            elapsed = before
            route = ChunkRoute(0, 1, route_from_order(half, order))
            for stage, _, sent in route_stage_data(topology, half, route):
                elapsed += stage_latency(dims[stage.dim], stage.phase)
                jobs.append(_Job(start + offset, stage.dim, elapsed, total - elapsed,
                                 sent / dims[stage.dim].bandwidth))
    return groups, jobs, total


def _window_rows(jobs: list[_Job], total: float,
                 size: int) -> tuple[list[np.ndarray], list[float]]:
    """One constraint row per dimension and window (a, b): coefficients per column (s) of the
    work that must fit in [a, T - b], and the offset a + b (s). Windows with a + b above a
    chunk's total latency hold no job and are left out (T >= total covers them)."""
    eps = 1e-15 + 1e-12 * total
    num_columns = max(j.column for j in jobs) + 1
    rows, offsets = [np.zeros(num_columns)], [total]
    for dim in sorted({j.dim for j in jobs}):
        mine = [j for j in jobs if j.dim == dim]
        for a in sorted({0.0} | {j.release for j in mine}):
            for b in sorted({0.0} | {j.tail for j in mine}):
                if a + b > total + eps:
                    continue
                row = np.zeros(num_columns)
                for job in mine:
                    if job.release >= a - eps and job.tail >= b - eps:
                        row[job.column] += job.load * size
                rows.append(row)
                offsets.append(a + b)
    return rows, offsets


@cache
def latency_bound(topology: Topology, op: CollectiveOp, size: int) -> float:
    """Lower bound (s) counting bandwidth and the step latency no plan can hide (>= the order-mix
    bound; equal to it without latency). Holds for every chunking, order, concurrency and
    intra-dimension order the simulator allows."""
    bandwidth_only = order_mix_bound(topology, op, size)
    groups, jobs, total = _latency_jobs(topology, op)
    if total == 0:
        return bandwidth_only
    rows, offsets = _window_rows(jobs, total, size)
    matrix = np.array(rows)
    columns = [matrix[:, c] for c in range(matrix.shape[1])]
    return max(min_max_mix(columns, groups, np.array(offsets))[1], bandwidth_only, total)


def order_mix_bound(topology: Topology, op: CollectiveOp, size: int) -> float:
    """The LP bound above for a buffer of ``size`` bytes, seconds (>= ideal_time)."""
    return max(_mix_bound_per_byte(topology, op) * size, ideal_time(topology, op, size))
