"""Design-space sweeps: grid files, executors (process pool, Dask, Ray), a resumable SQLite
results store, summaries and plots.

The names below load their modules on first use, so a command that only runs scenarios (the
reproductions: ``sweep.runner``, ``sweep.store``) does not import every domain's scenario
schema (``sweep.grid`` -> ``sweep.domains``).
"""

from __future__ import annotations

import importlib
from typing import Any

_SOURCES = {
    "DOMAINS": "dlsched.sweep.domains",
    "Domain": "dlsched.sweep.domains",
    "get_domain": "dlsched.sweep.domains",
    "EXECUTORS": "dlsched.sweep.executors",
    "WorkerPool": "dlsched.sweep.executors",
    "open_executor": "dlsched.sweep.executors",
    "Grid": "dlsched.sweep.grid",
    "GridSpec": "dlsched.sweep.grid",
    "grid_from_data": "dlsched.sweep.grid",
    "load_grid": "dlsched.sweep.grid",
    "SweepIncomplete": "dlsched.sweep.runner",
    "SweepJob": "dlsched.sweep.runner",
    "iter_sweep": "dlsched.sweep.runner",
    "run_sweep": "dlsched.sweep.runner",
    "ResultStore": "dlsched.sweep.store",
    "read_meta": "dlsched.sweep.store",
    "read_rows": "dlsched.sweep.store",
    "scenario_key": "dlsched.sweep.store",
}

__all__ = sorted(_SOURCES)


def __getattr__(name: str) -> Any:
    """Load a public name's module on first use (PEP 562)."""
    if name not in _SOURCES:
        raise AttributeError(f"module 'dlsched.sweep' has no attribute {name!r}")
    value = getattr(importlib.import_module(_SOURCES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_SOURCES])
