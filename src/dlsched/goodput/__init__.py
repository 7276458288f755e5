"""Time to train, not time per iteration: goodput under failures, checkpoints and stragglers,
with energy and cost (issue 51).

Modules, one job each: ``failures`` (Daly's closed form, Young's and Daly's intervals),
``montecarlo`` (the same process simulated, seeded), ``checkpoints`` (size, save, load from a
plan's memory parts), ``stragglers`` (slowest of N, p50/p95 iteration), ``energy`` (MWh, cost),
``time_to_train`` (a plan row's columns), ``objective`` (plans re-ranked by time to train,
energy or cost), ``runs`` (published whole runs priced, with errors), ``counts`` ("15.6T").
"""

from dlsched.goodput.time_to_train import Settings, time_to_train

__all__ = ["Settings", "time_to_train"]
