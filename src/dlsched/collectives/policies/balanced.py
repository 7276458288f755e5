"""dlsched's own policy, "balanced": an exact order mix plus a simulated search over chunking.

Themis balances dimensions greedily, one chunk at a time, from predicted loads. "balanced"
instead solves for the mix of dimension orders that minimises the most-loaded dimension exactly
(an LP over the D! orders, see ``order_mix``), then hands orders to chunks so that every prefix
of the chunk sequence follows that mix as closely as possible (largest deficit first), which
also starts different chunks on different dimensions and fills the pipeline quickly.

Load balance is not the whole story: pipeline fill and drain, and the step latency every
chunk-stage pays, cost time too. So the policy builds a handful of candidate plans — order
source (the exact mix, or Themis's greedy orders) x chunking (the requested count, and with
step latency also 1/2 and 1/4 as many chunks; equal sizes or sizes tapered at both ends so
fill and drain are short) x concurrency (the requested one, and with step latency 2x and 4x
as many chunks per dimension, so one chunk's latency overlaps another's transfer) x, with step
latency, a third order source: the exact mix that also counts each dimension's step latency
as fixed load, which moves transfer work off latency-heavy dimensions — simulates
each and keeps the fastest. Themis's own plan is among the candidates, so "balanced" is never
slower than Themis under the same intra-dimension order.
"""

from __future__ import annotations

import itertools
from functools import cache

import numpy as np

from dlsched.collectives.algorithms import stage_latency
from dlsched.collectives.bounds import order_loads
from dlsched.collectives.order_mix import min_max_mix
from dlsched.collectives.plan import (
    CollectiveOp,
    CollectivePlan,
    equal_chunks,
    route_from_order,
    weighted_chunks,
)
from dlsched.collectives.policies.themis import themis_orders
from dlsched.collectives.request import CollectiveRequest
from dlsched.collectives.simulate import execute_plan
from dlsched.hardware.topology import Topology

# Relative chunk weights at each end of a tapered chunking (the middle chunks weigh 1).
TAPER = (0.25, 0.5)


@cache
def _order_loads(topology: Topology, op: CollectiveOp) -> tuple[list[tuple[int, ...]], np.ndarray]:
    orders = list(itertools.permutations(range(len(topology.dims))))
    return orders, np.column_stack([order_loads(topology, op, order) for order in orders])


def latency_load(topology: Topology, op: CollectiveOp, num_chunks: int,
                 concurrency: int) -> np.ndarray:
    """Seconds each dimension spends in step latency for ``num_chunks`` chunks, divided by the
    chunks it runs at once (latency is the same whatever a chunk's dimension order)."""
    route = route_from_order(op, tuple(range(len(topology.dims))))
    load = np.zeros(len(topology.dims))
    for stage in route:
        load[stage.dim] += stage_latency(topology.dims[stage.dim], stage.phase)
    return load * num_chunks / concurrency


def mix_orders(topology: Topology, op: CollectiveOp, chunk_sizes: list[int],
               offset: np.ndarray | None = None) -> list[tuple[int, ...]]:
    """Orders for each chunk following the order mix that minimises the most-loaded dimension
    (``offset``: seconds of fixed load per dimension), handed out largest deficit first."""
    orders, loads = _order_loads(topology, op)
    columns = list((loads * sum(chunk_sizes)).T)
    weights, _ = min_max_mix(columns, [range(len(orders))], offset)
    assigned = np.zeros(len(orders))
    total = 0.0
    result = []
    for size in chunk_sizes:
        total += size
        pick = int(np.argmax(weights * total - assigned))
        assigned[pick] += size
        result.append(orders[pick])
    return result


def _chunkings(request: CollectiveRequest, has_latency: bool) -> list[list[int]]:
    counts = [request.num_chunks]
    if has_latency:
        counts += [c for c in (request.num_chunks // 2, request.num_chunks // 4) if c >= 2]
    chunkings = []
    for count in counts:
        chunkings.append(equal_chunks(request.size, count))
        if count > 2 * len(TAPER) + 1:
            weights = [*TAPER, *([1.0] * (count - 2 * len(TAPER))), *reversed(TAPER)]
            chunkings.append(weighted_chunks(request.size, weights))
    return [c for c in chunkings if min(c) > 0]


def candidate_plans(request: CollectiveRequest) -> list[CollectivePlan]:
    """Every distinct plan the search compares, Themis's equal-chunk plan first."""
    topology, op = request.topology, request.op
    has_latency = any(d.latency > 0 for d in topology.dims)
    concurrencies = [request.concurrency]
    if has_latency:
        concurrencies += [2 * request.concurrency, 4 * request.concurrency]
    plans: dict[tuple, CollectivePlan] = {}
    for sizes in _chunkings(request, has_latency):
        for concurrency in concurrencies:
            order_sets = [themis_orders(topology, op, sizes), mix_orders(topology, op, sizes)]
            if has_latency:
                offset = latency_load(topology, op, len(sizes), concurrency)
                order_sets.append(mix_orders(topology, op, sizes, offset))
            for orders in order_sets:
                key = (tuple(sizes), tuple(orders), concurrency)
                plans.setdefault(key, request.plan("balanced", sizes, orders, concurrency))
    return list(plans.values())


def balanced_plan(request: CollectiveRequest) -> CollectivePlan:
    """The fastest candidate plan (ties: the earliest candidate)."""
    plans = candidate_plans(request)
    times = [execute_plan(plan, record=False).time for plan in plans]
    return plans[int(np.argmin(times))]
