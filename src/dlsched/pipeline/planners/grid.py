"""The PP x DP x TP configuration space that Megatron-style baselines search (each on its own).

A configuration is a tensor-parallel degree ``tp`` (every degree the problem allows,
``PipelineProblem.degrees``: TP groups of ``tp`` GPUs inside a server, Megatron's innermost
dimension; the grid below then runs on the ``N / tp`` groups as its "GPUs"), a pipeline degree
``pp`` dividing the GPU count, data-parallel degree ``dp = N / pp`` (every GPU used; a stage's
``dp`` GPUs are replicas that take its microbatches round-robin, i.e. ``m / dp`` microbatches
per replica pipeline), a rank mapping and a recomputation mode. GPUs are taken in index order
(the launcher's rank order): ``pp-outer`` gives stage ``s`` the consecutive GPUs ``s*dp ..
s*dp+dp-1`` (Megatron's default order: data parallelism inside a server, the pipeline across
servers), ``dp-outer`` gives it GPUs ``s, s+pp, s+2pp, ...``. Without replication
(``PipelineProblem.replicate`` False) the grid is ``dp = 1`` with every ``pp`` up to the GPU
count, on the first ``pp`` GPUs. Cuts are balanced (``balanced_stages``). ``best_plan``
simulates every candidate and keeps the fastest that fits memory: memory-aware baselines list,
for each configuration, variants in order of preference (e.g. 1F1B with its full warm-up, then
with the in-flight microbatches lowered to what memory holds) and the first variant that fits
is scored.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from dlsched.errors import ConfigError
from dlsched.pipeline.chains.problem import PipelineProblem
from dlsched.pipeline.planners.estimate import memory_slots
from dlsched.pipeline.planners.partition import balanced_stages
from dlsched.pipeline.planners.pruning import Candidate, evaluate
from dlsched.pipeline.plans.checks import check_plan
from dlsched.pipeline.plans.dualpipe import dual_devices
from dlsched.pipeline.plans.plan import PipelinePlan, PlanError, Stage
from dlsched.pipeline.plans.runtimes import runtime_for
from dlsched.pipeline.simulation.bounds import plan_bound
from dlsched.pipeline.simulation.simulate import SimResult, remember, simulate

MAPPINGS = ("pp-outer", "dp-outer")


@dataclass(frozen=True)
class GridPoint:
    """One configuration: pipeline, data-parallel and tensor-parallel degrees, mapping,
    recomputation, and the chunks (virtual stages) per GPU of interleaved schedules, looped
    (GPU ``k`` holds stages ``k, k + p, ...``) or, with ``v_shape``, two in a V (stages ``k``
    and ``2p - 1 - k``, ZB-V); with ``dual``, DualPipe's two directions (rank ``k`` holds
    stages ``k`` and ``p - 1 - k``, each stage on the ranks ``s`` and ``p - 1 - s``,
    ``plans.dualpipe.dual_devices``)."""

    pp: int
    dp: int
    mapping: str
    recompute: str
    chunks: int = 1
    tp: int = 1
    v_shape: bool = False
    dual: bool = False

    @property
    def ddp(self) -> bool:
        """Whether the configuration is pure data parallelism (PP 1, DP above 1), which runs
        as torch's DDP (and Megatron's data parallelism) do: gradients all-reduced in buckets
        overlapped with the last backward (``PipelinePlan.ddp_buckets``)."""
        return self.pp == 1 and self.dp > 1

    def notes(self, schedule: str) -> dict:
        """The configuration as plan notes (shown in the output)."""
        shape = {"shape": "V" if self.v_shape else "looped"} if self.chunks > 1 else {}
        if self.dual:
            shape = {"shape": "bidirectional", "copies": 2}
        sync = {"gradient sync": "DDP buckets overlapped with the backward"} if self.ddp else {}
        return {"schedule": schedule, "pp": self.pp, "dp": self.dp, "tp": self.tp,
                "recompute": self.recompute, "mapping": self.mapping,
                "chunks": self.chunks} | shape | sync

    def instance(self, problem: PipelineProblem) -> PipelineProblem:
        """The instance this configuration runs on (its TP degree and recomputation)."""
        return problem.tensor(self.tp).under(self.recompute)


def stage_groups(pp: int, dp: int, mapping: str) -> list[tuple[int, ...]]:
    """The GPUs of each of the ``pp`` stages, on GPUs ``0 .. pp*dp-1`` (see the module
    docstring)."""
    if mapping == "pp-outer":
        return [tuple(range(s * dp, (s + 1) * dp)) for s in range(pp)]
    return [tuple(range(s, pp * dp, pp)) for s in range(pp)]


def grid_points(problem: PipelineProblem, chunks: tuple[int, ...] = (1,),
                v_shape: bool = False, dual: bool = False) -> Iterator[GridPoint]:
    """Every configuration of the grid for the given chunk counts (in a V: ``v_shape``;
    DualPipe's two directions, ``dual``: even pipeline degrees only, the DeepSeek-V3
    report's condition)."""
    blocks = problem.chain.num_blocks
    for tp in problem.degrees():
        n = problem.tensor(tp).graph.num_devices
        for mode in problem.recompute_modes:
            for v in chunks:
                for pp in (k for k in range(1, n + 1) if k * v <= blocks):
                    if (problem.replicate and n % pp) or (dual and pp % 2):
                        continue
                    dp = n // pp if problem.replicate else 1
                    for mapping in MAPPINGS if 1 < pp < pp * dp else MAPPINGS[:1]:
                        yield GridPoint(pp, dp, mapping, mode, v, tp, v_shape, dual)


def point_stages(problem: PipelineProblem, point: GridPoint) -> tuple[Stage, ...]:
    """Balanced stages of a configuration (``chunks`` x ``pp`` stages for interleaving)."""
    groups = stage_groups(point.pp, point.dp, point.mapping)
    placed = groups + groups[::-1] if point.v_shape else groups * point.chunks
    if point.dual:
        placed = list(dual_devices(tuple(groups)))
    return balanced_stages(point.instance(problem), placed)


def in_flight_caps(problem: PipelineProblem, stages: tuple[Stage, ...]) -> tuple[int, ...]:
    """Per stage, the microbatches its replicas can hold together within their memory."""
    return tuple(memory_slots(problem, stage) * stage.lanes for stage in stages)


Variants = Callable[[PipelineProblem, GridPoint, tuple[Stage, ...]], list[PipelinePlan]]


def best_plan(problem: PipelineProblem, name: str, points: Iterator[GridPoint],
              variants: Variants) -> PipelinePlan:
    """The fastest simulated plan over ``points``; per point, the first of its ``variants``
    that fits memory and runs. A point none of whose variants runs is counted, by reason, in
    the plan's ``skipped`` note (never skipped silently). ConfigError when no configuration
    fits. Whether a variant runs is checked without simulating it (``check_plan``); only the
    points that can be fastest are simulated (``pruning.evaluate``)."""
    skipped: Counter[str] = Counter()
    total = 0
    runnable: list[PipelinePlan] = []
    for point in points:
        total += 1
        sub = point.instance(problem)
        stages = point_stages(problem, point)
        if len(stages) != point.pp * point.chunks:
            skipped["fewer blocks than stages"] += 1
            continue
        reason = ""
        try:
            plans = variants(sub, point, stages)
        except ConfigError:
            skipped["the schedule's conditions unmet"] += 1
            continue
        for plan in plans:
            reason = _refusal(problem, plan)
            if not reason:
                runnable.append(plan)
                break
        if reason:
            skipped[reason] += 1
    best: SimResult | None = None
    for _, result in evaluate([Candidate(plan_bound(problem, plan), index,
                                         lambda deadline, plan=plan: simulate(
                                             problem, plan, deadline))
                               for index, plan in enumerate(runnable)]):
        if best is None or result.iteration_s < best.iteration_s * (1 - 1e-12):
            best = result
    if best is None:
        degrees = ", ".join(map(str, problem.degrees()))
        why = "fits the GPUs' memory" if "the schedule's conditions unmet" not in skipped \
            else "runs (" + ", ".join(f"{count} {reason}"
                                      for reason, count in skipped.most_common()) + ")"
        raise ConfigError(f"{name}: no configuration {why} (PP x DP x TP grid, "
                          f"TP {degrees}, recomputation {', '.join(problem.recompute_modes)})")
    remember(problem, best)
    if not skipped:
        return best.plan
    note = (f"{sum(skipped.values())} of {total} configurations skipped: "
            + ", ".join(f"{count} {reason}" for reason, count in skipped.most_common()))
    return replace(best.plan, notes=best.plan.notes | {"skipped": note})


def _refusal(problem: PipelineProblem, plan: PipelinePlan) -> str:
    """Why ``plan`` cannot be scored ('' when it runs): no runtime executes it (with
    ``runnable_only``), it is invalid or deadlocks, or it does not fit memory."""
    if problem.runnable_only and runtime_for(plan) is None:
        return "no runtime executes the layout"
    try:
        check_plan(problem, plan)
    except PlanError as error:
        return f"invalid plan ({str(error).splitlines()[0]})"
    except ConfigError:
        return "out of memory"
    return ""
