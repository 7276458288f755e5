"""The pipeline domain's comparison (``dlsched pipeline plan``): one problem planned by several
planners, each row with its speedup over the first planner that found a plan (its time / this
planner's time) and its model FLOPs utilization; a planner that finds no plan is skipped, with
its reason, while another finds one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dlsched.errors import ConfigError
from dlsched.pipeline.chains.problem import PipelineProblem
from dlsched.pipeline.registry import PipelineResult, run_planner
from dlsched.pipeline.simulation.utilization import plan_mfu
from dlsched.progress import Progress, quiet


@dataclass(frozen=True)
class PipelineComparison:
    """Each planner's ``results`` by name (in the order asked, those that found a plan), why
    each other planner was ``skipped``, and the ``rows`` (seconds; ``peak_memory_gib``,
    ``speedup_vs_first``, ``mfu``)."""

    results: dict[str, PipelineResult]
    skipped: dict[str, str]
    rows: list[dict[str, Any]]


def compare(problem: PipelineProblem, planners: Sequence[str], progress: Progress = quiet
            ) -> PipelineComparison:
    """Plan ``problem`` with each of ``planners`` (names in ``PLANNERS``); the reference is the
    first planner that finds a plan. With a single planner, or when none finds a plan, the
    (first) planner's ConfigError stands."""
    results: dict[str, PipelineResult] = {}
    skipped: dict[str, str] = {}
    first: ConfigError | None = None
    for name in progress(planners, len(planners)):
        try:
            results[name] = run_planner(problem, name)
        except ConfigError as error:
            if len(planners) == 1:
                raise
            first = first or error
            skipped[name] = str(error)
    if not results and first is not None:
        raise first
    reference = next(iter(results.values())).sim.iteration_s
    rows = [r.row() | {"peak_memory_gib": r.row()["peak_memory_bytes"] / 2**30,
                       "speedup_vs_first": reference / r.sim.iteration_s,
                       "mfu": plan_mfu(r.problem, r.plan, r.sim.iteration_s)}
            for r in results.values()]
    return PipelineComparison(results, skipped, rows)
