"""Write a Timeline as Chrome Trace Event JSON (opens in Perfetto and chrome://tracing).

One process per span group, one thread per (resource, lane), so overlapping spans never share
a track. Several timelines (one per policy or planner) go into ONE file, each as its own
process(es) named after it — the rule every command follows for ``--trace``.
Times are written in microseconds, as the format requires.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dlsched.report.files import write_text
from dlsched.sim.timeline import Timeline

_US_PER_SECOND = 1e6


def trace_events(timeline: Timeline, name: str = "") -> dict[str, Any]:
    """The trace as a JSON-ready dict ``{"traceEvents": [...], "displayTimeUnit": "ns"}``."""
    return traces_events([(name, timeline)])


def traces_events(named: Sequence[tuple[str, Timeline]]) -> dict[str, Any]:
    """Several timelines (e.g. one per policy) in one trace: each (name, span group) is its own
    process, named ``"<name>: <group>"`` (or just one of them), ordered as given."""
    pids: dict[tuple[str, str], int] = {}
    tids: dict[tuple[int, str, int], int] = {}
    events: list[dict[str, Any]] = []
    for name, timeline in named:
        for span, lane in zip(timeline.spans, timeline.lanes(), strict=True):
            pid = pids.setdefault((name, span.group), len(pids) + 1)
            key = (pid, span.resource, lane)
            if key not in tids:
                tids[key] = len(tids) + 1
                thread = span.resource if lane == 0 else f"{span.resource} #{lane}"
                events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tids[key],
                               "args": {"name": thread}})
                events.append({"ph": "M", "name": "thread_sort_index", "pid": pid,
                               "tid": tids[key], "args": {"sort_index": tids[key]}})
            args = {"bytes": span.num_bytes, **{k: _jsonable(v) for k, v in span.args.items()}}
            events.append({
                "ph": "X", "name": span.label, "cat": span.kind, "pid": pid, "tid": tids[key],
                "ts": span.start * _US_PER_SECOND, "dur": span.duration * _US_PER_SECOND,
                "args": args,
            })
    for (name, group), pid in pids.items():
        label = ": ".join(part for part in (name, group) if part) or "dlsched"
        events.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                       "args": {"name": label}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                       "args": {"sort_index": pid}})
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def _jsonable(value: Any) -> Any:
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return str(value)


def write_chrome_trace(timeline: Timeline, path: str | Path, name: str = "") -> Path:
    """Write the timeline's Chrome-trace JSON to ``path`` and return the path."""
    return write_chrome_traces([(name, timeline)], path)


def write_chrome_traces(named: Sequence[tuple[str, Timeline]], path: str | Path) -> Path:
    """Write several named timelines (one process each, see ``traces_events``) to one file."""
    return write_text(path, json.dumps(traces_events(named)))
