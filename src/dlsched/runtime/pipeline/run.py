"""Run a dlsched pipeline plan with ``torch.distributed.pipelining`` and measure it.

``run_pipeline`` checks the model against the plan (block names, parameter and activation
bytes) before any process starts, exports the plan to torch's per-rank action table
(``pipeline.torch_export``), then spawns one CPU gloo process per rank (FileStore, bounded time:
``runtime.spawn``) once torch's own checks of the table passed here (``check_torch_schedule``).
Each rank builds the model from the same seed, keeps its stages' blocks as
``PipelineStage``s, loads the table with ``_PipelineScheduleRuntime._load_csv`` (torch adds the
sends and receives) and runs ``warmup + iterations`` steps with SGD. Every compute action's
start and end (``time.perf_counter``, one monotonic clock for every process on the machine)
becomes a Span on the rank's GPU name, so the measured Timeline has the simulator's resources
and kinds. An iteration is measured from the barrier before it to the last action's end.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import (
    _Action,
    _add_send_recv,
    _PipelineScheduleRuntime,
    _validate_schedule,
)

from dlsched.errors import ConfigError
from dlsched.pipeline.plans.plan import PipelinePlan
from dlsched.pipeline.plans.plan_file import SavedPlan
from dlsched.pipeline.plans.torch_export import TorchSchedule, to_torch
from dlsched.pipeline.simulation.sim_result import KIND_NAMES
from dlsched.runtime.host_memory import keep_freed_memory
from dlsched.runtime.pipeline.model import PipelineModel, load_model
from dlsched.runtime.spawn import SpawnOptions, spawn
from dlsched.sim import Span, Timeline


@dataclass(frozen=True)
class RunJob:
    """What every rank needs (picklable): model spec and seed, samples per microbatch, the
    torch schedules to run one after the other (same number of ranks), GPU names by plan index,
    iterations, SGD learning rate, and whether to return the first measured step's gradients."""

    model: str
    seed: int
    microbatch_size: int
    schedules: tuple[TorchSchedule, ...]
    device_names: tuple[str, ...]
    iterations: int
    warmup: int = 1
    learning_rate: float = 0.01
    keep_gradients: bool = False


@dataclass(frozen=True, eq=False)
class PipelineRun:
    """Measured run: ``timeline`` of every measured iteration (seconds from the first's start),
    ``iteration_s`` per iteration, mean ``losses`` per iteration, and (when asked) the
    ``gradients`` after the first measured step, keyed ``<block>.<parameter>``."""

    timeline: Timeline
    iteration_s: tuple[float, ...]
    losses: tuple[float, ...]
    gradients: dict[str, Tensor] | None

    @property
    def median_iteration_s(self) -> float:
        """Median measured iteration time (seconds)."""
        return statistics.median(self.iteration_s)

    @classmethod
    def pooled(cls, runs: list[PipelineRun]) -> PipelineRun:
        """One run of the measured iterations of several runs of the same plan (e.g. rounds
        interleaved with other plans): their spans (iterations numbered on across the runs),
        iteration times and losses in order; no gradients."""
        if not runs:
            raise ConfigError("runs: need at least one run to pool")
        spans, offset = [], 0
        for run in runs:
            spans += [replace(span, args={**span.args,
                                          "iteration": span.args["iteration"] + offset})
                      for span in run.timeline.spans]
            offset += len(run.iteration_s)
        return cls(Timeline(spans),
                   tuple(t for run in runs for t in run.iteration_s),
                   tuple(loss for run in runs for loss in run.losses), None)

    def iteration_timeline(self, index: int) -> Timeline:
        """The spans of measured iteration ``index``, shifted to start at 0."""
        spans = [s for s in self.timeline.spans if s.args.get("iteration") == index]
        origin = min(s.args["iteration_start"] for s in spans)
        return Timeline(Span(s.resource, s.start - origin, s.end - origin, s.kind, s.label,
                             s.num_bytes, s.group, s.args) for s in spans)


def block_bytes(model: PipelineModel, microbatch_size: int) -> tuple[list[int], list[int]]:
    """(output bytes per microbatch of ``microbatch_size`` samples, parameter bytes) per block."""
    inputs, _ = model.make_batch(microbatch_size, 0)
    activations, params, x = [], [], inputs
    with torch.no_grad():
        for block in model.blocks.children():
            x = block(x)
            activations.append(x.numel() * x.element_size())
            params.append(sum(p.numel() * p.element_size() for p in block.parameters()))
    return activations, params


