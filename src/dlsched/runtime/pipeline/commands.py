"""The torch runtime's pipeline entry points, one per step of a command: profile a model's
blocks into a chain file and calibrate CPU ranks into a device graph (``dlsched pipeline
profile``), run a saved plan on torch ranks beside its prediction (``dlsched run pipeline``).
Each takes its checked inputs and returns what the command prints or writes.

Imports torch (through the runtime modules it calls): its callers check that torch is
installed first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from dlsched.errors import ConfigError
from dlsched.pipeline import SavedPlan, TorchSchedule, to_plan, to_torch
from dlsched.runtime.execution import Execution
from dlsched.runtime.pipeline.calibrate import (
    RuntimeFit,
    calibrate_link,
    calibrate_runtime,
    cpu_devices_document,
)
from dlsched.runtime.pipeline.model import load_model
from dlsched.runtime.pipeline.profile import (
    BlockProfile,
    chain_document,
    microbatch_seconds,
    profile_blocks,
)
from dlsched.runtime.pipeline.run import PipelineRun, check_torch_schedule, run_pipeline
from dlsched.runtime.spawn import SpawnOptions, check_ranks
from dlsched.sim.timeline import Timeline


@dataclass(frozen=True)
class ProfiledChain:
    """A model's measured ``blocks`` (one microbatch) and the chain ``document`` written of
    them (``pipeline plan --model`` reads it)."""

    blocks: list[BlockProfile]
    document: dict[str, Any]

    def rows(self) -> list[dict[str, Any]]:
        """A row per block: its name, then its measured seconds and bytes."""
        return [{"block": p.name, **{k: v for k, v in vars(p).items() if k != "name"}}
                for p in self.blocks]


def profile_chain(model: str, microbatch_size: int, repeats: int, threads: int,
                  execution: Execution, calibration_ranks: int | None = None) -> ProfiledChain:
    """Measure forward, backward(-input/-weight) seconds and bytes of every block of
    ``model`` (built-in or ``package.module:function``) on one microbatch under ``execution``
    with ``threads`` torch threads, medians of ``repeats``. ``calibration_ranks``: the ranks a
    calibration will run on next (``calibrate_devices``), refused before profiling when the
    model has fewer blocks (each rank runs one stage of consecutive blocks)."""
    torch.set_num_threads(threads)
    execution.check_device()
    built = load_model(model)
    if calibration_ranks is not None and calibration_ranks > len(built.block_names):
        raise ConfigError(f"ranks: {calibration_ranks} must be at most the model's "
                          f"{len(built.block_names)} blocks (the calibration runs one stage of "
                          "consecutive blocks per rank)")
    blocks = profile_blocks(built, microbatch_size, repeats, execution=execution)
    return ProfiledChain(blocks, chain_document(model, blocks))


@dataclass(frozen=True)
class CalibratedDevices:
    """The rank-to-rank link measured (``latency_s``, ``bandwidth`` B/s), the runtime's
    ``fit`` on the ranks, and the device-graph ``document`` of them."""

    latency_s: float
    bandwidth: float
    fit: RuntimeFit
    document: dict[str, Any]


def calibrate_devices(model: str, microbatch_size: int, profiled: ProfiledChain, ranks: int,
                      memory: int) -> CalibratedDevices:
    """Calibrate CPU gloo ranks for plans of ``profiled``'s chain: the loopback link
    (``calibrate_link``), then the runtime's compute factor and overheads on ``ranks`` ranks
    (``calibrate_runtime``); a device graph of ``ranks`` devices of ``memory`` bytes each."""
    latency, bandwidth, _ = calibrate_link()
    fit = calibrate_runtime(model, microbatch_size, microbatch_seconds(profiled.blocks),
                            latency, bandwidth, ranks)
    return CalibratedDevices(latency, bandwidth, fit,
                             cpu_devices_document(ranks, latency, bandwidth, memory, fit=fit))


@dataclass(frozen=True)
class PlanRun:
    """A saved plan run on torch ranks: the measured ``run``, its ``ranks``, whether the run
    follows other orders than the plan's (``edited``: an edited exported table) or its ranks
    share fewer ``cores`` (``shared``), either of which leaves it without a prediction."""

    saved: SavedPlan
    run: PipelineRun
    ranks: int
    edited: bool
    shared: bool
    cores: int

    @property
    def predicted_s(self) -> float | None:
        """The plan file's predicted iteration (s), None when it does not apply."""
        return None if self.edited or self.shared else self.saved.predicted_iteration_s

    def rows(self) -> list[dict[str, Any]]:
        """The run's row: predicted against measured iteration seconds (median, min, max),
        the relative error (predicted / measured - 1) and the last loss."""
        measured, predicted = self.run.median_iteration_s, self.predicted_s
        return [{"planner": self.saved.plan.planner, "ranks": self.ranks,
                 "predicted_s": predicted, "measured_median_s": measured,
                 "measured_min_s": min(self.run.iteration_s),
                 "measured_max_s": max(self.run.iteration_s),
                 "error": None if predicted is None else predicted / measured - 1.0,
                 "final_loss": self.run.losses[-1] if self.run.losses else None}]

    def median_iteration(self) -> tuple[int, Timeline]:
        """The median measured iteration: its index and its spans from 0."""
        times = self.run.iteration_s
        index = sorted(range(len(times)), key=lambda k: times[k])[len(times) // 2]
        return index, self.run.iteration_timeline(index)


def check_plan_run(saved: SavedPlan, schedule: TorchSchedule | None, source: str) -> None:
    """Refuse, before any rank starts, a plan (or its exported table ``schedule``, read from
    ``source``) of more ranks than this machine allows, or one torch cannot run."""
    torch_schedule = schedule or to_torch(saved.plan)
    check_ranks(torch_schedule.world_size, "plan")
    check_torch_schedule(torch_schedule, source)


def run_plan(saved: SavedPlan, schedule: TorchSchedule | None, model: str, iterations: int,
             warmup: int, seed: int, options: SpawnOptions) -> PlanRun:
    """Train ``model`` with the saved plan (or the exported table ``schedule`` of its
    blocks) on one CPU gloo process per rank, ``iterations`` measured after ``warmup``."""
    from dlsched.runtime.spawn import usable_cores  # looked up at each call: tests stand in

    ranks = (schedule or to_torch(saved.plan)).world_size
    result = run_pipeline(saved, model, iterations, warmup, seed, schedule=schedule,
                          options=options)
    edited = schedule is not None and to_plan(schedule) != saved.plan
    cores = usable_cores()
    return PlanRun(saved, result, ranks, edited, ranks > cores, cores)
