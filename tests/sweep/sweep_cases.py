"""Small grids shared by the sweep tests (cheap collectives: a few ms each)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from dlsched.sweep import WorkerPool

SMALL_GRID: dict[str, Any] = {
    "name": "small",
    "domain": "collective",
    "axes": {"topology": ["2D-SW_SW", "3D-FC_Ring_SW"], "size": ["1 MB", "64 MB"],
             "policy": ["baseline", "themis"]},
    "zip": [{"chunks": [4, 8], "concurrency": [1, 2]}],
    "baseline": "baseline",
}

VOLATILE = ("wall_s", "finished_at")


def stable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows without the columns that depend on when and where they ran, sorted by key."""
    return sorted(({k: v for k, v in row.items() if k not in VOLATILE} for row in rows),
                  key=lambda row: row["key"])


@contextmanager
def thread_engine(workers: int = 1) -> Iterator[WorkerPool]:
    """An in-process engine (no process start-up) for tests of the runner's logic."""
    with ThreadPoolExecutor(workers) as pool:
        yield WorkerPool(pool, workers, "threads")
