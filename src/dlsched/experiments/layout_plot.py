"""``dlsched reproduce layouts --plot``: how dlsched prices and ranks a sweep of measured
layouts, in two panels.

Left: each priced trial at (measured, predicted) step time, seconds on log axes, coloured by
kernel; the diagonal is a perfect prediction, the dotted lines +-10%. Right: the ranking, each
trial at (measured / the best measured of its group, predicted / the best predicted of its
group): a group ranks perfectly when its points rise together; the layout dlsched ranks first
sits at predicted 1.0, and its x is how much slower than the best it measures (filled marker).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any

from dlsched.report.plots import pyplot


def plot_layouts(rows: Sequence[dict[str, Any]], group_key: Callable[[dict[str, Any]], Hashable],
                 path: str | Path, title: str) -> int:
    """Draw the priced measurements of ``rows`` (each with ``measured_s``, ``predicted_s``,
    ``kernel`` and ``error`` not None; grouped by ``group_key``) to ``path`` (PNG); returns
    the number of trials drawn."""
    plt = pyplot()
    timed = [r for r in rows if r["error"] is not None]
    kernels = list(dict.fromkeys(r["kernel"] for r in timed))
    colors = {k: plt.get_cmap("tab10")(i) for i, k in enumerate(kernels)}
    figure, (prices, ranks) = plt.subplots(1, 2, figsize=(11, 4.8))
    for row in timed:
        prices.scatter([row["measured_s"]], [row["predicted_s"]], s=14, alpha=0.7,
                       color=colors[row["kernel"]])
    values = [v for r in timed for v in (r["measured_s"], r["predicted_s"])] or [1.0]
    low, high = min(values) / 1.15, max(values) * 1.15
    prices.plot([low, high], [low, high], color="black", linewidth=0.8)
    for factor in (0.9, 1.1):
        prices.plot([low, high], [low * factor, high * factor], color="grey", linewidth=0.6,
                    linestyle=":")
    prices.set(xscale="log", yscale="log", xlim=(low, high), ylim=(low, high),
               xlabel="measured step time (s)", ylabel="predicted step time (s)",
               title=f"{len(timed)} trials")
    groups: dict[Hashable, list[dict[str, Any]]] = {}
    for row in timed:
        groups.setdefault(group_key(row), []).append(row)
    for members in groups.values():
        best_measured = min(r["measured_s"] for r in members)
        best_predicted = min(r["predicted_s"] for r in members)
        first = min(members, key=lambda r: r["predicted_s"])
        for row in members:
            color = colors[row["kernel"]]
            ranks.scatter([row["measured_s"] / best_measured],
                          [row["predicted_s"] / best_predicted], s=16 if row is first else 9,
                          edgecolors=color, facecolors=color if row is first else "none",
                          linewidths=0.8, alpha=0.8, zorder=3 if row is first else 2)
    ranks.axvline(1.03, color="grey", linewidth=0.6, linestyle=":")
    ranks.set(xlabel="measured / best measured in its group",
              ylabel="predicted / best predicted in its group",
              title=f"{len(groups)} groups (filled: ranked first; dotted: 3% off the best)")
    for kernel, color in colors.items():
        prices.scatter([], [], color=color, label=kernel)
    if kernels:
        prices.legend(loc="upper left", fontsize=8)
    from matplotlib.ticker import NullFormatter

    for axis in (prices.xaxis, prices.yaxis):  # the log axes' minor labels overlap
        axis.set_minor_formatter(NullFormatter())
    for axes in (prices, ranks):
        axes.grid(alpha=0.3, which="both")
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return len(timed)
