"""Design-space sweeps: grid files, executors (process pool, Dask, Ray), a resumable SQLite
results store, the dry run's estimate, the one runner of the reproductions, summaries and
plots.

The names below load their modules on first use, so a command that only runs scenarios (the
reproductions: ``sweep.runner``, ``sweep.store``) does not import every domain's scenario
schema (``sweep.grid`` -> ``sweep.domains``).
"""

from __future__ import annotations

from dlsched.lazy_exports import lazy_exports

_SOURCES = {
    **dict.fromkeys(("DOMAINS", "Domain", "get_domain"), "dlsched.sweep.domains"),
    **dict.fromkeys(("TIMING_BUDGET_S", "DryRun", "dry_run"), "dlsched.sweep.estimate"),
    **dict.fromkeys(("EXECUTORS", "WorkerPool", "check_executor", "default_workers",
                     "open_executor"), "dlsched.sweep.executors"),
    **dict.fromkeys(("Grid", "GridSpec", "grid_from_data", "load_grid"), "dlsched.sweep.grid"),
    **dict.fromkeys(("plot_heatmaps", "plot_lines"), "dlsched.sweep.plots"),
    **dict.fromkeys(("collect_rows", "paper_job", "reproduced"), "dlsched.sweep.reproduce"),
    **dict.fromkeys(("PendingTasks", "SweepIncomplete", "SweepJob", "iter_sweep", "run_sweep",
                     "time_scenarios"), "dlsched.sweep.runner"),
    **dict.fromkeys(("ResultStore", "read_meta", "read_rows", "scenario_key"),
                    "dlsched.sweep.store"),
    **dict.fromkeys(("best_per_group", "collect_cases", "speedup_pivot"),
                    "dlsched.sweep.summary"),
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _SOURCES)