def check_model(saved: SavedPlan, model: PipelineModel) -> None:
    """Refuse (ConfigError) a model whose blocks do not match the plan's: count and names,
    parameter bytes, and output bytes of one microbatch of ``saved.microbatch_size`` samples."""
    names = model.block_names
    if names != saved.block_names:
        raise ConfigError(
            f"model: {model.name} has {len(names)} blocks ({', '.join(names)}) but the plan "
            f"({saved.plan.planner}, for {saved.model}) cuts {saved.num_blocks} blocks "
            f"({', '.join(saved.block_names)}); plan from this model's profile "
            "(dlsched pipeline profile)")
    activations, params = block_bytes(model, saved.microbatch_size)
    for k, name in enumerate(names):
        if params[k] != saved.param_bytes[k]:
            raise ConfigError(f"model: block {name} has {params[k]} parameter bytes, the plan "
                              f"expects {saved.param_bytes[k]:.0f}")
        if activations[k] != saved.activation_bytes[k]:
            raise ConfigError(
                f"model: block {name} outputs {activations[k]} bytes per microbatch of "
                f"{saved.microbatch_size} samples, the plan expects "
                f"{saved.activation_bytes[k]:.0f} (was it planned with another "
                "--microbatch-size than the profile?)")


def check_torch_schedule(schedule: TorchSchedule, source: str = "schedule") -> None:
    """Refuse (ConfigError naming ``source``) a schedule torch.distributed.pipelining would
    reject on its ranks: torch's own validation and its pass that inserts the sends and
    receives run here first, as every rank runs them when it loads the table."""
    actions = {rank: [_Action.from_str(str(action)) for action in row]
               for rank, row in enumerate(schedule.rows)}
    stages = len(schedule.stage_blocks)
    try:
        to_rank = _validate_schedule(actions, schedule.world_size, stages,
                                     schedule.num_microbatches)
        _add_send_recv({rank: list(row) for rank, row in actions.items()},
                       stage_to_rank=to_rank.__getitem__, num_stages=stages)
    except (AssertionError, ValueError, RuntimeError, KeyError) as error:
        lines = str(error).strip().splitlines() or [type(error).__name__]
        raise ConfigError(f"{source}: torch.distributed.pipelining refuses the "
                          f"{schedule.planner} schedule: {lines[0]}") from None


def saved_for_model(plan: PipelinePlan, model: PipelineModel, microbatch_size: int,
                    device_names: tuple[str, ...], predicted_s: float = 0.0) -> SavedPlan:
    """A SavedPlan of a hand-made ``plan`` for ``model`` (blocks and bytes from the model)."""
    activations, params = block_bytes(model, microbatch_size)
    return SavedPlan(plan, model.name, "cpu", device_names, microbatch_size, model.block_names,
                     tuple(map(float, activations)), tuple(map(float, params)), predicted_s)


def stage_module(model: PipelineModel, first: int, last: int) -> nn.Sequential:
    """Blocks ``first..last-1`` as one module, keeping their names (and parameter names)."""
    named = list(model.blocks.named_children())[first:last]
    return nn.Sequential(OrderedDict(named))


def reference_gradients(model: PipelineModel, inputs: Tensor, targets: Tensor) -> dict[str, Tensor]:
    """Gradients of the whole batch's loss without pipelining (``<block>.<parameter>`` keys)."""
    model.blocks.zero_grad(set_to_none=True)
    model.loss_fn(model.blocks(inputs), targets).backward()
    return {name: p.grad.clone() for name, p in model.blocks.named_parameters()}


def run_pipeline(saved: SavedPlan, model: str, iterations: int, warmup: int = 1,
                 seed: int = 0, learning_rate: float = 0.01, keep_gradients: bool = False,
                 schedule: TorchSchedule | None = None,
                 options: SpawnOptions | None = None) -> PipelineRun:
    """Run ``saved`` (or the given torch ``schedule`` of its partition) on one gloo process per
    rank for ``warmup + iterations`` steps; the model is checked first (see ``check_model``)."""
    return run_pipelines([saved], model, iterations, warmup, seed, learning_rate,
                         keep_gradients, [schedule] if schedule else None, options)[0]


def run_pipelines(saved: list[SavedPlan], model: str, iterations: int, warmup: int = 1,
                  seed: int = 0, learning_rate: float = 0.01, keep_gradients: bool = False,
                  schedules: list[TorchSchedule] | None = None,
                  options: SpawnOptions | None = None) -> list[PipelineRun]:
    """Run several plans of one model on the same ranks, one after the other (each from the
    same initial weights), sharing one process start; every plan must use as many ranks and
    the same microbatch size."""
    if not 1 <= iterations <= 10_000 or not 0 <= warmup <= 100:
        raise ConfigError(f"iterations: {iterations} must be in 1..10000 and warmup: {warmup} "
                          "in 0..100")
    if not saved:
        raise ConfigError("plans: need at least one plan to run")
    built = load_model(model, seed)
    for plan in saved:
        check_model(plan, built)
    torch_schedules = tuple(schedules or [to_torch(plan.plan) for plan in saved])
    for schedule in torch_schedules:
        check_torch_schedule(schedule)
    sizes = {(s.world_size, plan.microbatch_size, plan.device_names)
             for s, plan in zip(torch_schedules, saved, strict=True)}
    if len(sizes) != 1:
        raise ConfigError("plans: plans run together need the same number of ranks, "
                          f"microbatch size and devices; got {sorted(sizes)}")
    job = RunJob(model, seed, saved[0].microbatch_size, torch_schedules,
                 saved[0].device_names, iterations, warmup, learning_rate, keep_gradients)
    results = spawn(_rank_main, torch_schedules[0].world_size, (job,),
                    options or SpawnOptions())
    return [_collect([r[index] for r in results], job, schedule)
            for index, schedule in enumerate(torch_schedules)]


