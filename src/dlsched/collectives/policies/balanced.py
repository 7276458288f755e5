"""dlsched's own collective policy: order mixes and greedy orders, searched by simulation.

Themis balances dimensions greedily from predicted loads, one chunk at a time, with the chunk
count and concurrency it is given. This policy treats the chunk count, chunk shapes and the
chunks per dimension as its own choices (as a runtime that owns its communication library
would) and scores every candidate by simulating it:

1. the baseline's and Themis's own plans at the requested chunks and concurrency (so it is
   never slower than either under the same intra-dimension order);
2. with step latency, the number of chunks a dimension runs at once: one chunk's step latency
   then overlaps another's transfer. Concurrencies 1x the request and 4, 8, 12, 16, 24 are
   tried on a tapered 64-chunk plan with latency-weighted greedy orders;
3. at the two best concurrencies, every chunking — the requested count and 64 chunks with
   equal sizes, and 32, 64 and 96 chunks with sizes tapered at both ends (1/4, 1/2, 1, ...,
   1, 1/2, 1/4: short fill and drain) — with every order
   source: Themis's tracker, the exact order mix that minimises the most-loaded dimension (an
   LP over the D! orders, handed out largest deficit first), and a latency-weighted greedy
   tracker (each chunk's RS goes least-loaded dimension first, its AG retraces it; the tracker
   adds bytes / bandwidth plus lambda x the stage's step latency, lambda in 0, 0.05, 0.1, 0.2);
4. a local search on the best plan: a fixed-seed sequence of up to 50 single-chunk order
   changes, each kept if the simulated time drops;
5. when steps 1-4 end more than 5% above the latency-aware bound (small collectives, where
   step latency dominates): 4, 8 and 16 chunks (equal and tapered) with every order source at
   the same concurrencies. Tried last, so this step can only lower the time found before.

Steps 3 to 5 stop as soon as a plan is within 1% of the latency-aware lower bound
(``bounds.latency_bound``): nothing much is left to gain. The fastest plan wins (ties: the
first found). The search is deterministic.
"""

from __future__ import annotations

import itertools
import math
import random
from functools import cache

import numpy as np

from dlsched.collectives.algorithms import stage_latency
from dlsched.collectives.bounds import latency_bound, order_loads
from dlsched.collectives.order_mix import min_max_mix
from dlsched.collectives.plan import (
    ChunkRoute,
    CollectiveOp,
    CollectivePlan,
    equal_chunks,
    route_from_order,
    route_stage_data,
    weighted_chunks,
)
from dlsched.collectives.policies.baseline import baseline_order, baseline_plan
from dlsched.collectives.policies.themis import themis_orders
from dlsched.collectives.request import CollectiveRequest
from dlsched.collectives.simulate import execute_plan
from dlsched.hardware.topology import Topology

# Relative chunk weights at each end of a tapered chunking (the middle chunks weigh 1).
TAPER = (0.25, 0.5)
# Chunk counts tried besides the requested one, and (last, for small collectives) fewer.
CHUNK_COUNTS = (32, 64, 96)
FEW_CHUNKS = (4, 8, 16)
# ... tried only when steps 1-4 end more than this fraction above the latency-aware bound.
FEW_CHUNKS_ABOVE = 0.05
# Chunks per dimension tried when dimensions have step latency (besides the requested one).
CONCURRENCIES = (4, 8, 12, 16, 24)
# Weights of a stage's step latency in the greedy load tracker.
LATENCY_WEIGHTS = (0.0, 0.05, 0.1, 0.2)
# Single-chunk order changes tried at most by the final local search; the search stops once
# a plan is within GAP_TARGET of the latency-aware lower bound.
LOCAL_STEPS = 50
GAP_TARGET = 0.01


@cache
def _order_loads(topology: Topology, op: CollectiveOp) -> tuple[list[tuple[int, ...]], np.ndarray]:
    orders = list(itertools.permutations(range(len(topology.dims))))
    return orders, np.column_stack([order_loads(topology, op, order) for order in orders])


def mix_orders(topology: Topology, op: CollectiveOp,
               chunk_sizes: list[int]) -> list[tuple[int, ...]]:
    """Orders for each chunk following the order mix that minimises the most-loaded dimension,
    handed out largest deficit first (every prefix of chunks follows the mix closely)."""
    orders, loads = _order_loads(topology, op)
    columns = list((loads * sum(chunk_sizes)).T)
    weights, _ = min_max_mix(columns, [range(len(orders))])
    assigned = np.zeros(len(orders))
    total = 0.0
    result = []
    for size in chunk_sizes:
        total += size
        pick = int(np.argmax(weights * total - assigned))
        assigned[pick] += size
        result.append(orders[pick])
    return result


def greedy_orders(topology: Topology, op: CollectiveOp, chunk_sizes: list[int],
                  latency_weight: float) -> list[tuple[int, ...]]:
    """Per chunk: dimensions by ascending tracked load (a standalone All-Gather descending);
    the tracker adds each stage's bytes / bandwidth plus ``latency_weight`` x its step
    latency (s)."""
    dims = topology.dims
    load = [0.0] * len(dims)
    result = []
    for size in chunk_sizes:
        order = tuple(sorted(range(len(dims)), key=lambda d: (load[d], d),
                             reverse=op is CollectiveOp.ALL_GATHER))
        route = ChunkRoute(0, size, route_from_order(op, order))
        for stage, _, sent in route_stage_data(topology, op, route):
            dim = dims[stage.dim]
            load[stage.dim] += sent / dim.bandwidth + latency_weight * stage_latency(
                dim, stage.phase)
        result.append(order)
    return result


