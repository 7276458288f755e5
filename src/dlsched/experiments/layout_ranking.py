"""How well predicted times rank measured layouts: errors, their bias, and per group of
layouts (the configurations a user chooses between: one model, GPU count and global batch)
the Kendall tau between predicted and measured times and whether the layout ranked first by
the prediction is close to the best measured one.

Every function takes plain rows (dicts) holding ``predicted_s`` and ``measured_s`` (seconds);
``error`` is ``predicted / measured - 1``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

Row = dict[str, Any]
CLOSE = (0.03, 0.05)
"""A first-ranked layout is counted within 3% and within 5% of the best measured one."""


def error(predicted_s: float, measured_s: float) -> float:
    """predicted / measured - 1."""
    return predicted_s / measured_s - 1


def error_summary(rows: Sequence[Row]) -> dict[str, Any]:
    """``rows`` (count), ``mean_abs_error``, ``bias`` (mean signed error) and the worst row's
    signed ``worst_error`` (the largest in magnitude); fractions."""
    errors = [error(r["predicted_s"], r["measured_s"]) for r in rows]
    if not errors:
        return {"rows": 0, "mean_abs_error": None, "bias": None, "worst_error": None}
    return {"rows": len(errors), "mean_abs_error": sum(map(abs, errors)) / len(errors),
            "bias": sum(errors) / len(errors), "worst_error": max(errors, key=abs)}


def by(rows: Sequence[Row], key: str) -> list[dict[str, Any]]:
    """``error_summary`` per value of ``key`` (ascending), each led by ``key``."""
    values = sorted({r[key] for r in rows})
    return [{key: v, **error_summary([r for r in rows if r[key] == v])} for v in values]


def kendall_tau(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """Kendall's tau-b between two sequences (NaN for fewer than two items or a constant
    sequence)."""
    from scipy.stats import kendalltau

    if len(predicted) < 2:
        return math.nan
    return float(kendalltau(predicted, measured).statistic)


def group_ranking(rows: Sequence[Row]) -> dict[str, Any]:
    """One group's ranking: ``layouts`` (count), ``kendall_tau``, ``first_ratio`` (measured
    time of the layout predicted fastest over the best measured time, >= 1; ties in the
    prediction broken by row order) and ``first_within_3pct`` / ``first_within_5pct``."""
    predicted = [r["predicted_s"] for r in rows]
    measured = [r["measured_s"] for r in rows]
    first = min(range(len(rows)), key=lambda i: (predicted[i], i))
    ratio = measured[first] / min(measured)
    return {"layouts": len(rows), "kendall_tau": kendall_tau(predicted, measured),
            "first_ratio": ratio,
            **{f"first_within_{round(c * 100)}pct": ratio <= 1 + c for c in CLOSE}}


def groups(rows: Sequence[Row], key: Callable[[Row], Hashable]) -> list[list[Row]]:
    """``rows`` grouped by ``key`` (groups in order of first appearance)."""
    found: dict[Hashable, list[Row]] = {}
    for row in rows:
        found.setdefault(key(row), []).append(row)
    return list(found.values())


def ranking_summary(grouped: Sequence[Sequence[Row]]) -> dict[str, Any]:
    """Over groups of at least two layouts: ``groups``, ``mean_kendall_tau`` (groups whose tau
    is defined), the count of groups whose first-ranked layout is within 3% / 5% of the best
    measured one, and the ``worst_first_ratio``."""
    ranked = [group_ranking(g) for g in grouped if len(g) >= 2]
    taus = [g["kendall_tau"] for g in ranked if not math.isnan(g["kendall_tau"])]
    return {"groups": len(ranked),
            "mean_kendall_tau": sum(taus) / len(taus) if taus else None,
            **{f"first_within_{round(c * 100)}pct": sum(g[f"first_within_{round(c * 100)}pct"]
                                                        for g in ranked) for c in CLOSE},
            "worst_first_ratio": max((g["first_ratio"] for g in ranked), default=None)}
