"""Gradient block scheduling for data-parallel training (US-Byte and its baselines)."""

from dlsched.dataparallel.bounds import lower_bound
from dlsched.dataparallel.comm import (
    PRESETS,
    AlphaBeta,
    TopologyPriced,
    ring_allreduce,
)
from dlsched.dataparallel.netfile import FIT_MODELS
from dlsched.dataparallel.network_spec import (
    assumed_latency_note,
    network_for_workers,
    parse_network,
)
from dlsched.dataparallel.plan import Block, DPPlan, Message, PlanError, validate_plan
from dlsched.dataparallel.policies import POLICIES
from dlsched.dataparallel.problem import DPProblem, problem_from_model
from dlsched.dataparallel.run import DPResult, run_dataparallel, simulate_plan

__all__ = [
    "FIT_MODELS",
    "POLICIES",
    "PRESETS",
    "AlphaBeta",
    "Block",
    "DPPlan",
    "DPProblem",
    "DPResult",
    "Message",
    "PlanError",
    "TopologyPriced",
    "assumed_latency_note",
    "lower_bound",
    "network_for_workers",
    "parse_network",
    "problem_from_model",
    "ring_allreduce",
    "run_dataparallel",
    "simulate_plan",
    "validate_plan",
]
