"""Synchronous pipeline planning: partition, device mapping and microbatch scheduling.

Plans are data (``PipelinePlan``: stages and per-GPU action orders such as ``2F0``); planners
are registered by name with one signature; the simulator turns a plan into the common Timeline.
"""

from dlsched.pipeline.chains.chain import Chain, chain_from_model, synthetic_chain
from dlsched.pipeline.chains.memory_model import MemoryModel
from dlsched.pipeline.chains.problem import PipelineProblem
from dlsched.pipeline.plans.actions import Action, format_orders, parse_orders
from dlsched.pipeline.plans.plan import PipelinePlan, PlanError, Stage, validate_plan
from dlsched.pipeline.plans.plan_file import SavedPlan, load_plan, save_plan, saved_from_result
from dlsched.pipeline.plans.torch_export import (
    TorchSchedule,
    mapping_path_for,
    read_torch_export,
    to_plan,
    to_torch,
    write_torch_export,
)
from dlsched.pipeline.registry import (
    BASELINES,
    DEFAULT_PLANNER,
    PLANNERS,
    PipelineResult,
    get_planner,
    run_planner,
)
from dlsched.pipeline.simulation.bounds import instance_bound, plan_bound
from dlsched.pipeline.simulation.network import NETWORK_MODES, check_network
from dlsched.pipeline.simulation.simulate import SimResult, simulate

__all__ = [
    "BASELINES",
    "DEFAULT_PLANNER",
    "NETWORK_MODES",
    "PLANNERS",
    "Action",
    "Chain",
    "MemoryModel",
    "PipelinePlan",
    "PipelineProblem",
    "PipelineResult",
    "PlanError",
    "SavedPlan",
    "SimResult",
    "Stage",
    "TorchSchedule",
    "chain_from_model",
    "check_network",
    "format_orders",
    "get_planner",
    "instance_bound",
    "load_plan",
    "mapping_path_for",
    "parse_orders",
    "plan_bound",
    "read_torch_export",
    "run_planner",
    "save_plan",
    "saved_from_result",
    "simulate",
    "synthetic_chain",
    "to_plan",
    "to_torch",
    "validate_plan",
    "write_torch_export",
]
