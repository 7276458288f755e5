"""Argument helpers shared by the CLI modules: output files and unit-bearing options."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from dlsched.report import rows_to_csv, to_json, write_text

# Piped output (CI logs, files) gets a wide fixed width so tables are not squeezed.
console = Console(width=None if sys.stdout.isatty() else 140)


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
