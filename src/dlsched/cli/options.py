"""Argument helpers shared by the CLI modules: output files and unit-bearing options."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from dlsched.errors import ConfigError
from dlsched.report import rows_to_csv, to_json, write_text

# Piped output (CI logs, files) gets a wide fixed width so tables are not squeezed.
console = Console(width=None if sys.stdout.isatty() else 140)


def parse_names(text: str, accepted: Iterable[str], field: str) -> list[str]:
    """Comma-separated names, each one of ``accepted``; ConfigError naming ``field`` otherwise."""
    choices = list(accepted)
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in choices]
    if unknown or not names:
        raise ConfigError(f"{field}: unknown {unknown or text!r}; accepted: "
                          + ", ".join(choices) + " (comma-separated for several)")
    return names


def suffixed(path: Path, suffix: str, many: bool) -> Path:
    """``path`` with ``-suffix`` before its extension when several results share one option."""
    return path.with_name(f"{path.stem}-{suffix}{path.suffix}") if many else path


def emit_rows(rows: Sequence[dict[str, Any]], json_out: bool, csv_path: Path | None,
              extra: dict[str, Any] | None = None) -> None:
    """Print ``{"rows": [...], **extra}`` as JSON when asked, and write CSV when a path is given."""
    if csv_path is not None:
        write_text(csv_path, rows_to_csv(rows))
        if not json_out:
            console.print(f"wrote {csv_path}")
    if json_out:
        print(to_json({"rows": list(rows), **(extra or {})}))
