"""How each training policy plans the collectives of an iteration while they are issued.

One mechanism with four parameters (``TrainingPolicy``): where each chunk's dimension order
comes from, the intra-dimension service order, whether the planner sees the work already queued
on the network, and whether collectives are prioritised by when their result is needed.

* ``baseline`` — hierarchical orders (RS dim 1..D, AG D..1), FIFO service, no priorities.
* ``themis`` — Rashidi et al., ISCA 2022, as published: the per-collective load tracker, reset
  for every collective (it does not see other collectives in flight), SCF service.
* ``themis-inflight`` — the same tracker started from the predicted work every queued or running
  collective still has on each dimension.
* ``dlsched`` — ours: for every chunk, the dimension order (of all D! orders) that minimises the
  most-loaded dimension given the work already queued, in-flight-aware like the variant above;
  collectives served by the position of the compute task that waits for them (the layer
  that waits first goes first: blocking model-parallel collectives, then the gradients of the
  first layers, as in data-parallel priority scheduling such as ByteScheduler), SCF within a
  priority; and a chunk count per collective that balances pipelining against step latency
  (``adaptive_chunks``). Like Themis it plans offline (the schedule repeats every iteration),
  so ``run_training`` simulates the candidates in ``DLSCHED_CANDIDATES`` — these settings with
  and without priorities, Themis's tracker with adaptive chunks, and Themis as published — and
  keeps the fastest: never slower than Themis.
* ``ideal`` — the paper's Ideal: every collective moves its bytes at the summed bandwidth of
  its dimensions (each dimension carries a share proportional to its bandwidth, no step
  latency), served by need like ``dlsched``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np

from dlsched.collectives.algorithms import stage_latency
from dlsched.collectives.astra_compat import AstraCompat
from dlsched.collectives.bounds import bytes_per_npu, order_loads
from dlsched.collectives.network import FlowStage
from dlsched.collectives.plan import (
    ChunkRoute,
    CollectiveOp,
    CollectivePlan,
    IntraPolicy,
    equal_chunks,
    route_from_order,
)
from dlsched.collectives.policies.baseline import baseline_order
from dlsched.collectives.policies.themis import themis_orders
from dlsched.collectives.simulate import plan_flows
from dlsched.hardware.topology import Topology
from dlsched.training.groups import SubTopology

OrderSource = Callable[[Topology, CollectiveOp, list[int], np.ndarray | None],
                       list[tuple[int, ...]]]


def _baseline_orders(topology: Topology, op: CollectiveOp, sizes: list[int],
                     offset: np.ndarray | None) -> list[tuple[int, ...]]:
    return [baseline_order(len(topology.dims), op)] * len(sizes)


@cache
def _order_columns(topology: Topology, op: CollectiveOp) -> tuple[
        list[tuple[int, ...]], list[tuple[float, ...]], list[float]]:
    """Every dimension order (the baseline first), its seconds per byte on each dimension and
    their sum."""
    orders = [baseline_order(len(topology.dims), op)]
    orders += [o for o in itertools.permutations(range(len(topology.dims))) if o != orders[0]]
    columns = [tuple(float(x) for x in order_loads(topology, op, order)) for order in orders]
    return orders, columns, [sum(column) for column in columns]


def min_max_orders(topology: Topology, op: CollectiveOp, sizes: list[int],
                   offset: np.ndarray | None) -> list[tuple[int, ...]]:
    """Per chunk, the order whose transfer load (seconds per dimension) added to the current
    load minimises the most-loaded dimension; ties go to the baseline order, then to the
    smallest total load. ``offset``: seconds already queued per dimension. (Plain Python:
    with at most 24 orders of 4 dimensions it is faster than numpy per chunk.)"""
    orders, columns, totals = _order_columns(topology, op)
    load = [0.0] * len(topology.dims) if offset is None else [float(x) for x in offset]
    result = []
    for size in sizes:
        candidates = [[own + per_byte * size for own, per_byte in zip(load, column, strict=True)]
                      for column in columns]
        peaks = [max(candidate) for candidate in candidates]
        limit = min(peaks) * (1 + 1e-12)
        best = [index for index, peak in enumerate(peaks) if peak <= limit]
        pick = min(best, key=totals.__getitem__) if len(best) > 1 else best[0]
        load = candidates[pick]
        result.append(orders[pick])
    return result


@dataclass(frozen=True)
class TrainingPolicy:
    """A collective policy for whole iterations (see the module docstring)."""

    name: str
    orders: OrderSource | None
    intra: IntraPolicy
    inflight: bool
    prioritized: bool
    adaptive_chunks: bool = False
    compat: AstraCompat | None = None

    def flows(self, sub: SubTopology, op: CollectiveOp, size: int, chunks: int,
              load: np.ndarray) -> list[list[FlowStage]]:
        """Chunk flows of one collective of ``size`` bytes per NPU over ``sub`` split into
        ``chunks`` chunks; ``load``: seconds of queued work per physical dimension."""
        assert sub.topology is not None
        if self.orders is None:
            return _ideal_flows(sub, op, size, chunks)
        if self.adaptive_chunks:
            chunks = adaptive_chunk_count(sub.topology, op, size, chunks)
        if not self.inflight:
            return _static_flows(self, sub, op, size, chunks)
        offset = load[list(sub.dim_map)]
        return _plan_flows(self, sub, op, size, chunks, offset)

    def priority(self, need: float) -> float:
        """Queue priority of a collective whose result is first needed by compute task
        ``need`` (its position in the run's compute order; lower is served first)."""
        return need if self.prioritized else 0.0


def adaptive_chunk_count(topology: Topology, op: CollectiveOp, size: int, most: int) -> int:
    """Chunks for a collective of ``size`` bytes: a pipeline of C chunks over a route of n
    stages takes about T/n x (1 + (n - 1)/C) + C x L, T being its transfer time alone and L
    the step latency of one chunk's route, minimised at C = sqrt(T (n - 1) / (n L)); clipped
    to [1, ``most``]; ``most`` when there is no latency."""
    route = route_from_order(op, baseline_order(len(topology.dims), op))
    latency = sum(stage_latency(topology.dims[s.dim], s.phase) for s in route)
    if latency <= 0:
        return most
    transfer = bytes_per_npu(topology, op, size) / topology.total_bandwidth * len(topology.dims)
    best = math.sqrt(transfer * (len(route) - 1) / (len(route) * latency))
    return max(1, min(most, round(best)))


def _orders(policy: TrainingPolicy, topology: Topology, op: CollectiveOp, sizes: list[int],
            offset: np.ndarray | None) -> list[tuple[int, ...]]:
    if len(topology.dims) == 1:
        return [(0,)] * len(sizes)
    if policy.compat is not None and policy.orders is _themis:
        return policy.compat.themis_orders(topology, op, sizes)
    assert policy.orders is not None
    return policy.orders(topology, op, sizes, offset)


def _plan_flows(policy: TrainingPolicy, sub: SubTopology, op: CollectiveOp, size: int,
                chunks: int, offset: np.ndarray | None) -> list[list[FlowStage]]:
    topology = sub.topology
    assert topology is not None
    sizes = equal_chunks(size, max(1, min(chunks, size)))
    orders = _orders(policy, topology, op, sizes, offset)
    # Equal chunks differ by at most a byte and take few orders: plan each distinct one once.
    distinct: dict[tuple[int, tuple[int, ...]], list[FlowStage]] = {}
    for chunk_size, order in zip(sizes, orders, strict=True):
        if (chunk_size, order) not in distinct:
            route = ChunkRoute(0, chunk_size, route_from_order(op, order))
            plan = CollectivePlan(topology, op, chunk_size, (route,), policy=policy.name)
            distinct[chunk_size, order] = (
                plan_flows(plan, sub.dim_map) if policy.compat is None
                else policy.compat.flows(plan, sub.dim_map))[0]
    return [distinct[pair] for pair in zip(sizes, orders, strict=True)]


@cache
def _static_flows(policy: TrainingPolicy, sub: SubTopology, op: CollectiveOp, size: int,
                  chunks: int) -> list[list[FlowStage]]:
    return _plan_flows(policy, sub, op, size, chunks, None)


@cache
def _ideal_flows(sub: SubTopology, op: CollectiveOp, size: int,
                 chunks: int) -> list[list[FlowStage]]:
    topology = sub.topology
    assert topology is not None
    total = bytes_per_npu(topology, op, size)
    flows = []
    for index, dim in zip(sub.dim_map, topology.dims, strict=True):
        share = total * dim.bandwidth / topology.total_bandwidth
        flows += [[FlowStage(index, 0.0, share / chunks, "ideal")] for _ in range(chunks)]
    return flows


def _themis(topology: Topology, op: CollectiveOp, sizes: list[int],
            offset: np.ndarray | None) -> list[tuple[int, ...]]:
    return themis_orders(topology, op, sizes, None if offset is None else list(offset))


TRAINING_POLICIES: dict[str, TrainingPolicy] = {
    "baseline": TrainingPolicy("baseline", _baseline_orders, IntraPolicy.FIFO, False, False),
    "themis": TrainingPolicy("themis", _themis, IntraPolicy.SCF, False, False),
    "themis-inflight": TrainingPolicy("themis-inflight", _themis, IntraPolicy.SCF, True, False),
    "dlsched": TrainingPolicy("dlsched", min_max_orders, IntraPolicy.SCF, True, True, True),
    "ideal": TrainingPolicy("ideal", None, IntraPolicy.FIFO, False, True),
}
# What ``dlsched`` tries (its own settings first), each simulated; the fastest is kept.
DLSCHED_CANDIDATES: tuple[TrainingPolicy, ...] = (
    TRAINING_POLICIES["dlsched"],
    TrainingPolicy("dlsched/no-priority", min_max_orders, IntraPolicy.SCF, True, False, True),
    TrainingPolicy("dlsched/themis-orders", _themis, IntraPolicy.SCF, True, True, True),
    TrainingPolicy("dlsched/themis", _themis, IntraPolicy.SCF, False, False),
)
POLICY_ALIASES = {"ours": "dlsched"}
