"""PNG plots of timelines (matplotlib, Agg backend: no display needed; imported only when a
plot is drawn, so the CLI starts fast)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlsched.report.files import atomic_output
from dlsched.sim.timeline import Timeline
from dlsched.units import format_time

if TYPE_CHECKING:
    from matplotlib.axes import Axes

_TIME_SCALES = ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns"))


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend, imported on first use."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _time_scale(seconds: float) -> tuple[float, str]:
    for scale, name in _TIME_SCALES:
        if seconds >= scale:
            return scale, name
    return _TIME_SCALES[-1]


def _rows(timeline: Timeline, lanes: list[int]) -> dict[tuple[str, int], int]:
    """Row index of each (resource, lane): resources in order of appearance, lanes ascending."""
    used: dict[str, set[int]] = {}
    for span, lane in zip(timeline.spans, lanes, strict=True):
        used.setdefault(span.resource, set()).add(lane)
    keys = [(resource, lane) for resource in timeline.resources()
            for lane in sorted(used[resource])]
    return {key: index for index, key in enumerate(keys)}


def _draw(axes: Axes, timeline: Timeline, title: str, color_by: str, scale: float,
          keys: dict[object, int]) -> None:
    lanes = timeline.lanes()
    rows = _rows(timeline, lanes)
    cmap = pyplot().get_cmap("tab20")
    for span, lane in zip(timeline.spans, lanes, strict=True):
        key = span.kind if color_by == "kind" else span.args.get(color_by, span.kind)
        color = cmap(keys.setdefault(key, len(keys)) % 20)
        axes.barh(rows[(span.resource, lane)], span.duration / scale, left=span.start / scale,
                  height=0.8, color=color, edgecolor="black", linewidth=0.2)
    axes.set_yticks(list(rows.values()))
    axes.set_yticklabels([r if lane == 0 else f"{r} #{lane}" for r, lane in rows])
    axes.invert_yaxis()
    axes.set_title(f"{title or 'timeline'}  (makespan {format_time(timeline.makespan)})")
    axes.grid(axis="x", alpha=0.3)


def plot_timelines(panels: Sequence[tuple[str, Timeline]], path: str | Path,
                   color_by: str = "kind") -> Path:
    """Draw one Gantt chart per (title, timeline), stacked on a shared time axis, as PNG.

    Each row is a (resource, lane); ``color_by`` is ``"kind"`` or an ``args`` key (e.g.
    ``"chunk"``) that picks each bar's color. The time unit is chosen automatically and stated
    on the axis.
    """
    plt = pyplot()
    scale, unit = _time_scale(max(max(t.end for _, t in panels), 1e-12))
    heights = [max(len(_rows(t, t.lanes())), 1) for _, t in panels]
    figure, axes_list = plt.subplots(len(panels), 1, sharex=True, squeeze=False,
                                     figsize=(11, 1.0 + 0.4 * sum(heights) + 0.6 * len(panels)),
                                     gridspec_kw={"height_ratios": heights})
    keys: dict[object, int] = {}
    for axes, (title, timeline) in zip(axes_list[:, 0], panels, strict=True):
        _draw(axes, timeline, title, color_by, scale, keys)
    axes_list[-1, 0].set_xlabel(f"time ({unit})")
    figure.tight_layout()
    with atomic_output(path) as temporary:
        figure.savefig(temporary, dpi=110, format="png")
    plt.close(figure)
    return Path(path)


def plot_timeline(timeline: Timeline, path: str | Path, title: str = "",
                  color_by: str = "kind") -> Path:
    """Draw one timeline as a Gantt chart PNG (see ``plot_timelines``)."""
    return plot_timelines([(title, timeline)], path, color_by)
