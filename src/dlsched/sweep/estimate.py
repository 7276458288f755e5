"""What ``dlsched sweep run --dry-run`` answers before running anything: how many scenarios
the grid holds, how many are distinct and still to run, and an estimated time from timing a
small sample spread over every parameter's values (``runner.time_scenarios``)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlsched.sweep.executors import check_executor, default_workers
from dlsched.sweep.grid import Grid
from dlsched.sweep.runner import SampleTimes, SweepJob, time_scenarios
from dlsched.sweep.store import read_rows, scenario_key

SAMPLE = 12
"""Scenarios ``--dry-run`` times (after one warm-up; see ``time_scenarios``)."""
TIMING_BUDGET_S = 3.0
"""Seconds ``--dry-run`` spends timing the sample after a warm-up of at most 3 s, so it answers
in seconds even where one scenario runs for minutes (the estimate is then a lower bound)."""


@dataclass(frozen=True)
class DryRun:
    """A grid counted and timed: ``scenarios`` in it, ``distinct`` ones, ``to_run`` (distinct
    minus those ``--resume`` finds stored), the ``sample`` timed (grid indices, the last the
    warm-up's when there are several), its ``timed`` seconds, and the worker ``slots`` the
    estimate assumes on ``cores`` usable cores."""

    name: str
    scenarios: int
    distinct: int
    to_run: int
    sample: list[int]
    timed: SampleTimes
    slots: int
    cores: int

    @property
    def seconds(self) -> list[float]:
        """Each timed scenario's seconds, the one cut off by the budget counted as its time
        so far."""
        unfinished = [self.timed.unfinished_s] if self.timed.unfinished_s is not None else []
        return self.timed.seconds + unfinished

    @property
    def lower_bound(self) -> bool:
        """Whether a scenario was cut off, making every estimate a lower bound."""
        return self.timed.unfinished_s is not None

    @property
    def per_scenario_s(self) -> float:
        """Mean seconds of a sampled scenario."""
        return sum(self.seconds) / len(self.seconds)

    @property
    def estimate_s(self) -> float:
        """Seconds to run what is left on the workers running at once (no more than the
        scenarios left)."""
        return self.per_scenario_s * self.to_run / min(self.slots, self.cores,
                                                       max(self.to_run, 1))

    @property
    def spread(self) -> float:
        """Slowest sampled scenario / fastest (x)."""
        return max(self.seconds) / max(min(self.seconds), 1e-9)

    def rows(self) -> list[dict[str, Any]]:
        """A row per timed scenario: its grid index, seconds and whether it finished."""
        indices = self.sample[:-1] if len(self.sample) > 1 else self.sample
        return [{"scenario": index, "seconds": s, "finished": k < len(self.timed.seconds)}
                for k, (index, s) in enumerate(zip(indices, self.seconds, strict=False))]


def dry_run(job: SweepJob, grid: Grid, path: Path, workers: int | None,
            resume: bool) -> DryRun:
    """Count the grid's scenarios, distinct ones and (with ``resume``, from the results file
    ``path``) those still to run without listing them (a grid may hold 10**7), and time up
    to ``SAMPLE`` scenarios spread over the grid for ``TIMING_BUDGET_S`` seconds at most;
    ``workers``: the local worker processes asked for (None: every usable core)."""
    distinct, done = grid.distinct_count, 0
    if resume and path.exists():
        for row in read_rows(path):
            index = grid.index_of(row)
            done += index is not None and row["key"] == scenario_key(
                job.domain, {name: grid.scenario(index)[name] for name in job.params})
    sample = stratified_sample(grid, SAMPLE + 1)
    timed = time_scenarios(job, [("", i, grid.scenario(i)) for i in sample], TIMING_BUDGET_S)
    return DryRun(job.name, grid.count, distinct, distinct - done, sample, timed,
                  check_executor("process", workers), default_workers())


def stratified_sample(grid: Grid, count: int) -> list[int]:
    """Up to ``count`` distinct scenario indices that walk every block's entries in turn,
    each block with its own seeded start and stride (coprime to its size), so every value of
    a parameter is sampled about equally often and the combinations are mixed; O(1) memory
    for any grid size, the same sample on every run."""
    rng = random.Random(0)
    walks = [(rng.randrange(block.size), _coprime_stride(rng, block.size), block.size)
             for block in grid.blocks]
    indices = []
    for r in range(min(count, grid.count)):
        index = 0
        for start, stride, size in walks:
            index = index * size + (start + r * stride) % size
        indices.append(index)
    return list(dict.fromkeys(indices))


def _coprime_stride(rng: random.Random, size: int) -> int:
    """A random step in 1..size-1 sharing no factor with ``size`` (1 for sizes 1 and 2)."""
    while True:
        stride = rng.randrange(1, size) if size > 2 else 1
        if math.gcd(stride, size) == 1:
            return stride
