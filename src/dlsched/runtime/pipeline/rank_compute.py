"""How fast a CPU pipeline rank computes inside a multi-rank run, against the chain's profile.

The plans are made from a profile of the blocks (``profile``), each block timed alone in one
process. Inside a run of several ranks the same blocks take a different time: the stage
module's autograd over its blocks, every microbatch's activations held at once, ranks sharing
caches and memory bandwidth, and a machine whose clock and state moved since the profile.
Two earlier estimates missed it on the 16-core machine lent to this project (2026-11-26,
``gpt-small``, 2-8 ranks): a one-rank run against blocks profiled in the same process, times
the slowdown of every rank profiling in lockstep (1.27-1.39), predicted every plan 4-76% long,
while the same plans simulated with the runs' own action times were within 15% on 14 of 15,
and the runs' actions summed to about 0.74 of the chain's profile.

So the factor is measured where the plans run: ``ranks`` ranks run the model cut into
``ranks`` GPipe stages of consecutive blocks, every compute action stamped, and per measured
iteration the summed action time of every rank over ``microbatches`` x the chain's forward +
backward of every block is one sample; the median over iterations is the factor (the
prediction is compared with a median iteration), and three interleaved parts of the
iterations (i, i + 3, ...) must agree like the other calibrations' parts. The workload is fixed
(GPipe, consecutive blocks split evenly), never one of the plans compared. Torch-free.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from itertools import pairwise

from dlsched.errors import ConfigError
from dlsched.pipeline.plans.plan import Stage
from dlsched.pipeline.simulation.sim_result import KIND_NAMES
from dlsched.sim import Timeline

PARTS = 3
"""Interleaved parts of the iterations whose factors must agree."""


def even_stages(blocks: int, ranks: int) -> tuple[Stage, ...]:
    """``ranks`` stages of consecutive blocks, one per rank, sizes differing by at most one."""
    if not 1 <= ranks <= blocks:
        raise ConfigError(f"ranks: {ranks} must be in 1..{blocks} (the model's blocks)")
    cuts = [blocks * k // ranks for k in range(ranks + 1)]
    return tuple(Stage(first, last, (k,)) for k, (first, last)
                 in enumerate(pairwise(cuts)))


def iteration_factors(timeline: Timeline, microbatches: int, profiled_s: float
                      ) -> list[float]:
    """Per measured iteration of ``timeline`` (in iteration order), the summed duration of
    its compute spans over ``microbatches`` x ``profiled_s`` (the chain's forward + backward
    seconds of one microbatch over every block)."""
    if microbatches < 1 or not profiled_s > 0:
        raise ConfigError(f"microbatches: {microbatches} must be >= 1 and the profiled "
                          f"compute {profiled_s} s > 0")
    sums: dict[int, float] = defaultdict(float)
    for span in timeline.spans:
        if span.kind in KIND_NAMES.values():
            sums[span.args["iteration"]] += span.duration
    return [sums[iteration] / (microbatches * profiled_s) for iteration in sorted(sums)]


def factor_and_parts(factors: list[float]) -> tuple[float, tuple[float, ...]]:
    """(median of ``factors``, the median of each of the ``PARTS`` interleaved parts:
    samples i, i + PARTS, ...)."""
    if len(factors) < PARTS:
        raise ConfigError(f"compute factor: {len(factors)} measured iterations, need at least "
                          f"{PARTS}")
    return (statistics.median(factors),
            tuple(statistics.median(factors[part::PARTS]) for part in range(PARTS)))


def rank_compute_factor(timeline: Timeline, microbatches: int, profiled_s: float
                        ) -> tuple[float, tuple[float, ...]]:
    """(factor, the factor of each of the ``PARTS`` interleaved parts of the iterations) of a
    measured ``timeline``: ``factor_and_parts`` of its ``iteration_factors``."""
    return factor_and_parts(iteration_factors(timeline, microbatches, profiled_s))