class _TimedStage(PipelineStage):
    """A PipelineStage that stamps each compute action: (stage, kind, microbatch, start, end)."""

    def __init__(self, *args: object, stamps: list, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.stamps = stamps

    def _stamp(self, kind: str, microbatch: int, start: float) -> None:
        self.stamps.append((self.stage_index, kind, microbatch, start, time.perf_counter()))

    def forward_one_chunk(self, fwd_chunk_id: int, *args: object, **kwargs: object) -> object:
        start = time.perf_counter()
        output = super().forward_one_chunk(fwd_chunk_id, *args, **kwargs)
        self._stamp("F", fwd_chunk_id, start)
        return output

    def backward_one_chunk(self, bwd_chunk_id: int, loss: object = None,
                           full_backward: bool = True, last_backward: bool = False) -> None:
        start = time.perf_counter()
        super().backward_one_chunk(bwd_chunk_id, loss, full_backward, last_backward)
        self._stamp("B" if full_backward else "I", bwd_chunk_id, start)

    def backward_weight_one_chunk(self, bwd_chunk_id: int, last_backward: bool = False) -> None:
        start = time.perf_counter()
        super().backward_weight_one_chunk(bwd_chunk_id, last_backward)
        self._stamp("W", bwd_chunk_id, start)


def _rank_main(rank: int, world_size: int, job: RunJob) -> list[dict]:
    """One rank: run every schedule of the job in turn; per schedule its stamped steps."""
    return [run_schedule(rank, job, schedule) for schedule in job.schedules]


def run_schedule(rank: int, job: RunJob, schedule: TorchSchedule) -> dict:
    """Build this rank's stages, load the table, run and stamp every step (freed host memory
    kept in the process, see ``host_memory``)."""
    keep_freed_memory()
    model = load_model(job.model, job.seed)
    stamps: list = []
    stages = [_TimedStage(stage_module(model, *schedule.stage_blocks[s]), s,
                          len(schedule.stage_blocks), torch.device("cpu"), stamps=stamps)
              for s in schedule.stages_of(rank)]
    runtime = _PipelineScheduleRuntime(stages, schedule.num_microbatches, loss_fn=model.loss_fn,
                                       scale_grads=True)
    with tempfile.TemporaryDirectory() as folder:
        table = Path(folder) / "schedule.csv"
        table.write_text(schedule.csv_text())
        runtime._load_csv(str(table))
    params = [p for stage in stages for p in stage.submod.parameters()]
    optimizer = torch.optim.SGD(params, lr=job.learning_rate)
    first = any(stage.is_first for stage in stages)
    last = any(stage.is_last for stage in stages)
    steps, gradients = [], None
    for step in range(job.warmup + job.iterations):
        inputs, targets = model.make_batch(schedule.num_microbatches * job.microbatch_size,
                                           job.seed + step)
        optimizer.zero_grad(set_to_none=True)
        losses: list[Tensor] = []
        dist.barrier()
        del stamps[:]
        start = time.perf_counter()
        runtime.step(*((inputs,) if first else ()), target=targets if last else None,
                     losses=losses if last else None, return_outputs=False)
        end = time.perf_counter()
        if step >= job.warmup:
            loss = float(torch.stack(losses).mean()) if losses else None
            steps.append({"start": start, "end": end, "stamps": list(stamps), "loss": loss})
            if job.keep_gradients and step == job.warmup:
                gradients = {name: p.grad.clone() for stage in stages
                             for name, p in stage.submod.named_parameters()}
        optimizer.step()
    dist.barrier()
    return {"rank": rank, "steps": steps, "gradients": gradients}


def _collect(results: list[dict], job: RunJob, schedule: TorchSchedule) -> PipelineRun:
    names = [job.device_names[d] for d in schedule.rank_devices]
    origin = min(r["steps"][0]["start"] for r in results)
    spans, iteration_s, losses = [], [], []
    for k in range(job.iterations):
        start = min(r["steps"][k]["start"] for r in results)
        end = max([r["steps"][k]["end"] for r in results]
                  + [s[4] for r in results for s in r["steps"][k]["stamps"]])
        iteration_s.append(end - start)
        losses += [r["steps"][k]["loss"] for r in results if r["steps"][k]["loss"] is not None]
        for result in results:
            name = names[result["rank"]]
            for stage, kind, microbatch, a, b in result["steps"][k]["stamps"]:
                spans.append(Span(name, a - origin, b - origin, KIND_NAMES[kind],
                                  f"{stage}{kind}{microbatch}", group=name,
                                  args={"stage": stage, "microbatch": microbatch,
                                        "iteration": k, "iteration_start": start - origin}))
    gradients = None
    if job.keep_gradients:
        gradients = {k: v for r in results for k, v in (r["gradients"] or {}).items()}
    spans.sort(key=lambda s: (s.start, s.resource))
    return PipelineRun(Timeline(spans), tuple(iteration_s), tuple(losses), gradients)
