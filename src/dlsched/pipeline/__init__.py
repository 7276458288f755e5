"""Synchronous pipeline planning: partition, device mapping and microbatch scheduling.

Plans are data (``PipelinePlan``: stages and per-GPU action orders such as ``2F0``); planners
are registered by name with one signature; the simulator turns a plan into the common Timeline.
"""

from dlsched.pipeline.actions import Action, format_orders, parse_orders
from dlsched.pipeline.bounds import instance_bound, plan_bound
from dlsched.pipeline.chain import Chain, chain_from_model, synthetic_chain
from dlsched.pipeline.plan import PipelinePlan, PlanError, Stage, validate_plan
from dlsched.pipeline.problem import PipelineProblem
from dlsched.pipeline.registry import (
    BASELINES,
    DEFAULT_PLANNER,
    PLANNERS,
    PipelineResult,
    get_planner,
    run_planner,
)
from dlsched.pipeline.simulate import SimResult, simulate

__all__ = [
    "BASELINES",
    "DEFAULT_PLANNER",
    "PLANNERS",
    "Action",
    "Chain",
    "PipelinePlan",
    "PipelineProblem",
    "PipelineResult",
    "PlanError",
    "SimResult",
    "Stage",
    "chain_from_model",
    "format_orders",
    "get_planner",
    "instance_bound",
    "parse_orders",
    "plan_bound",
    "run_planner",
    "simulate",
    "synthetic_chain",
    "validate_plan",
]
