"""Fast estimates that rank candidate partitions before the simulator scores them.

``estimate`` is the chain bound of a partition with each stage on its slowest replica:
max over stages of (forwards before it + transfers) + its busiest replica's forward+backward
work (``replica_load``) — or, when memory lets each replica hold only ``k`` microbatches, the
ceil(m / (k r)) round trips through the rest of the pipeline that this forces — +
(backwards before it + transfers), and the all-reduce that follows the stage's last backward.
"""

from __future__ import annotations

import math
from weakref import WeakKeyDictionary

import numpy as np

from dlsched.pipeline.chains.problem import PipelineProblem
from dlsched.pipeline.planners.partition import RangeCosts, replica_load, sync_dp, uniform_speeds
from dlsched.pipeline.plans.plan import Stage
from dlsched.pipeline.simulation.memory import action_stash, static_footprint

SYNC_WEIGHTS = (0.0, 1.0)
MAX_CANDIDATE_PERIODS = 40


def estimate(problem: PipelineProblem, stages: tuple[Stage, ...],
             identical: bool = False) -> float:
    """Estimated iteration seconds of a partition (see the module docstring)."""
    m = problem.num_microbatches
    times, hops = _stage_times(problem, stages, identical), _hop_times(problem, stages)
    head = tail = best = 0.0
    computes = [f + b for f, b, _ in times]
    for s, stage in enumerate(stages):
        forward, backward, busy = times[s]
        round_trip = sum(computes[s:]) + 2 * sum(hops[s:])
        slots = memory_slots(problem, stage) * stage.lanes
        paced = max(busy, math.ceil(m / slots) * round_trip) if slots else math.inf
        best = max(best, head + paced + max(tail, problem.allreduce_time(stage)))
        if s + 1 < len(stages):
            head += forward + hops[s]
            tail += backward + hops[s]
    return best


def _stage_times(problem: PipelineProblem, stages: tuple[Stage, ...],
                 identical: bool) -> list[tuple[float, float, float]]:
    """(forward, backward) on the slowest replica and the busiest replica's total, seconds."""
    m, result = problem.num_microbatches, []
    for stage in stages:
        speeds = problem.gpu_flops[list(stage.devices)]
        if identical:
            speeds = np.full(len(speeds), problem.gpu_flops.mean())
        forward, backward = problem.action_flops(stage)
        load = m / speeds.min() if stage.split else replica_load(speeds, m) * m
        busy = (forward + backward) * load
        result.append((forward / speeds.min(), backward / speeds.min(), busy))
    return result


def _hop_times(problem: PipelineProblem, stages: tuple[Stage, ...]) -> list[float]:
    hops = []
    for s in range(len(stages) - 1):
        size = float(problem.chain.activation_bytes[stages[s].last - 1])
        hops.append(problem.graph.transfer_time(stages[s].devices[-1],
                                                stages[s + 1].devices[0], size))
    return [*hops, 0.0]


def memory_slots(problem: PipelineProblem, stage: Stage) -> int:
    """Microbatches one replica can hold in flight within its memory (its parts of them on a
    split stage)."""
    chain = problem.chain
    free = min(problem.graph.devices[d].memory for d in stage.devices) - static_footprint(
        chain, stage.first, stage.last)
    stash = action_stash(chain, stage)
    if free < stash:
        return 0
    return problem.num_microbatches if stash <= 0 else int(min(free // stash,
                                                               problem.num_microbatches))


def candidate_periods(costs: RangeCosts) -> list[float]:
    """Bottleneck stage times to try: every distinct finite period, or evenly spaced
    quantiles of them when there are more than ``MAX_CANDIDATE_PERIODS``."""
    values = np.unique(np.concatenate([
        band.period[np.isfinite(band.latency)] for band in costs.runs.values()]))
    if len(values) <= MAX_CANDIDATE_PERIODS:
        return values.tolist()
    picks = np.quantile(values, np.linspace(0, 1, MAX_CANDIDATE_PERIODS), method="nearest")
    return np.unique(picks).tolist()


# Per range-cost table (of one instance), the distinct partitions of ``best_sync_partitions``
# in ascending estimate, per ``identical``.
_RANKED: WeakKeyDictionary[RangeCosts, dict[bool, list[tuple[Stage, ...]]]] = \
    WeakKeyDictionary()


def best_sync_partitions(problem: PipelineProblem, costs: RangeCosts, keep: int,
                         identical: bool = False) -> list[tuple[Stage, ...]]:
    """The ``keep`` distinct partitions of lowest estimate over all bottleneck candidates and
    all-reduce weights (``sync_dp`` for each); ``costs``: ``range_costs`` of ``problem``. The
    ranking is kept per table (``identical`` left out where it changes nothing:
    ``uniform_speeds``)."""
    identical = identical and not uniform_speeds(problem)
    ranked = _RANKED.setdefault(costs, {})
    if identical not in ranked:
        seen: dict[tuple[Stage, ...], float] = {}
        settings = [(t_max, weight) for t_max in candidate_periods(costs)
                    for weight in SYNC_WEIGHTS]
        for found in sync_dp(costs, problem.chain.num_blocks, settings):
            for stages in found:
                if stages not in seen:
                    seen[stages] = estimate(problem, stages, identical)
        ranked[identical] = sorted(seen, key=lambda st: seen[st])
    return ranked[identical][:keep]
