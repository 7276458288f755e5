"""Partition and mapping kernels: dynamic programs over (block prefix, device prefix).

Devices are taken in a given order and split into ``U`` units of ``g`` GPUs (``g = 1`` up to
64 GPUs; larger graphs use the smallest power of two giving at most 64 units). A stage takes a
contiguous block range and a contiguous run of units; its GPUs replicate it. Costs, per
microbatch: a stage's latency is its forward+backward FLOP over its slowest replica's FLOP/s
(or over the graph's mean FLOP/s for planners that assume identical GPUs), its period is the
latency x ceil(m / r) / m with ``r`` replicas, the transfer after it crosses the link between its
last unit and the next stage's first unit (activation forward, gradient back), and its ring
all-reduce uses the slowest link of its run. A stage must fit its static memory plus
``in_flight`` microbatches' activations (default one) in what the chain may use of its
smallest GPU (``Chain.usable``: the runtime reserve left out).

``sync_dp`` (Alpa-style) minimises the sum of latencies and transfers over stages whose
period is <= ``t_max``; ``throughput_dp`` (PipeDream) minimises the largest period. Both are
pure numpy min-plus (min-max) products over each run's band of stages (``RunCosts``): a run
can host only stages of at most ``W`` blocks that fit its memory, so its costs are kept as a
``W x L`` band of the ``L x L`` block-range matrix, O(U |Z| W L) per call (``Z`` the allowed
run lengths; ``W`` is small for models whose blocks fill a GPU, and at most ``L``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from weakref import WeakKeyDictionary

import numpy as np

from dlsched.hardware.device_graph import DeviceGraph
from dlsched.pipeline.chains.chain import Chain
from dlsched.pipeline.chains.problem import PipelineProblem
from dlsched.pipeline.plans.plan import Stage
from dlsched.sim.collective_cost import ring_allreduce_steps

MAX_UNITS = 64


@dataclass(frozen=True, eq=False)
class RunCosts:
    """Per-microbatch costs (seconds) of the stages one run of units can host, as a band:
    column ``i1`` lists the stages ending before block ``i1``, row ``k`` the one starting at
    block ``starts[k, i1]`` (rows in ascending start; a negative start is no stage and has
    infinite latency). Infinite latency: the stage does not fit, or is no stage."""

    starts: np.ndarray
    latency: np.ndarray
    period: np.ndarray
    sync: np.ndarray
    hops: np.ndarray  # per end block (one row for every start)


@dataclass(frozen=True, eq=False)
class RangeCosts:
    """Precomputed costs of every run of units (``runs[(u0, z)]``: ``z`` units from unit
    ``u0``); ``split``: replicated stages split every microbatch across their replicas."""

    order: tuple[int, ...]
    speeds: tuple[float, ...]
    unit: int
    runs: dict[tuple[int, int], RunCosts]
    split: bool = False
    _sums: dict[float, dict[tuple[int, int], np.ndarray]] = field(
        default_factory=dict, init=False, repr=False)

    @property
    def num_units(self) -> int:
        """Number of device units."""
        return len(self.order) // self.unit

    def stage_sums(self, sync_weight: float) -> dict[tuple[int, int], np.ndarray]:
        """Per run: latency + transfers + ``sync_weight`` x all-reduce (seconds), computed once
        per weight (``sync_dp`` runs for many ``t_max`` with the same weights)."""
        if sync_weight not in self._sums:
            self._sums[sync_weight] = {
                run: costs.latency + costs.hops + sync_weight * costs.sync
                for run, costs in self.runs.items()}
        return self._sums[sync_weight]


def unit_size(num_devices: int) -> int:
    """GPUs per unit: the smallest power of two giving at most ``MAX_UNITS`` units."""
    g = 1
    while num_devices // g > MAX_UNITS:
        g *= 2
    return g


def run_lengths(num_units: int) -> list[int]:
    """Allowed units per stage: all up to 16 units, then 1..8 and powers of two."""
    if num_units <= 16:
        return list(range(1, num_units + 1))
    powers = [2**k for k in range(4, int(math.log2(num_units)) + 1)]
    return sorted(set(range(1, 9)) | set(powers))


def uniform_speeds(problem: PipelineProblem) -> bool:
    """Whether every GPU of the instance has the mean FLOP/s (then pricing them as identical
    GPUs changes no number)."""
    flops = problem.gpu_flops
    return bool((flops == flops.mean()).all())


# Range costs per instance and arguments (dlsched and the memory-aware baselines price the
# same runs: PipeDream's and DAPPLE's searches share their orders and in-flight counts, and
# dlsched's device order is often DAPPLE's append-first order).
_COSTS: WeakKeyDictionary[PipelineProblem, dict[tuple, RangeCosts]] = WeakKeyDictionary()


def range_costs(problem: PipelineProblem, order: list[int], identical: bool,
                in_flight: int = 1, split: bool = False) -> RangeCosts:
    """Cost bands (latency, period, all-reduce, transfers) for every run of the units;
    a stage must fit its static memory plus ``in_flight`` microbatches' activations. With
    ``split`` the replicas of a run split every microbatch (DAPPLE): a microbatch's latency
    and each replica's stash are 1/r of a whole one's. Without replication
    (``PipelineProblem.replicate`` False) a unit is one GPU and a run one unit. Kept per
    instance and arguments (``identical`` left out where it changes nothing:
    ``uniform_speeds``)."""
    identical = identical and not uniform_speeds(problem)
    known = _COSTS.setdefault(problem, {})
    key = (tuple(order), identical, in_flight, split)
    if key not in known:
        known[key] = _range_costs(problem, order, identical, in_flight, split)
    return known[key]


def _range_costs(problem: PipelineProblem, order: list[int], identical: bool,
                 in_flight: int, split: bool) -> RangeCosts:
    g = unit_size(len(order)) if problem.replicate else 1
    units = len(order) // g
    order = tuple(order[: units * g])
    chain, m, graph = problem.chain, problem.num_microbatches, problem.graph
    work = np.concatenate([[0.0], np.cumsum(chain.forward_flops + chain.backward_flops)])
    params = np.concatenate([[0.0], np.cumsum(chain.param_bytes)])
    stash = np.concatenate([[0.0], np.cumsum(chain.stash_bytes)])
    static_need = (params[None, :] - params[:, None]) * chain.state_factor
    stash_span = in_flight * (stash[None, :] - stash[:, None])
    valid = np.triu(np.ones((len(work), len(work)), dtype=bool), 1)
    flops, columns = graph.flops, np.arange(len(work))
    mean_flops = flops.mean()
    widths: dict[tuple[float, float], int] = {}
    bands: dict[int, tuple[np.ndarray, ...]] = {}
    hops = {u1: _hops(problem, order, g, u1) for u1 in range(1, units + 1)}
    runs = {}
    for u0 in range(units):
        for z in run_lengths(units) if problem.replicate else [1]:
            if u0 + z > units:
                continue
            devices = list(order[u0 * g:(u0 + z) * g])
            speeds = np.full(len(devices), mean_flops) if identical else flops[devices]
            share = 1.0 / len(devices) if split else 1.0
            usable = chain.usable(min(graph.devices[d].memory for d in devices))
            if (usable, share) not in widths:
                fits = valid & (static_need + stash_span * share <= usable)
                reach = np.nonzero(fits)
                widths[(usable, share)] = int((reach[1] - reach[0]).max()) if fits.any() else 0
            width = widths[(usable, share)] if not split or chain.can_split(len(devices)) else 0
            if width not in bands:
                starts = columns[None, :] - np.arange(width, 0, -1)[:, None]
                first, inside = np.maximum(starts, 0), starts >= 0
                bands[width] = (starts, inside,
                                np.where(inside, work[None, :] - work[first], np.inf),
                                static_need[first, columns], stash_span[first, columns],
                                np.where(inside, params[None, :] - params[first], 0.0))
            starts, inside, span, static_band, stash_band, param_span = bands[width]
            fits = inside & (static_band + stash_band * share <= usable)
            latency = np.where(fits, span * share / speeds.min(), np.inf)
            period = np.where(inside, span * (share / speeds.min() if split else
                                              replica_load(speeds, m)), np.inf)
            runs[(u0, z)] = RunCosts(starts, latency, period, _ring(problem, devices, param_span),
                                     hops[u0 + z])
    return RangeCosts(order, tuple(graph.flops.tolist()), g, runs, split)


def replica_load(speeds: np.ndarray, num_microbatches: int) -> float:
    """Seconds per FLOP per microbatch of a replicated stage: replicas sorted fastest first
    take microbatches round-robin; the busiest one (count / FLOP/s) sets the pace."""
    return _replica_load(tuple(np.asarray(speeds, dtype=float).tolist()), num_microbatches)


@lru_cache(maxsize=4096)
def _replica_load(speeds: tuple[float, ...], num_microbatches: int) -> float:
    ordered = np.sort(np.array(speeds))[::-1]
    r = len(ordered)
    counts = np.array([len(range(k, num_microbatches, r)) for k in range(r)])
    return float((counts / ordered).max()) / num_microbatches


# Per device graph, the slowest link (bandwidth B/s, latency s) of the ring over each list of
# GPUs (``_ring``: every range-cost table of an instance prices the same runs).
_RINGS: WeakKeyDictionary[DeviceGraph, dict[tuple[int, ...], tuple[float, float]]] = \
    WeakKeyDictionary()


def _ring(problem: PipelineProblem, devices: list[int], param_span: np.ndarray) -> np.ndarray:
    r = len(devices)
    if r == 1:
        return np.zeros_like(param_span)
    known = _RINGS.setdefault(problem.graph, {})
    ring = tuple(devices)
    if ring not in known:
        senders, receivers = np.array(ring), np.array(ring[1:] + ring[:1])
        known[ring] = (problem.graph.bandwidth[senders, receivers].min(),
                       problem.graph.latency[senders, receivers].max())
    bandwidth, latency = known[ring]
    return ring_allreduce_steps(r) * (latency + np.maximum(param_span, 0) / r / bandwidth)


def _hops(problem: PipelineProblem, order: tuple[int, ...], g: int, u1: int) -> np.ndarray:
    """Activation + gradient transfer after a stage ending at unit ``u1``, per end block."""
    if u1 * g >= len(order):
        return np.zeros(problem.chain.num_blocks + 1)
    left, right = list(order[(u1 - 1) * g:u1 * g]), list(order[u1 * g:(u1 + 1) * g])
    graph = problem.graph
    bandwidth = graph.bandwidth[np.ix_(left, right)].min()
    latency = graph.latency[np.ix_(left, right)].max()
    act = problem.chain.activation_bytes
    per_end = np.concatenate([[0.0], 2 * (latency + act / bandwidth)])
    per_end[-1] = 0.0
    return per_end


def sync_dp(costs: RangeCosts, num_blocks: int,
            settings: list[tuple[float, float]]) -> list[list[tuple[Stage, ...]]]:
    """For each ``(t_max, sync_weight)`` of ``settings``: the stages minimising sum(latency +
    transfers + ``sync_weight`` x all-reduce) with every stage period <= ``t_max`` seconds,
    as the best partition for each number of units used (all of them up to 16 units, else
    the overall best and the one using every unit), since the sum alone does not reward
    replicas that shorten fill and drain; an empty list when none fits. All settings run as
    one batched DP."""
    weights = sorted({weight for _, weight in settings})
    which = np.array([weights.index(weight) for _, weight in settings])
    limits = np.array([t_max for t_max, _ in settings])[:, None, None]
    sums = [costs.stage_sums(weight) for weight in weights]

    def cost(run: tuple[int, int], rows: slice, columns: slice) -> np.ndarray:
        stacked = np.stack([per_weight[run][:, columns] for per_weight in sums])[which[rows]]
        return np.where(costs.runs[run].period[None, :, columns] <= limits[rows], stacked,
                        np.inf)
    return _dp(costs, num_blocks, len(settings), cost, np.add, every_end=True)


def throughput_dp(costs: RangeCosts, num_blocks: int,
                  num_microbatches: int) -> tuple[Stage, ...] | None:
    """PipeDream's objective: the partition whose largest per-microbatch stage time (period,
    transfer, all-reduce amortised over the microbatches) is smallest."""
    def cost(run: tuple[int, int], rows: slice, columns: slice) -> np.ndarray:
        band = costs.runs[run]
        per_microbatch = np.maximum(band.period + band.sync / num_microbatches, band.hops / 2)
        return np.where(np.isfinite(band.latency), per_microbatch, np.inf)[None, :, columns]
    found = _dp(costs, num_blocks, 1, cost, np.maximum, every_end=False)[0]
    return found[0] if found else None


def _dp(costs: RangeCosts, num_blocks: int, batch: int,
        cost_of: Callable[[tuple[int, int], slice, slice], np.ndarray],
        combine: Callable[[np.ndarray, np.ndarray], np.ndarray],
        every_end: bool) -> list[list[tuple[Stage, ...]]]:
    """``batch`` DPs over (units used, blocks covered) at once, ``cost_of(run, rows,
    columns)`` giving the stage costs on the run's band of the DPs ``rows`` and end blocks
    ``columns`` (shape rows x band rows x columns); per DP its partitions (see ``sync_dp``).
    Ties go to the run with the fewest units before it, then to the earliest start block.
    A run is priced only for the DPs and end blocks it can improve: those that reach its
    first unit, and the ends of stages starting at a block some DP reaches there (elsewhere
    its cost is infinite)."""
    units, size = costs.num_units, num_blocks + 1
    best = np.full((batch, units + 1, size), np.inf)
    best[:, 0, 0] = 0.0
    parent = np.zeros((batch, units + 1, size, 2), dtype=np.int32)
    columns = np.arange(size)
    lengths: dict[int, list[int]] = {}
    for u0, z in costs.runs:
        lengths.setdefault(u0, []).append(z)
    # Runs by first unit (a unit's best is final once every run ending there is done, and
    # the runs ending at a unit still come in ascending first unit), those sharing a band
    # priced together.
    for u0 in sorted(lengths):
        reached = np.isfinite(best[:, u0])
        if not reached.any():
            continue
        dps, blocks = (np.nonzero(reached.any(axis=axis))[0] for axis in (1, 0))
        rows = slice(dps[0], dps[-1] + 1)
        shared: dict[int, list[int]] = {}
        for z in lengths[u0]:
            shared.setdefault(id(costs.runs[(u0, z)].starts), []).append(z)
        for zs in shared.values():
            starts = costs.runs[(u0, zs[0])].starts
            ends = np.nonzero(((starts >= blocks[0]) & (starts <= blocks[-1])).any(axis=0))[0]
            if not len(ends):
                continue
            cols = slice(ends[0], ends[-1] + 1)
            band = starts[:, cols]
            before = np.where(band >= 0, best[rows, u0][:, np.maximum(band, 0)], np.inf)
            candidate = combine(before[None], np.stack([cost_of((u0, z), rows, cols)
                                                        for z in zs]))
            row, value = np.argmin(candidate, axis=2), np.min(candidate, axis=2)
            start = band[row, columns[:ends[-1] + 1 - ends[0]]]
            for k, z in enumerate(zs):
                better = value[k] < best[rows, u0 + z, cols]
                best[rows, u0 + z, cols][better] = value[k][better]
                parent[rows, u0 + z, cols, 0][better] = z
                parent[rows, u0 + z, cols, 1][better] = start[k][better]
    found = []
    for k in range(batch):
        finals = best[k, :, num_blocks]
        if not np.isfinite(finals).any():
            found.append([])
            continue
        ends = [int(np.argmin(finals))]
        if every_end:
            ends += list(range(units + 1)) if units <= 16 else [units]
        ends = [u for u in dict.fromkeys(ends) if np.isfinite(finals[u])]
        found.append([_backtrack(costs, parent[k], u, num_blocks) for u in ends])
    return found


def _backtrack(costs: RangeCosts, parent: np.ndarray, u: int, i: int) -> tuple[Stage, ...]:
    stages = []
    g = costs.unit
    while i > 0:
        z, start = parent[u, i]
        devices = sorted(costs.order[(u - z) * g:u * g], key=lambda d: -costs.speeds[d])
        stages.append(Stage(int(start), int(i), tuple(devices),
                            costs.split and len(devices) > 1))
        u, i = u - z, int(start)
    return tuple(reversed(stages))


def balanced_stages(problem: PipelineProblem,
                    groups: list[tuple[int, ...]] | list[int],
                    weights: list[float] | None = None) -> tuple[Stage, ...]:
    """One stage per GPU group of ``groups`` (in order; a group's GPUs are data-parallel
    replicas, a bare GPU index is a group of one; as many stages as there are blocks at
    most), cut to minimise the slowest stage's time: forward+backward FLOP x the busiest
    replica's load (``replica_load``), times ``weights[k]`` for group ``k`` when given (a
    weight above 1 gives that stage less work)."""
    return balanced_partitions(problem, groups, [weights])[0]


def balanced_partitions(problem: PipelineProblem, groups: list[tuple[int, ...]] | list[int],
                        weightings: list[list[float] | None]) -> list[tuple[Stage, ...]]:
    """``balanced_stages`` of ``groups`` under each of ``weightings``, the cuts of all of
    them found together (one DP step per stage for the whole batch)."""
    chain, m = problem.chain, problem.num_microbatches
    groups = [group if isinstance(group, tuple) else (int(group),) for group in groups]
    p = min(len(groups), chain.num_blocks)
    base = [replica_load(problem.gpu_flops[list(groups[k])], m) for k in range(p)]
    batch = [tuple(base[k] * (weights[k] if weights is not None else 1.0) for k in range(p))
             for weights in weightings]
    known = _CUTS.setdefault(chain, {})
    missing = list(dict.fromkeys(loads for loads in batch if loads not in known))
    if missing:
        known.update(zip(missing, _balanced_cuts(chain, missing), strict=True))
    return [tuple(Stage(first, last, tuple(groups[k])) for k, (first, last) in enumerate(
        zip(known[loads], (*known[loads][1:], chain.num_blocks), strict=True)))
        for loads in batch]


# Cuts of ``balanced_stages`` per chain and per-stage loads (grid planners cut the same
# configurations, and both GPU mappings of a configuration, alike).
_CUTS: WeakKeyDictionary[Chain, dict[tuple[float, ...], tuple[int, ...]]] = WeakKeyDictionary()
# Per chain, the forward+backward FLOP of every block range (infinite where it is empty).
_SPANS: WeakKeyDictionary[Chain, np.ndarray] = WeakKeyDictionary()


def _balanced_cuts(chain: Chain, batch: list[tuple[float, ...]]) -> list[tuple[int, ...]]:
    """For each ``loads`` of ``batch`` (all of ``p`` stages), the first block of each stage
    minimising the largest work x load. After ``k`` stages a partition that can still be
    completed has covered ``k .. L - (p - k)`` blocks (every stage takes one at least), so
    each step runs on that window only."""
    blocks, p = chain.num_blocks, len(batch[0])
    span = _SPANS.get(chain)
    if span is None:
        work = np.concatenate([[0.0], np.cumsum(chain.forward_flops + chain.backward_flops)])
        span = work[None, :] - work[:, None]
        span = _SPANS[chain] = np.where(np.triu(np.ones_like(span, dtype=bool), 1), span,
                                        np.inf)
    loads = np.array(batch)
    # over blocks k .. blocks - (p - k) after k stages, per loads of the batch
    best = np.full((len(batch), blocks - p + 1), np.inf)
    best[:, 0] = 0.0
    which, window = np.arange(len(batch))[:, None], np.arange(blocks - p + 1)[None, :]
    starts = []
    for k in range(p):
        rows, cols = slice(k, blocks - (p - k) + 1), slice(k + 1, blocks - (p - k - 1) + 1)
        candidate = np.maximum(best[:, :, None], span[None, rows, cols] * loads[:, k, None, None])
        start = np.argmin(candidate, axis=1)
        best = candidate[which, start, window]
        starts.append(start + k)
    cuts = []
    for b in range(len(batch)):
        firsts, i = [], blocks
        for k in range(p - 1, -1, -1):
            i = int(starts[k][b, i - (k + 1)])
            firsts.append(i)
        cuts.append(tuple(reversed(firsts)))
    return cuts
