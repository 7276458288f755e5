"""Errors, 90% intervals and per-source statistics of the ledger's predictions.

Error: ``predicted / published - 1`` in the metric's own terms (a positive error on a time is
a slower prediction, on a rate a faster one).

Intervals (split conformal, Vovk et al. 2005; Lei et al. 2018): the score of a prediction is
``|error|``; a prediction gets the half-width ``q``, the ``ceil((n + 1) x 0.9)``-th smallest
score of the ``n`` calibration predictions, and its interval on the published value is
``[predicted / (1 + q), predicted / (1 - q)]`` (exactly the published values whose error would
be within ``q``; unbounded above when ``q >= 1``). Calibration (leave one group out): the
scored, held-out predictions of the same family (time or memory) outside the covered row's
group, a group being the rows of one source that run the same model (they differ only in scale
or in one setting: dgxc's Llama 3.1 70B on 64 to 2,048 GPUs, Korthikanti's two runs of each
model), so neither the row nor its near-copies build its interval. Leaving one whole source out
instead cannot give a 90% interval to SC21 (its others hold 8 rows) and calibrates the only
H100 source on A100 residuals alone; pooling the groups lets a run on one GPU inherit the
misses measured on another. With too few calibration rows (``ceil((n + 1) x 0.9) > n``: fewer
than 9) the interval is unbounded. A row a preset constant was fitted to is never a calibration
score (its error is not a held-out error). Coverage is counted on scored predictions, each
against an interval its own group did not build.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from dlsched.job.intervals import LEVEL, conformal_quantile
from dlsched.ledger.predict import Prediction

__all__ = ["FAMILY_LINES", "LEVEL", "Interval", "SourceStats", "conformal_quantile", "interval",
           "source_stats", "summarize"]


@dataclass(frozen=True)
class Interval:
    """A prediction's interval on the published value (``high`` None: unbounded), its
    half-width in relative error (``q``, inf when unbounded), the calibration size and how it
    was built (``leave-one-group-out``, or ``unbounded``)."""

    low: float
    high: float | None
    q: float
    n: int
    method: str

    def covers(self, value: float) -> bool:
        """Whether ``value`` lies in the interval."""
        return self.low <= value and (self.high is None or value <= self.high)


def _group(prediction: Prediction) -> tuple[str, str]:
    """The rows that share the prediction's source and model (module docstring)."""
    return prediction.row.source, prediction.row.model.name


def _calibration(prediction: Prediction) -> bool:
    return prediction.scored and prediction.held_out and prediction.predicted is not None


def interval(prediction: Prediction, predictions: Sequence[Prediction],
             level: float = LEVEL) -> Interval | None:
    """The interval of ``prediction`` (module docstring); None when it is not predicted."""
    if prediction.predicted is None:
        return None
    family = [p for p in predictions if _calibration(p) and p.family == prediction.family]
    scores = [abs(p.error or 0.0) for p in family if _group(p) != _group(prediction)]
    q, n = conformal_quantile(scores, level), len(scores)
    if math.isinf(q):
        return Interval(0.0, None, q, n, "unbounded")
    high = prediction.predicted / (1 - q) if q < 1 else None
    return Interval(prediction.predicted / (1 + q), high, q, n, "leave-one-group-out")


@dataclass(frozen=True)
class SourceStats:
    """One source's scored predictions of one family: how many rows and how many priced,
    mean absolute and mean signed error (over all priced, and over the held-out ones),
    the worst row and the intervals' coverage."""

    source: str
    family: str
    rows: int
    priced: int
    mean_abs_error: float | None
    mean_signed_error: float | None
    held_out_mean_abs_error: float | None
    held_out_mean_signed_error: float | None
    worst_row: str | None
    worst_error: float | None
    covered: int
    coverage: float | None

    def row(self) -> dict[str, object]:
        """A flat record for tables and JSON."""
        return dict(self.__dict__)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def source_stats(name: str, family: str, scored: Sequence[Prediction],
                 intervals: Sequence[Interval | None]) -> SourceStats:
    """Statistics of ``scored`` (one source's, or every source's under ``name`` ``all``)."""
    priced = [(p, i) for p, i in zip(scored, intervals, strict=True) if p.error is not None]
    errors = [p.error for p, _ in priced if p.error is not None]
    held = [p.error for p, _ in priced if p.held_out and p.error is not None]
    worst = max(priced, key=lambda item: abs(item[0].error or 0.0), default=None)
    covered = sum(1 for p, i in priced if i is not None and i.covers(p.published))
    return SourceStats(name, family, len({p.row.id for p in scored}), len(priced),
                       _mean([abs(e) for e in errors]), _mean(errors),
                       _mean([abs(e) for e in held]), _mean(held),
                       None if worst is None else worst[0].row.id,
                       None if worst is None else worst[0].error, covered,
                       covered / len(priced) if priced else None)


# The cross-source lines of the statistics: each name and which predictions it takes.
FAMILY_LINES: dict[str, str] = {
    "moe": "every source's mixture-of-experts rows (the row's model has experts)",
    "all": "every row of every source"}


def _in_line(name: str, prediction: Prediction) -> bool:
    """Whether ``prediction`` counts in the line ``name``: its source, or a ``FAMILY_LINES``
    line."""
    if name == "moe":
        return prediction.row.model.experts > 0
    return name in ("all", prediction.row.source)


def summarize(predictions: Sequence[Prediction], sources: Sequence[str]
              ) -> tuple[list[Interval | None], list[SourceStats]]:
    """Every prediction's interval, and the statistics per source and family, and over the
    sources (``FAMILY_LINES``: ``moe``, the mixture-of-experts rows of every source, when
    there are any; ``all``), for the families that have scored predictions."""
    intervals = [interval(p, predictions) for p in predictions]
    stats = []
    for family in ("time", "memory"):
        picked = [(p, i) for p, i in zip(predictions, intervals, strict=True)
                  if p.scored and p.family == family]
        if not picked:
            continue
        for name in (*sources, *FAMILY_LINES):
            chosen = [(p, i) for p, i in picked if _in_line(name, p)]
            if chosen:
                stats.append(source_stats(name, family, [p for p, _ in chosen],
                                          [i for _, i in chosen]))
    return intervals, stats
