"""dlsched's own policy, "balanced": an exact order mix plus a simulated search over chunking.

Themis balances dimensions greedily, one chunk at a time, from predicted loads. "balanced"
instead solves for the mix of dimension orders that minimises the most-loaded dimension exactly
(an LP over the D! orders, see ``order_mix``), then hands orders to chunks so that every prefix
of the chunk sequence follows that mix as closely as possible (largest deficit first), which
also starts different chunks on different dimensions and fills the pipeline quickly. With step
latency, a second mix also counts each dimension's latency as fixed load, which moves transfer
work off latency-heavy dimensions.

Load balance is not the whole story: pipeline fill and drain, and the step latency that every
chunk-stage pays, cost time too. So the policy searches, scoring each candidate by simulation:

1. the baseline's and Themis's own plans (so "balanced" is never slower than either under the
   same intra-dimension order);
2. the exact mix at the requested concurrency and, with step latency, at 2x and 4x as many
   chunks per dimension (one chunk's latency then overlaps another's transfer); the fastest
   concurrency is kept for step 3;
3. at that concurrency, every chunking — the requested count, 2x and 4x as many while that
   stays within 64 chunks, and with step latency 1/2 and 1/4 as many; equal sizes, or sizes
   tapered at both ends so fill and drain are short — with every order source (baseline,
   Themis, exact mix, latency-aware mix).

The fastest plan wins (ties: the first found)."""

from __future__ import annotations

import itertools
import math
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
from dlsched.collectives.policies.baseline import baseline_order, baseline_plan
from dlsched.collectives.policies.themis import themis_orders
from dlsched.collectives.request import CollectiveRequest
from dlsched.collectives.simulate import execute_plan
from dlsched.hardware.topology import Topology

# Relative chunk weights at each end of a tapered chunking (the middle chunks weigh 1).
TAPER = (0.25, 0.5)
# Requests for fewer chunks than this also try 2x and 4x as many (up to this count).
MORE_CHUNKS_UP_TO = 64


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
    more = (2 * request.num_chunks, 4 * request.num_chunks)
    counts += [c for c in more if c <= MORE_CHUNKS_UP_TO]
    if has_latency:
        counts += [c for c in (request.num_chunks // 2, request.num_chunks // 4) if c >= 2]
    chunkings = []
    for count in counts:
        chunkings.append(equal_chunks(request.size, count))
        if count > 2 * len(TAPER) + 1:
            weights = [*TAPER, *([1.0] * (count - 2 * len(TAPER))), *reversed(TAPER)]
            chunkings.append(weighted_chunks(request.size, weights))
    return [c for c in chunkings if min(c) > 0]


def _order_sets(request: CollectiveRequest, sizes: list[int],
                concurrency: int) -> list[list[tuple[int, ...]]]:
    topology, op = request.topology, request.op
    sets = [[baseline_order(len(topology.dims), op)] * len(sizes),
            themis_orders(topology, op, sizes), mix_orders(topology, op, sizes)]
    if any(d.latency > 0 for d in topology.dims):
        offset = latency_load(topology, op, len(sizes), concurrency)
        sets.append(mix_orders(topology, op, sizes, offset))
    return sets


class _Search:
    """Simulates candidate plans once each and remembers the fastest."""

    def __init__(self, request: CollectiveRequest) -> None:
        self.request = request
        self.times: dict[tuple, float] = {}
        self.best_time = math.inf
        self.best_plan = baseline_plan(request)

    def consider(self, sizes: list[int], orders: list[tuple[int, ...]],
                 concurrency: int) -> float:
        key = (tuple(sizes), tuple(orders), concurrency)
        if key not in self.times:
            plan = self.request.plan("balanced", sizes, orders, concurrency)
            self.times[key] = execute_plan(plan, record=False).time
            if self.times[key] < self.best_time:
                self.best_time, self.best_plan = self.times[key], plan
        return self.times[key]


def balanced_plan(request: CollectiveRequest) -> CollectivePlan:
    """The fastest plan found by the three-step search described in the module docstring."""
    has_latency = any(d.latency > 0 for d in request.topology.dims)
    search = _Search(request)
    equal = equal_chunks(request.size, request.num_chunks)
    for orders in _order_sets(request, equal, request.concurrency)[:2]:
        search.consider(equal, orders, request.concurrency)
    concurrencies = [request.concurrency]
    if has_latency:
        concurrencies += [2 * request.concurrency, 4 * request.concurrency]
    best_concurrency = min(concurrencies, key=lambda c: search.consider(
        equal, _order_sets(request, equal, c)[-1], c))
    for sizes in _chunkings(request, has_latency):
        for orders in _order_sets(request, sizes, best_concurrency):
            search.consider(sizes, orders, best_concurrency)
    return search.best_plan
