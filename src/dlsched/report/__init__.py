"""Reports computed from Timelines and result rows: tables, CSV/JSON, Chrome traces, PNG plots."""

from dlsched.report.chrome_trace import (
    trace_events,
    traces_events,
    write_chrome_trace,
    write_chrome_traces,
)
from dlsched.report.files import atomic_output, write_text
from dlsched.report.plots import plot_timeline, plot_timelines
from dlsched.report.tables import Column, render_table, rows_to_csv, to_json

__all__ = [
    "Column",
    "atomic_output",
    "plot_timeline",
    "plot_timelines",
    "render_table",
    "rows_to_csv",
    "to_json",
    "trace_events",
    "traces_events",
    "write_chrome_trace",
    "write_chrome_traces",
    "write_text",
]