def tapered_chunks(size: int, count: int) -> list[int]:
    """``count`` chunk sizes with the ends tapered by TAPER (equal sizes if too few chunks)."""
    if count <= 2 * len(TAPER) + 1:
        return equal_chunks(size, count)
    weights = [*TAPER, *([1.0] * (count - 2 * len(TAPER))), *reversed(TAPER)]
    return weighted_chunks(size, weights)


def _chunkings(request: CollectiveRequest, few: bool = False) -> list[list[int]]:
    """Step 3's chunkings, or (``few``) step 5's: FEW_CHUNKS with equal and tapered sizes."""
    if few:
        counts = [c for c in FEW_CHUNKS if c <= request.size]
        chunkings = [equal_chunks(request.size, c) for c in counts]
        chunkings += [tapered_chunks(request.size, c) for c in counts]
    else:
        chunkings = [equal_chunks(request.size, request.num_chunks)]
        if request.size >= 64:
            chunkings.append(equal_chunks(request.size, 64))
        chunkings += [tapered_chunks(request.size, c) for c in CHUNK_COUNTS if c <= request.size]
    unique = {tuple(c): c for c in chunkings}
    return list(unique.values())


def _order_sets(request: CollectiveRequest, sizes: list[int],
                has_latency: bool) -> list[list[tuple[int, ...]]]:
    topology, op = request.topology, request.op
    weights = LATENCY_WEIGHTS if has_latency else LATENCY_WEIGHTS[:1]
    return [themis_orders(topology, op, sizes), mix_orders(topology, op, sizes),
            *(greedy_orders(topology, op, sizes, w) for w in weights)]


class _Search:
    """Simulates candidate plans once each and remembers the fastest."""

    def __init__(self, request: CollectiveRequest) -> None:
        self.request = request
        self.good_enough = (1 + GAP_TARGET) * latency_bound(request.topology, request.op,
                                                            request.size)
        self.times: dict[tuple, float] = {}
        self.best_time = math.inf
        self.best: tuple[list[int], list[tuple[int, ...]], int] | None = None
        self.best_plan = baseline_plan(request)

    def consider(self, sizes: list[int], orders: list[tuple[int, ...]],
                 concurrency: int) -> float:
        key = (tuple(sizes), tuple(orders), concurrency)
        if key not in self.times:
            plan = self.request.plan("dlsched", sizes, orders, concurrency)
            self.times[key] = execute_plan(plan, record=False).time
            if self.times[key] < self.best_time:
                self.best_time, self.best_plan = self.times[key], plan
                self.best = (sizes, orders, concurrency)
        return self.times[key]

    @property
    def done(self) -> bool:
        """True once the best plan is within GAP_TARGET of the latency-aware lower bound."""
        return self.best_time <= self.good_enough

    def local_search(self, steps: int) -> None:
        """Try up to ``steps`` single-chunk order changes (fixed seed) on the best plan so far,
        keeping each change that lowers the simulated time, until ``done``."""
        if self.best is None:
            return
        sizes, orders, concurrency = self.best
        choices = list(itertools.permutations(range(len(self.request.topology.dims))))
        rng = random.Random(0)
        for _ in range(steps):
            if self.done:
                return
            changed = list(orders)
            changed[rng.randrange(len(changed))] = rng.choice(choices)
            before = self.best_time
            if self.consider(sizes, changed, concurrency) < before:
                orders = changed


def _concurrencies(request: CollectiveRequest, search: _Search, has_latency: bool) -> list[int]:
    """The concurrencies to search chunkings at: the request's without latency; with latency the
    two best on a tapered 64-chunk greedy plan."""
    if not has_latency:
        return [request.concurrency]
    tried = sorted({request.concurrency, *CONCURRENCIES})
    sizes = tapered_chunks(request.size, min(64, request.size))
    orders = greedy_orders(request.topology, request.op, sizes, LATENCY_WEIGHTS[2])
    times = {c: search.consider(sizes, orders, c) for c in tried}
    return sorted(tried, key=times.__getitem__)[:2]


def balanced_plan(request: CollectiveRequest) -> CollectivePlan:
    """The fastest plan found by the search described in the module docstring."""
    has_latency = any(d.latency > 0 for d in request.topology.dims)
    search = _Search(request)
    equal = equal_chunks(request.size, request.num_chunks)
    search.consider(equal, [baseline_order(len(request.topology.dims), request.op)] * len(equal),
                    request.concurrency)
    search.consider(equal, themis_orders(request.topology, request.op, equal),
                    request.concurrency)
    concurrencies = _concurrencies(request, search, has_latency)
    for few in (False, True):
        if few and search.best_time <= (1 + FEW_CHUNKS_ABOVE) * search.good_enough / (
                1 + GAP_TARGET):
            break
        for concurrency in concurrencies:
            for sizes in _chunkings(request, few):
                for orders in _order_sets(request, sizes, has_latency):
                    if search.done:
                        return search.best_plan
                    search.consider(sizes, orders, concurrency)
        if not few:
            search.local_search(LOCAL_STEPS)
    return search.best_plan
