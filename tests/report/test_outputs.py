"""Chrome traces, PNG plots and CSV built from a collective's timeline."""

import csv
import io
import itertools
import json

from dlsched.collectives import run_collective
from dlsched.hardware import load_topology
from dlsched.report import plot_timeline, rows_to_csv, trace_events, write_chrome_trace


def _result():
    return run_collective(load_topology("3D-FC_Ring_SW"), "all-reduce", 10**8, 8, "themis",
                          "scf", concurrency=2)


def test_trace_has_a_track_per_dimension_and_lane_without_overlaps(tmp_path):
    """Complete events in microseconds; no two events on one (pid, tid) overlap; args carry
    the chunk id and stage; threads are named after dimensions."""
    result = _result()
    path = write_chrome_trace(result.timeline, tmp_path / "t.json")
    trace = json.loads(path.read_text())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == len(result.timeline)
    assert {"chunk", "stage", "bytes"} <= set(spans[0]["args"])
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {"dim1 FC", "dim2 Ring", "dim3 SW"} <= names
    tracks: dict[tuple, list] = {}
    for event in spans:
        tracks.setdefault((event["pid"], event["tid"]), []).append(event)
    for events in tracks.values():
        events.sort(key=lambda e: e["ts"])
        for a, b in itertools.pairwise(events):
            assert a["ts"] + a["dur"] <= b["ts"] + 1e-6
    end_us = max(e["ts"] + e["dur"] for e in spans)
    assert abs(end_us - result.time_s * 1e6) < 1e-3


def test_trace_events_in_memory_matches_spans():
    """trace_events gives the same spans without writing a file."""
    result = _result()
    assert sum(e["ph"] == "X" for e in trace_events(result.timeline)["traceEvents"]) == len(
        result.timeline)


def test_plot_is_a_png(tmp_path):
    """The plot is a non-trivial PNG file."""
    path = plot_timeline(_result().timeline, tmp_path / "p.png", "test", color_by="chunk")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 5000


def test_csv_round_trips_rows():
    """CSV has a header and one line per row with raw SI values."""
    rows = [_result().row(8, 2)]
    parsed = list(csv.DictReader(io.StringIO(rows_to_csv(rows))))
    assert float(parsed[0]["time_s"]) == rows[0]["time_s"]
    assert parsed[0]["topology"] == "3D-FC_Ring_SW"
