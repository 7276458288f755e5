"""PNG plots of a sweep (matplotlib, Agg backend like the rest of ``dlsched.report``):
heat maps of each policy's speedup over the baseline on two parameters, and lines over one.
Cases that differ in other parameters are combined by geometric mean (said in the title)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import TwoSlopeNorm

from dlsched.report import plots as _agg  # noqa: F401  (selects the Agg backend)
from dlsched.report.files import atomic_output
from dlsched.sweep.summary import Cases, aggregate
from dlsched.units import format_bytes


def _others(cases: Cases, shown: tuple[str, ...]) -> str:
    rest = [name for name in cases.params if name not in shown]
    return f"; geo-mean over {', '.join(rest)}" if rest else ""


def _labels(name: str, values: list) -> list[str]:
    """Tick labels: sizes in bytes shown with units."""
    return [format_bytes(v) if name == "size" else str(v) for v in values]


def _axis_values(rows: list[dict], name: str) -> list:
    return sorted({row[name] for row in rows}, key=lambda v: (isinstance(v, str), v))


def plot_heatmaps(cases: Cases, x: str, y: str, path: str | Path, time_metric: str) -> Path:
    """One heat map per policy other than the baseline: ``speedup_vs_<baseline>`` on the
    ``x`` by ``y`` grid (green faster than the baseline, red slower, white equal)."""
    rows = aggregate(cases, [x, y])
    policies = [p for p in cases.policies if p != cases.baseline] or [cases.baseline]
    xs, ys = _axis_values(rows, x), _axis_values(rows, y)
    grids = {p: np.full((len(ys), len(xs)), np.nan) for p in policies}
    for row in rows:
        if row[cases.policy_param] in grids:
            grids[row[cases.policy_param]][ys.index(row[y]), xs.index(row[x])] = row["geomean"]
    finite = np.concatenate([g[np.isfinite(g)] for g in grids.values()] + [np.ones(1)])
    norm = TwoSlopeNorm(1.0, min(finite.min(), 0.999), max(finite.max(), 1.001))
    figure, axes = plt.subplots(1, len(policies), squeeze=False,
                                figsize=(1.2 + (0.9 * len(xs) + 1.5) * len(policies),
                                         1.8 + 0.45 * len(ys)))
    for ax, policy in zip(axes[0], policies, strict=True):
        image = ax.imshow(grids[policy], cmap="RdYlGn", norm=norm, aspect="auto")
        for (i, j), value in np.ndenumerate(grids[policy]):
            if np.isfinite(value):
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8)
        ax.set_xticks(range(len(xs)), _labels(x, xs), rotation=45, ha="right")
        ax.set_yticks(range(len(ys)), _labels(y, ys))
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        ax.set_title(f"{policy}", fontsize=10)
    figure.colorbar(image, ax=axes[0].tolist(), label=f"{cases.speedup_column} (x)")
    figure.suptitle(f"speedup over {cases.baseline} ({time_metric}){_others(cases, (x, y))}",
                    fontsize=10, y=1.04)
    return _save(figure, path)


def plot_lines(cases: Cases, x: str, path: str | Path, quantity: str, time_metric: str) -> Path:
    """A line per policy over ``x``: its ``speedup_vs_<baseline>`` (quantity 'speedup') or its
    ``time_metric`` in seconds (quantity 'time', log scale)."""
    rows = aggregate(cases, [x], quantity)
    xs = _axis_values(rows, x)
    numeric = all(isinstance(v, int | float) for v in xs)
    figure, ax = plt.subplots(figsize=(7, 4.2))
    for policy in cases.policies:
        points = sorted(((xs.index(r[x]), r["geomean"]) for r in rows
                         if r[cases.policy_param] == policy), key=lambda p: p[0])
        if points:
            positions = [xs[i] if numeric else i for i, _ in points]
            ax.plot(positions, [v for _, v in points], marker="o", label=str(policy))
    if not numeric:
        ax.set_xticks(range(len(xs)), _labels(x, xs), rotation=30, ha="right")
    elif len(xs) > 2 and min(xs) > 0 and max(xs) / min(xs) >= 16:
        ax.set_xscale("log")
    if quantity == "time":
        ax.set_yscale("log")
        ax.set_ylabel(f"{time_metric} (s, geo-mean)")
    else:
        ax.axhline(1.0, color="gray", linewidth=0.8)
        ax.set_ylabel(f"{cases.speedup_column} (x, geo-mean)")
    ax.set_xlabel(x)
    ax.grid(alpha=0.3)
    ax.legend(title=cases.policy_param, fontsize=8)
    ax.set_title(f"{quantity} over {x}{_others(cases, (x,))}", fontsize=10)
    return _save(figure, path)


def _save(figure: plt.Figure, path: str | Path) -> Path:
    with atomic_output(path) as temporary:
        figure.savefig(temporary, dpi=110, bbox_inches="tight", format="png")
    plt.close(figure)
    return Path(path)
