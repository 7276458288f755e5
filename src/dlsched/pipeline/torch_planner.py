"""The dlsched planner inside what ``torch.distributed.pipelining`` can run: one GPU per stage.

torch runs each pipeline stage on exactly one rank, so plans that replicate a stage
data-parallel (often dlsched's best plan for small models on fast links) cannot be exported.
This planner searches dlsched's space restricted to unreplicated stages: the partitions of
``propose_partitions`` that have one GPU per stage, plus a balanced one-stage-per-GPU cut on the
first ``k`` GPUs of dlsched's device order for every ``k``, each with every schedule of
``schedule_candidates`` (list scheduling with backward-first and critical-path priorities, full
or split backward, and the fixed 1F1B, GPipe and ZB-H1 orders); the baselines' unreplicated
plans are candidates too, so it is never slower than they are. The fastest simulated plan wins.
"""

from __future__ import annotations

from dlsched.errors import ConfigError
from dlsched.pipeline.ordering import device_order
from dlsched.pipeline.partition import balanced_stages
from dlsched.pipeline.plan import PipelinePlan, Stage
from dlsched.pipeline.planner import propose_partitions, schedule_candidates
from dlsched.pipeline.problem import PipelineProblem
from dlsched.pipeline.registry import BASELINES
from dlsched.pipeline.simulate import SimResult, simulate


def _unreplicated(stages: tuple[Stage, ...]) -> bool:
    return all(len(stage.devices) == 1 for stage in stages)


def _partitions(problem: PipelineProblem) -> list[tuple[Stage, ...]]:
    found = [stages for stages in propose_partitions(problem) if _unreplicated(stages)]
    order = device_order(problem.graph)
    for k in range(1, len(order) + 1):
        stages = balanced_stages(problem, order[:k])
        if stages not in found:
            found.append(stages)
    return found


def _baseline_results(problem: PipelineProblem) -> list[SimResult]:
    results = []
    for planner in BASELINES.values():
        try:
            plan = planner(problem)
            if _unreplicated(plan.stages):
                results.append(simulate(problem, plan))
        except ConfigError:
            continue
    return results


def plan_dlsched_for_torch(problem: PipelineProblem) -> PipelinePlan:
    """The fastest simulated plan with one GPU per stage (see the module docstring)."""
    candidates = [result for stages in _partitions(problem)
                  for result in schedule_candidates(problem, stages)]
    candidates += _baseline_results(problem)
    if not candidates:
        raise ConfigError("dlsched: no plan with one GPU per stage fits the GPUs' memory")
    best = min(candidates, key=lambda result: result.iteration_s)
    notes = dict(best.plan.notes) | {"origin": best.plan.planner,
                                     "restricted": "one GPU per stage (torch)"}
    return PipelinePlan("dlsched", best.plan.stages, best.plan.orders,
                        best.plan.num_microbatches, notes, best.plan.recompute)
