"""Compare policies across a sweep: speedups over a baseline, aggregated by geometric mean.

A *case* is one point of the grid without the policy parameter (e.g. one topology x size x
chunk count); within a case each policy has one time. ``speedup_vs_<baseline>`` = baseline
time / this policy's time (> 1 = faster than the baseline); over several cases speedups are
combined by geometric mean (``report.averages.geomean``), the average that treats 2x faster
and 2x slower symmetrically.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dlsched.errors import ConfigError
from dlsched.report.averages import geomean


@dataclass(frozen=True)
class Cases:
    """Times per case and policy: ``cases[case_values][policy] = time``, with the names of the
    case parameters, the policy parameter, the baseline and the policies in first-seen order."""

    params: tuple[str, ...]
    policy_param: str
    baseline: str
    policies: tuple[str, ...]
    times: dict[tuple, dict[str, float]]

    def case_dict(self, case: tuple) -> dict[str, Any]:
        """The case's parameter values by name."""
        return dict(zip(self.params, case, strict=True))

    @property
    def speedup_column(self) -> str:
        """``speedup_vs_<baseline>``."""
        return f"speedup_vs_{self.baseline}"


def collect_cases(rows: Sequence[dict[str, Any]], policy_param: str, time_metric: str,
                  varied: Sequence[str], baseline: str | None = None) -> Cases:
    """Group the 'ok' rows into cases (the ``varied`` parameters other than the policy).
    ``baseline`` defaults to the first policy seen; ConfigError when it has no rows."""
    params = tuple(p for p in varied if p != policy_param)
    times: dict[tuple, dict[str, float]] = defaultdict(dict)
    policies: dict[str, None] = {}
    for row in rows:
        value = row.get(time_metric)
        if row.get("status") == "ok" and isinstance(value, int | float) and value > 0:
            policies.setdefault(row[policy_param], None)
            times[tuple(row[p] for p in params)][row[policy_param]] = float(value)
    if not policies:
        raise ConfigError(f"metric: no successful rows with a positive {time_metric!r}")
    chosen = baseline if baseline is not None else next(iter(policies))
    if chosen not in policies:
        raise ConfigError(f"baseline: no rows for {policy_param} {chosen!r}; accepted: "
                          + ", ".join(map(str, policies)))
    return Cases(params, policy_param, chosen, tuple(policies), dict(times))


def aggregate(cases: Cases, by: Sequence[str], quantity: str = "speedup") -> list[dict[str, Any]]:
    """One row per group of ``by`` values and policy: geometric mean, min and max of
    ``quantity`` ('speedup': baseline time / time; 'time': the time itself) over the group's
    cases that have both the policy and the baseline, and the number of such cases."""
    unknown = [name for name in by if name not in cases.params]
    if unknown:
        raise ConfigError(f"by: {unknown} do not vary in this sweep; accepted: "
                          + ", ".join(cases.params))
    values: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for case, times in cases.times.items():
        named = cases.case_dict(case)
        group = tuple(named[name] for name in by)
        base = times.get(cases.baseline)
        for policy, time_s in times.items():
            if base is not None:
                values[group][policy].append(base / time_s if quantity == "speedup" else time_s)
    return [dict(zip(by, group, strict=True)) | {
        cases.policy_param: policy, "geomean": geomean(v), "min": min(v), "max": max(v),
        "cases": len(v)}
        for group, per_policy in values.items()
        for policy in cases.policies if (v := per_policy.get(policy))]


def best_per_group(cases: Cases, by: Sequence[str]) -> list[dict[str, Any]]:
    """Per group of ``by`` values: the policy with the highest geometric-mean speedup over the
    baseline, that speedup, and in how many of the group's cases it was the fastest."""
    rows = aggregate(cases, by)
    wins: dict[tuple, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for case, times in cases.times.items():
        named = cases.case_dict(case)
        wins[tuple(named[n] for n in by)][min(times, key=times.__getitem__)] += 1
    best: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        group = tuple(row[n] for n in by)
        if group not in best or row["geomean"] > best[group]["geomean"]:
            best[group] = row
    return [{name: row[name] for name in by} | {
        "best": row[cases.policy_param], cases.speedup_column: row["geomean"],
        "fastest_in": wins[group][row[cases.policy_param]], "cases": row["cases"]}
        for group, row in best.items()]


def speedup_pivot(cases: Cases, by: Sequence[str]) -> list[dict[str, Any]]:
    """One row per group, one column per policy: geometric-mean ``speedup_vs_<baseline>``."""
    pivot: dict[tuple, dict[str, Any]] = {}
    for row in aggregate(cases, by):
        group = tuple(row[n] for n in by)
        pivot.setdefault(group, dict(zip(by, group, strict=True)))[
            str(row[cases.policy_param])] = row["geomean"]
    return list(pivot.values())
