"""``dlsched validate --plot``: predicted against published, one panel per metric, log axes.

Each predicted metric is a point at (published, predicted), coloured by source (a hollow
marker: a row a preset was fitted to, not held out). Its 90% interval on the published value
(``dlsched.ledger.score``) is drawn as a horizontal bar at the predicted height: the interval
covers the row when its bar passes through its point. The diagonal is a perfect prediction,
the dotted lines +-10%.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dlsched.ledger.schema import METRIC_UNITS
from dlsched.report.plots import pyplot


def plot_validation(rows: Sequence[dict[str, Any]], path: str | Path) -> int:
    """Draw the predicted records of ``rows`` (``ledger.report.record``) to ``path`` (PNG);
    returns the number of points drawn."""
    plt = pyplot()
    priced = [row for row in rows if row["predicted"] is not None]
    metrics = list(dict.fromkeys(row["metric"] for row in priced))
    sources = list(dict.fromkeys(row["source"] for row in priced))
    colors = {source: plt.get_cmap("tab10")(index) for index, source in enumerate(sources)}
    columns = min(2, max(1, len(metrics)))
    lines = max(1, -(-len(metrics) // columns))
    figure, grid = plt.subplots(lines, columns, figsize=(5.2 * columns, 4.8 * lines),
                                squeeze=False)
    panels = list(grid.flat)
    for axes in panels[len(metrics):]:
        axes.set_visible(False)
    for axes, metric in zip(panels, metrics, strict=False):
        chosen = [row for row in priced if row["metric"] == metric]
        for row in chosen:
            color = colors[row["source"]]
            x, y = row["published"], row["predicted"]
            if row["low"] is not None:
                high = row["high"] if row["high"] is not None else 10 * x
                axes.plot([row["low"], high], [y, y], color=color, alpha=0.45, linewidth=1.2)
            axes.scatter([x], [y], s=26, edgecolors=color, linewidths=1.2,
                         facecolors=color if row["held_out"] else "none", zorder=3)
        values = [v for row in chosen for v in (row["published"], row["predicted"])]
        low, high = min(values) / 1.15, max(values) * 1.15
        axes.plot([low, high], [low, high], color="black", linewidth=0.8)
        for factor in (0.9, 1.1):
            axes.plot([low, high], [low * factor, high * factor], color="grey",
                      linewidth=0.6, linestyle=":")
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.set_xlim(low, high)
        axes.set_ylim(low, high)
        _ticks(axes, low, high)
        unit = METRIC_UNITS[metric][0]
        axes.set_xlabel(f"published {metric} ({unit})")
        axes.set_ylabel(f"predicted ({unit})")
        axes.set_title(f"{metric}: {len(chosen)} rows")
        axes.grid(alpha=0.3, which="both")
    for source, color in colors.items():
        panels[0].scatter([], [], color=color, label=source)
    if sources:
        panels[0].legend(loc="upper left", fontsize=8,
                               title="hollow: fitted row", title_fontsize=7)
    figure.suptitle("dlsched validate: predicted vs published, 90% intervals "
                    "(leave one source out)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return len(priced)


def _ticks(axes: Any, low: float, high: float) -> None:
    """Five labelled ticks spread evenly on the log axes (the default labels minor ticks as
    powers of ten, unreadable over a range narrower than a decade)."""
    from matplotlib.ticker import NullLocator

    ticks = [low * (high / low) ** ((k + 0.5) / 5) for k in range(5)]
    labels = [f"{tick:.3g}" for tick in ticks]
    for axis in (axes.xaxis, axes.yaxis):
        axis.set_minor_locator(NullLocator())
        axis.set_ticks(ticks, labels)
