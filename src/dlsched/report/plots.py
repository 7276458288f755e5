"""PNG plots of timelines (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from dlsched.sim.timeline import Timeline
from dlsched.units import format_time

_TIME_SCALES = ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns"))


def _time_scale(seconds: float) -> tuple[float, str]:
    for scale, name in _TIME_SCALES:
        if seconds >= scale:
            return scale, name
    return _TIME_SCALES[-1]


def plot_timeline(timeline: Timeline, path: str | Path, title: str = "",
                  color_by: str = "kind") -> Path:
    """Draw a Gantt chart, one row per (resource, lane), and save it as PNG at ``path``.

    ``color_by`` is ``"kind"`` or an ``args`` key (e.g. ``"chunk"``) that picks each bar's
    color. The x axis is simulated time in an automatically chosen unit (stated on the axis).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lanes = timeline.lanes()
    rows: dict[tuple[str, int], int] = {}
    for resource in timeline.resources():
        for span, lane in zip(timeline.spans, lanes, strict=True):
            if span.resource == resource:
                rows.setdefault((resource, lane), len(rows))
    scale, unit = _time_scale(max(timeline.end, 1e-12))
    cmap = plt.get_cmap("tab20")
    keys: dict[object, int] = {}
    figure, axes = plt.subplots(figsize=(11, 1.2 + 0.45 * max(len(rows), 1)))
    for span, lane in zip(timeline.spans, lanes, strict=True):
        key = span.kind if color_by == "kind" else span.args.get(color_by, span.kind)
        color = cmap(keys.setdefault(key, len(keys)) % 20)
        axes.barh(rows[(span.resource, lane)], span.duration / scale, left=span.start / scale,
                  height=0.8, color=color, edgecolor="black", linewidth=0.2)
    axes.set_yticks(list(rows.values()))
    axes.set_yticklabels([r if lane == 0 else f"{r} #{lane}" for r, lane in rows])
    axes.invert_yaxis()
    axes.set_xlabel(f"time ({unit})")
    heading = title or "timeline"
    axes.set_title(f"{heading}  (makespan {format_time(timeline.makespan)})")
    axes.grid(axis="x", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
