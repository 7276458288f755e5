"""Design-space sweeps: grid files, executors (process pool, Dask, Ray), a resumable SQLite
results store, summaries and plots."""

from dlsched.sweep.domains import DOMAINS, Domain, get_domain
from dlsched.sweep.executors import EXECUTORS, WorkerPool, open_executor
from dlsched.sweep.grid import Grid, GridSpec, grid_from_data, load_grid, scenario_key
from dlsched.sweep.runner import SweepIncomplete, SweepJob, iter_sweep, run_sweep
from dlsched.sweep.store import ResultStore, read_meta, read_rows

__all__ = [
    "DOMAINS",
    "EXECUTORS",
    "Domain",
    "Grid",
    "GridSpec",
    "ResultStore",
    "SweepIncomplete",
    "SweepJob",
    "WorkerPool",
    "get_domain",
    "grid_from_data",
    "iter_sweep",
    "load_grid",
    "open_executor",
    "read_meta",
    "read_rows",
    "run_sweep",
    "scenario_key",
]
