"""Planners by name, one signature ``(problem) -> PipelinePlan``, and ``run_planner``, which
scores a planner's plan: simulated time, peak memory, bubble, bounds."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from dlsched.errors import ConfigError
from dlsched.pipeline.chains.problem import PipelineProblem
from dlsched.pipeline.planners.baselines import (
    plan_1f1b,
    plan_dapple,
    plan_dualpipe,
    plan_dualpipev,
    plan_gpipe,
    plan_interleaved,
    plan_pipedream,
    plan_zb_h1,
    plan_zb_h2,
    plan_zb_v,
)
from dlsched.pipeline.planners.collection import fewer_collections
from dlsched.pipeline.planners.planner import plan_dlsched
from dlsched.pipeline.plans.plan import PipelinePlan
from dlsched.pipeline.plans.runtimes import runtime_for
from dlsched.pipeline.simulation.bounds import instance_bound, plan_bound
from dlsched.pipeline.simulation.simulate import SimResult, simulate

Planner = Callable[[PipelineProblem], PipelinePlan]

BASELINES: dict[str, Planner] = {
    "gpipe": plan_gpipe,
    "1f1b": plan_1f1b,
    "pipedream": plan_pipedream,
    "dapple": plan_dapple,
    "interleaved": plan_interleaved,
    "zb-h1": plan_zb_h1,
    "zb-h2": plan_zb_h2,
    "zb-v": plan_zb_v,
    "dualpipe": plan_dualpipe,
    "dualpipev": plan_dualpipev,
}


def _dlsched(problem: PipelineProblem) -> PipelinePlan:
    return plan_dlsched(problem, BASELINES)


_dlsched.__doc__ = plan_dlsched.__doc__
PLANNERS: dict[str, Planner] = {"dlsched": _dlsched, **BASELINES}
DEFAULT_PLANNER = "dlsched"


def get_planner(name: str) -> Planner:
    """The planner called ``name``; ConfigError listing the names otherwise."""
    if name not in PLANNERS:
        raise ConfigError(f"planner: unknown {name!r}; accepted: " + ", ".join(PLANNERS))
    return PLANNERS[name]


@dataclass(frozen=True, eq=False)
class PipelineResult:
    """A scored plan: ``sim`` (timeline, memory), ``bound_s`` for this partition and mapping,
    ``instance_bound_s`` for any plan, ``planning_s`` wall seconds spent planning."""

    problem: PipelineProblem
    sim: SimResult
    bound_s: float
    instance_bound_s: float
    planning_s: float

    @property
    def plan(self) -> PipelinePlan:
        """The plan that was simulated."""
        return self.sim.plan

    def row(self) -> dict:
        """Flat summary (seconds, bytes, fractions)."""
        plan, sim = self.plan, self.sim
        return {"model": self.problem.chain.name, "devices": self.problem.graph.name,
                "planner": plan.planner, "microbatches": plan.num_microbatches,
                "stages": plan.num_stages,
                "gpus_used": sum(1 for order in plan.orders if order) * plan.tensor_parallel,
                **configuration(plan),
                "iteration_s": float(sim.iteration_s), "bound_s": float(self.bound_s),
                "instance_bound_s": float(self.instance_bound_s),
                "time_over_bound": float(sim.iteration_s / self.bound_s),
                "bubble": float(sim.bubble_fraction),
                "peak_memory_bytes": int(max(sim.peak_memory)),
                "planning_s": float(self.planning_s)}


def configuration(plan: PipelinePlan) -> dict:
    """The configuration a plan runs: schedule, pipeline degree (stages per replica
    pipeline), data-parallel degree (replicas per stage; a list when they differ or when
    some stage splits its microbatches across its replicas, marked ``s``: ``4s/2s/1``),
    tensor-parallel degree, recomputation, and ``skipped``: the configurations of its
    planner's search that could not run and why ('' when none), and ``runtime``: the
    existing runtime(s) that can execute it ('none': no runtime we know of,
    ``pipeline.runtimes``)."""
    notes = plan.notes
    replicas = sorted({len(stage.devices) for stage in plan.stages})
    chunks = int(notes.get("chunks", 1))
    split = any(stage.split for stage in plan.stages)
    copies = int(notes.get("copies", 1))  # DualPipe's two directions: 2 copies of a stage
    return {"schedule": notes.get("schedule", plan.planner),
            "pp": plan.num_stages // chunks, "chunks": chunks,
            "dp": replicas[0] // copies if len(replicas) == 1 and not split else
            "/".join(f"{len(stage.devices)}{'s' if stage.split else ''}"
                     for stage in plan.stages),
            "tp": plan.tensor_parallel, "recompute": plan.recompute,
            "warm_up": notes.get("warm-up", ""), "mapping": notes.get("mapping", ""),
            "skipped": notes.get("skipped", ""), "runtime": runtime_for(plan) or "none"}


def run_planner(problem: PipelineProblem, name: str,
                planner: Planner | None = None) -> PipelineResult:
    """Plan with ``name`` (or with ``planner`` when given), simulate the plan and bound it
    (full garbage collections put off meanwhile: ``collection.fewer_collections``)."""
    planner = planner or get_planner(name)
    with fewer_collections():
        start = time.perf_counter()
        plan = planner(problem)
        elapsed = time.perf_counter() - start
        sim = simulate(problem, plan)
    return PipelineResult(problem, sim, plan_bound(problem, plan), instance_bound(problem),
                          elapsed)
