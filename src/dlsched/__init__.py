"""dlsched: plan and simulate how distributed deep-learning training spends its time.

Units everywhere inside: seconds, bytes, bytes/s, FLOP and FLOP/s (see ``dlsched.units``).

The public names below load their modules on first use, so ``import dlsched`` (and
``dlsched --version``) stays fast; ``from dlsched import run_collective`` works as usual.
"""

from __future__ import annotations

from dlsched.lazy_exports import lazy_exports

__version__ = "0.1.0"

_SOURCES = {
    "CollectiveResult": "dlsched.collectives",
    "run_collective": "dlsched.collectives",
    "DPResult": "dlsched.dataparallel",
    "problem_from_model": "dlsched.dataparallel",
    "run_dataparallel": "dlsched.dataparallel",
    "ConfigError": "dlsched.errors",
    "Dimension": "dlsched.hardware",
    "DimKind": "dlsched.hardware",
    "Topology": "dlsched.hardware",
    "load_topology": "dlsched.hardware",
    "ComputeModel": "dlsched.models",
    "Model": "dlsched.models",
    "device_compute": "dlsched.models",
    "get_model": "dlsched.models",
    "PipelineResult": "dlsched.pipeline",
    "run_planner": "dlsched.pipeline",
    "plot_timeline": "dlsched.report",
    "write_chrome_trace": "dlsched.report",
    "Span": "dlsched.sim",
    "Timeline": "dlsched.sim",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _SOURCES)
