"""Write a Timeline as Chrome Trace Event JSON (opens in Perfetto and chrome://tracing).

One process per span group, one thread per (resource, lane), so overlapping spans never share
a track. Times are written in microseconds, as the format requires.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dlsched.sim.timeline import Timeline

_US_PER_SECOND = 1e6


def trace_events(timeline: Timeline) -> dict[str, Any]:
    """The trace as a JSON-ready dict ``{"traceEvents": [...], "displayTimeUnit": "ns"}``."""
    lanes = timeline.lanes()
    pids: dict[str, int] = {}
    tids: dict[tuple[str, str, int], int] = {}
    events: list[dict[str, Any]] = []
    for span, lane in zip(timeline.spans, lanes, strict=True):
        group = span.group or "dlsched"
        pid = pids.setdefault(group, len(pids) + 1)
        key = (group, span.resource, lane)
        if key not in tids:
            tids[key] = len(tids) + 1
            name = span.resource if lane == 0 else f"{span.resource} #{lane}"
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tids[key],
                           "args": {"name": name}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tids[key],
                           "args": {"sort_index": tids[key]}})
        args = {"bytes": span.num_bytes, **{k: _jsonable(v) for k, v in span.args.items()}}
        events.append({
            "ph": "X", "name": span.label, "cat": span.kind, "pid": pid, "tid": tids[key],
            "ts": span.start * _US_PER_SECOND, "dur": span.duration * _US_PER_SECOND,
            "args": args,
        })
    for group, pid in pids.items():
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                       "args": {"name": group}})
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def _jsonable(value: Any) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return str(value)


def write_chrome_trace(timeline: Timeline, path: str | Path) -> Path:
    """Write the timeline's Chrome-trace JSON to ``path`` and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(trace_events(timeline)))
    return path
