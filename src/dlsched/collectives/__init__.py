"""Chunked collectives over multi-dimensional networks: plans, policies, simulation, bounds."""

from dlsched.collectives.algorithms import Phase
from dlsched.collectives.bounds import ideal_time, latency_bound, order_mix_bound
from dlsched.collectives.plan import (
    ChunkRoute,
    CollectiveOp,
    CollectivePlan,
    IntraPolicy,
    PlanError,
    Stage,
    validate_plan,
)
from dlsched.collectives.policies import POLICIES
from dlsched.collectives.request import CollectiveRequest
from dlsched.collectives.run import (
    CollectiveResult,
    DimensionStats,
    make_request,
    run_collective,
    score_plan,
)

__all__ = [
    "POLICIES",
    "ChunkRoute",
    "CollectiveOp",
    "CollectivePlan",
    "CollectiveRequest",
    "CollectiveResult",
    "DimensionStats",
    "IntraPolicy",
    "Phase",
    "PlanError",
    "Stage",
    "ideal_time",
    "latency_bound",
    "make_request",
    "order_mix_bound",
    "run_collective",
    "score_plan",
    "validate_plan",
]
