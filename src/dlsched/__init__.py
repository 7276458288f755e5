"""dlsched: plan and simulate how distributed deep-learning training spends its time.

Units everywhere inside: seconds, bytes, bytes/s, FLOP and FLOP/s (see ``dlsched.units``).
"""

from dlsched.collectives import CollectiveResult, run_collective
from dlsched.errors import ConfigError
from dlsched.hardware import Dimension, DimKind, Topology, load_topology
from dlsched.report import plot_timeline, write_chrome_trace
from dlsched.sim import Span, Timeline

__version__ = "0.1.0"

__all__ = [
    "CollectiveResult",
    "ConfigError",
    "DimKind",
    "Dimension",
    "Span",
    "Timeline",
    "Topology",
    "load_topology",
    "plot_timeline",
    "run_collective",
    "write_chrome_trace",
]
