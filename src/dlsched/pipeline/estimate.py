"""Fast estimates that rank candidate partitions before the simulator scores them.

``estimate`` is the chain bound of a partition with each stage on its slowest replica:
max over stages of (forwards before it + transfers) + its busiest replica's forward+backward
work (``replica_load``) +
(backwards before it + transfers), and the all-reduce that follows the stage's last backward.
"""

from __future__ import annotations

import numpy as np

from dlsched.pipeline.partition import RangeCosts, replica_load, sync_dp
from dlsched.pipeline.plan import Stage
from dlsched.pipeline.problem import PipelineProblem

SYNC_WEIGHTS = (0.0, 1.0)
MAX_CANDIDATE_PERIODS = 40


def estimate(problem: PipelineProblem, stages: tuple[Stage, ...],
             identical: bool = False) -> float:
    """Estimated iteration seconds of a partition (see the module docstring)."""
    graph, m = problem.graph, problem.num_microbatches
    head = tail = 0.0
    best = 0.0
    for s, stage in enumerate(stages):
        speeds = graph.flops[list(stage.devices)]
        if identical:
            speeds = np.full(len(speeds), graph.flops.mean())
        forward, backward = (x / speeds.min() for x in problem.stage_flops(stage))
        end = head + sum(problem.stage_flops(stage)) * replica_load(speeds, m) * m
        best = max(best, end + max(tail, problem.allreduce_time(stage)))
        if s + 1 < len(stages):
            size = float(problem.chain.activation_bytes[stage.last - 1])
            hop = graph.transfer_time(stage.devices[-1], stages[s + 1].devices[0], size)
            head += forward + hop
            tail += backward + hop
    return best


def candidate_periods(costs: RangeCosts) -> list[float]:
    """Bottleneck stage times to try: every distinct finite period, or evenly spaced
    quantiles of them when there are more than ``MAX_CANDIDATE_PERIODS``."""
    values = np.unique(np.concatenate([
        period[np.isfinite(latency)] for latency, period, _, _ in costs.runs.values()]))
    if len(values) <= MAX_CANDIDATE_PERIODS:
        return values.tolist()
    picks = np.quantile(values, np.linspace(0, 1, MAX_CANDIDATE_PERIODS), method="nearest")
    return np.unique(picks).tolist()


def best_sync_partitions(problem: PipelineProblem, costs: RangeCosts, keep: int,
                         identical: bool = False) -> list[tuple[Stage, ...]]:
    """The ``keep`` distinct partitions of lowest estimate over all bottleneck candidates and
    all-reduce weights (``sync_dp`` for each)."""
    seen: dict[tuple[Stage, ...], float] = {}
    for t_max in candidate_periods(costs):
        for weight in SYNC_WEIGHTS:
            for stages in sync_dp(costs, problem.chain.num_blocks, t_max, weight):
                if stages not in seen:
                    seen[stages] = estimate(problem, stages, identical)
    return sorted(seen, key=lambda st: seen[st])[:keep]
