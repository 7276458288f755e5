"""dlsched: plan and simulate how distributed deep-learning training spends its time.

Units everywhere inside: seconds, bytes, bytes/s, FLOP and FLOP/s (see ``dlsched.units``).
"""

from dlsched.collectives import CollectiveResult, run_collective
from dlsched.dataparallel import DPResult, problem_from_model, run_dataparallel
from dlsched.errors import ConfigError
from dlsched.hardware import Dimension, DimKind, Topology, load_topology
from dlsched.models import ComputeModel, Model, device_compute, get_model
from dlsched.pipeline import PipelineResult, run_planner
from dlsched.report import plot_timeline, write_chrome_trace
from dlsched.sim import Span, Timeline

__version__ = "0.1.0"

__all__ = [
    "CollectiveResult",
    "ComputeModel",
    "ConfigError",
    "DPResult",
    "DimKind",
    "Dimension",
    "Model",
    "PipelineResult",
    "Span",
    "Timeline",
    "Topology",
    "device_compute",
    "get_model",
    "load_topology",
    "plot_timeline",
    "problem_from_model",
    "run_collective",
    "run_dataparallel",
    "run_planner",
    "write_chrome_trace",
]
