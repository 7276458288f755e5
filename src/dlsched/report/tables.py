"""Tables for the terminal (rich) and for files (CSV, JSON).

A table is a list of rows (dicts with the same keys) plus column specs that say how each value
is shown and in which unit, so every printed table names its units in the header.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table


@dataclass(frozen=True)
class Column:
    """How one row key is shown: header text (with its unit) and a formatter."""

    key: str
    header: str
    fmt: Callable[[Any], str] = str
    justify: str = "right"


def as_ratio(value: float) -> str:
    """Format a ratio such as a speedup, e.g. 1.72x."""
    return f"{value:.2f}x"


def in_ms(decimals: int) -> Callable[[float], str]:
    """A formatter of seconds as milliseconds with ``decimals`` decimals."""
    return lambda value: f"{value * 1e3:.{decimals}f}"


def in_us(decimals: int) -> Callable[[float], str]:
    """A formatter of seconds as microseconds with ``decimals`` decimals."""
    return lambda value: f"{value * 1e6:.{decimals}f}"


def in_percent(decimals: int, signed: bool = False) -> Callable[[float], str]:
    """A formatter of a fraction (0..1) as a percentage with ``decimals`` decimals; ``signed``
    writes the sign of a positive value too (an error: +3.1)."""
    sign = "+" if signed else ""
    return lambda value: f"{value * 100:{sign}.{decimals}f}"


def fixed(decimals: int) -> Callable[[float], str]:
    """A formatter of a plain number (in the header's unit) with ``decimals`` decimals."""
    return lambda value: f"{value:.{decimals}f}"


seconds_as_ms = in_ms(3)
"""Format seconds as milliseconds with 3 decimals."""
as_percent = in_percent(2)
"""Format a fraction (0..1) as a percentage with 2 decimals."""


def render_table(rows: Sequence[dict[str, Any]], columns: Sequence[Column], title: str = "",
                 console: Console | None = None) -> None:
    """Print rows as a rich table with the given columns."""
    table = Table(title=title or None)
    for column in columns:
        table.add_column(column.header, justify=column.justify)  # type: ignore[arg-type]
    for row in rows:
        table.add_row(*[column.fmt(row[column.key]) if row.get(column.key) is not None else "-"
                        for column in columns])
    (console or Console()).print(table)


def rows_to_csv(rows: Sequence[dict[str, Any]]) -> str:
    """CSV text with a header row taken from the keys of the first row (SI units, raw values)."""
    if not rows:
        return ""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0].keys()), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def to_json(payload: Any) -> str:
    """Pretty, valid JSON for results (floats kept at full precision; a NaN or infinite
    float, which JSON cannot hold, becomes null)."""
    return json.dumps(_finite_or_null(payload), indent=2, sort_keys=False, allow_nan=False)


def _finite_or_null(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite_or_null(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_or_null(item) for item in value]
    return value
