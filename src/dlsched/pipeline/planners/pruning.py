"""Simulating only the candidates that can win.

Planners score candidate plans by simulating them and keep the fastest, or the ``keep``
fastest of distinct groups (dlsched keeps its fastest partitions for refinement). Every
candidate has a lower bound that no schedule of its stages beats (``bounds.plan_bound``), so a
candidate whose bound exceeds the ``keep``-th best time already simulated cannot be among the
kept ones. ``evaluate`` simulates the candidates in ascending order of bound and stops at the
first whose bound is above that time by more than ``MARGIN`` (all later ones are too). The
results come back in the candidates' own order, so the caller applies its selection rule (the
first of equal times wins) exactly as it did over every candidate: the plan it picks is the
same, with fewer simulations. Each candidate is simulated with that time (times ``1 +
MARGIN``) as its deadline (``simulate.Late``): one whose iteration ends later cannot be kept
either, so its simulation stops as soon as its clock passes the deadline.

``MARGIN`` (relative) keeps the pruning safe against rounding: a bound and a simulated time of
the same schedule agree to about 1e-12, and simulated times are never below their bound by
more than that (tested on every planner).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from dlsched.pipeline.simulation.simulate import Late, SimResult

MARGIN = 1e-6


@dataclass(frozen=True)
class Candidate:
    """A plan to score: ``bound`` seconds no schedule of it beats, ``group`` what it competes
    with (candidates of one group take one of the kept places), ``run(deadline)`` its
    simulated result (None when it has none, e.g. does not fit memory; ``simulate.Late`` when
    it ends after ``deadline`` seconds)."""

    bound: float
    group: Hashable
    run: Callable[[float], SimResult | None]

    def within(self, deadline: float) -> SimResult | None:
        """``run(deadline)``, None when it ends after ``deadline`` seconds."""
        try:
            return self.run(deadline)
        except Late:
            return None


def evaluate(candidates: list[Candidate], keep: int = 1) -> list[tuple[int, SimResult]]:
    """(index, result) of every candidate simulated, in the order of ``candidates``; those
    left out cannot be among the ``keep`` fastest groups."""
    best: dict[Hashable, float] = {}
    results = []
    for index in sorted(range(len(candidates)), key=lambda i: candidates[i].bound):
        candidate = candidates[index]
        deadline = (heapq.nsmallest(keep, best.values())[-1] * (1 + MARGIN)
                    if len(best) >= keep else math.inf)
        if candidate.bound > deadline:
            break
        result = candidate.within(deadline)
        if result is None:
            continue
        results.append((index, result))
        best[candidate.group] = min(best.get(candidate.group, result.iteration_s),
                                    result.iteration_s)
    return sorted(results, key=lambda item: item[0])
