"""How the job search orders layouts (``--objective``): ``expected`` by the predicted iteration
time, ``upper`` (the default) by the upper end of its 90% interval (``job.intervals``), so that
a plan whose speed the ledger has not checked ranks as slow as it might be.

``Ranking.order`` is a lower bound on ``Ranking.key`` of every evaluation of a layout whose
pipeline bound is known (the search prunes with it): for ``upper``, the bound times the
layout's interval factor without the MFU frontier (which only widens the interval), twice,
then the bound (ties); keys compare the same way, (upper end, upper end without the MFU
frontier's floor, iteration): plans above the frontier share its floor, and among them the one
whose own interval ends first ranks first (an unchecked value widens it), not the faster
prediction. The search and every baseline rank with the same ``Ranking``;
``difference_note`` says when the point-best and the upper-best plans differ.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dlsched.job.envelope import Features, Residual, features
from dlsched.job.intervals import family_residuals, time_bounds, upper_end

if TYPE_CHECKING:
    from dlsched.job.evaluation.evaluate import Job, JobResult
    from dlsched.job.execution import Execution

@dataclass(frozen=True)
class Ranking:
    """Order of layouts for ``objective`` (``upper`` or ``expected``; module docstring), with
    the residuals the intervals come from (default: the bundled table's)."""

    objective: str = "expected"
    residuals: tuple[Residual, ...] | None = None
    _factors: dict[Features, float] = field(default_factory=dict, compare=False, repr=False)
    _time: tuple[Residual, ...] = field(default=(), init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.upper:  # read once per ranking (the point ranking needs no interval)
            object.__setattr__(self, "_time", family_residuals("time", self.residuals))

    @property
    def upper(self) -> bool:
        """Whether layouts are ranked by their interval's upper end."""
        return self.objective == "upper"

    def high(self, job: Job, result: JobResult) -> float:
        """The upper end of ``result``'s iteration-time interval (inf: unbounded)."""
        return self._highs(job, result)[0]

    def _highs(self, job: Job, result: JobResult) -> tuple[float, float]:
        """The interval's upper end, and the same without the MFU frontier's floor (the
        half-width's own end: what tells two plans apart that are both above the frontier,
        whose floor, the model's FLOPs at the best priced MFU, is the same for every layout
        of a job)."""
        bounds = time_bounds(features(job, result.layout), result.iteration_s, result.mfu,
                             self._time)
        return bounds.high, upper_end(result.iteration_s, bounds.q)

    def order(self, job: Job, layout: Execution, bound: float) -> tuple[float, ...]:
        """A lower bound on ``key`` of any evaluation of ``layout`` whose iteration is at least
        ``bound`` seconds."""
        if not self.upper:
            return (bound,)
        plan = features(job, layout)
        if plan not in self._factors:  # one interval per feature set, not per layout
            self._factors[plan] = upper_end(1.0, time_bounds(plan, 1.0, None, self._time).q)
        lowest = bound * self._factors[plan]
        return (lowest, lowest, bound)

    def key(self, job: Job, result: JobResult) -> tuple[float, ...]:
        """What the search minimises: (iteration) or (upper end, upper end without the MFU
        frontier's floor, iteration)."""
        if not self.upper:
            return (result.iteration_s,)
        return (*self._highs(job, result), result.iteration_s)


POINT = Ranking("expected")


def difference_note(job: Job, upper_best: JobResult, point_best: JobResult,
                    ranking: Ranking) -> str | None:
    """One line when the upper-best and point-best plans differ: both layouts, their
    predicted times and upper ends, and the difference."""
    if upper_best.layout == point_best.layout:
        return None
    high_u, high_p = ranking.high(job, upper_best), ranking.high(job, point_best)
    return (f"--objective upper chose {upper_best.layout.label()} "
            f"({upper_best.iteration_s:.3f} s, 90% upper end {_seconds(high_u)}) over the "
            f"point-best {point_best.layout.label()} ({point_best.iteration_s:.3f} s, upper "
            f"end {_seconds(high_p)}): {_percent(upper_best.iteration_s, point_best.iteration_s)}"
            f" slower predicted, {_percent(high_u, high_p)} on the upper end "
            "(--objective expected ranks by the prediction)")


def _seconds(value: float) -> str:
    return f"{value:.3f} s" if math.isfinite(value) else "unbounded"


def _percent(a: float, b: float) -> str:
    if not (math.isfinite(a) and math.isfinite(b)):
        return "unbounded"
    return f"{a / b - 1:+.1%}"


def best_of(job: Job, results: Sequence[JobResult], ranking: Ranking) -> JobResult:
    """The result ``ranking`` puts first (ties: the layout label)."""
    return min(results, key=lambda r: (*ranking.key(job, r), r.layout.label()))
