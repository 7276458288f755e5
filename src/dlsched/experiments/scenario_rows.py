"""Run a reproduction's scenarios and gather their table rows, in scenario order, in one
process or a process pool."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

Progress = Callable[[Iterable[Any], int], Iterable[Any]]


def scenario_rows(run_scenario: Callable[[Any], list[dict[str, Any]]], todo: Sequence[Any],
                  workers: int = 1, progress: Progress = lambda items, total: items,
                  chunksize: int = 1) -> list[dict[str, Any]]:
    """Every scenario's rows, in scenario order, in ``workers`` processes when > 1
    (``chunksize`` scenarios per task); ``progress(iterable, total)`` wraps the stream of
    finished scenarios."""
    rows: list[dict[str, Any]] = []
    if workers <= 1:
        for one in progress(map(run_scenario, todo), len(todo)):
            rows += one
        return rows
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for one in progress(pool.map(run_scenario, todo, chunksize=chunksize), len(todo)):
            rows += one
    return rows
