"""How tables show their row keys, each rule stated once: text columns, durations in
milliseconds or seconds and fractions in percent (the unit in the header), the metrics every
domain reports, and our value beside the paper's. A table (the CLI's, a reproduction's) lists
its keys through these and spells out only its own columns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dlsched.report.tables import Column, as_percent, as_ratio, fixed, in_percent, seconds_as_ms

STANDARD = {column.key: column for column in (
    Column("time_over_bound", "time/bound", as_ratio),
    Column("gpus_used", "GPUs"),
    Column("pp", "PP"),
    Column("dp", "DP"),
    Column("tp", "TP"),
    Column("messages", "all-reduces"),
    Column("mfu", "MFU (%)", in_percent(1)),
)}
"""Metrics several commands report, shown the same way in each."""


three_decimals = fixed(3)
"""A plain number with 3 decimals (e.g. a ratio to a lower bound)."""


def text(*keys: str) -> list[Column]:
    """Left-aligned text columns headed by their keys (underscores shown as spaces)."""
    return [Column(key, key.replace("_", " "), justify="left") for key in keys]


def times(fmt: Callable[[Any], str] = seconds_as_ms, **labels: str) -> list[Column]:
    """Durations (seconds in the rows) shown in milliseconds by ``fmt``: a column per key,
    headed ``<label> (ms)``."""
    return [Column(key, f"{label} (ms)", fmt) for key, label in labels.items()]


def seconds(fmt: Callable[[Any], str] = three_decimals, **labels: str) -> list[Column]:
    """Durations shown in seconds by ``fmt`` (default: 3 decimals): a column per key, headed
    ``<label> (s)``."""
    return [Column(key, f"{label} (s)", fmt) for key, label in labels.items()]


def percents(fmt: Callable[[Any], str] = as_percent, **labels: str) -> list[Column]:
    """Fractions (0..1 in the rows) shown as percentages by ``fmt``: a column per key, headed
    ``<label> (%)``."""
    return [Column(key, f"{label} (%)", fmt) for key, label in labels.items()]


def standard(*keys: str) -> list[Column]:
    """The ``STANDARD`` columns of ``keys``."""
    return [STANDARD[key] for key in keys]


def beside_paper(key: str, header: str, fmt: Callable[[Any], str],
                 paper_header: str = "paper") -> list[Column]:
    """Our ``key`` and the paper's ``paper_<key>`` side by side, in the same format."""
    return [Column(key, header, fmt), Column(f"paper_{key}", paper_header, fmt)]
