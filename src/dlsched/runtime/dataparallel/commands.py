"""The torch runtime's data-parallel entry points, one per command: profile a module
(``dlsched profile``), time all-reduces across spawned ranks and fit the network (``dlsched
calibrate``), train every policy and compare with the simulator (``dlsched run
dataparallel``). Each takes its checked inputs and returns what the command prints or writes.

The module imports no torch: its callers check that torch is installed first."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dlsched.models.profile_io import ModelProfile
from dlsched.runtime.dataparallel.calibrate import STREAM_LENGTH, loads_document, time_loads
from dlsched.runtime.dataparallel.calibration_memory import check_calibration_memory
from dlsched.runtime.dataparallel.train import (
    PolicyRun,
    TrainConfig,
    build_module,
    check_module,
    compare,
    make_batch,
    optimizer_factory,
    predict,
    problem_from_profile,
    train_rank,
)
from dlsched.runtime.execution import Execution
from dlsched.runtime.spawn import SpawnOptions
from dlsched.sim.timeline import Timeline


@dataclass(frozen=True)
class ProfiledModule:
    """A module's per-parameter ``profile`` and the parameter tensors that get no gradient
    from the loss (``skipped``: profiled with no backward)."""

    profile: ModelProfile
    skipped: list[str]

    @property
    def forward_s(self) -> float:
        """The forward pass, seconds."""
        return sum(layer.forward_time_s for layer in self.profile.layers)

    @property
    def backward_s(self) -> float:
        """The backward pass, seconds."""
        return sum(layer.backward_time_s for layer in self.profile.layers)

    @property
    def params(self) -> int:
        """Parameters profiled."""
        return sum(layer.params for layer in self.profile.layers)


def profile_module(config: TrainConfig, execution: Execution, warmup: int, repeats: int,
                   optimizer: str, threads: int) -> ProfiledModule:
    """Profile ``config``'s module on one batch under ``execution`` with ``threads`` torch CPU
    threads: medians of ``repeats`` iterations after ``warmup``, each forward with its
    ``optimizer``'s per-module step (``sgd``, ``adam``; ``none``: no step)."""
    import torch

    from dlsched.runtime.dataparallel.profile import profile, unused_parameters

    torch.set_num_threads(threads)
    built = build_module(config)
    model, batch = execution.prepare(built, make_batch(built, config))
    skipped = unused_parameters(model, batch, execution=execution)
    step = None if optimizer == "none" else optimizer_factory(optimizer, 0.0)
    result = profile(model, batch, warmup=warmup, repeats=repeats, optimizer=step,
                     name=config.model.rpartition(":")[2], execution=execution)
    return ProfiledModule(result, skipped)


def calibration_sizes(low: int, high: int, points: int) -> list[int]:
    """``points`` all-reduce sizes (bytes, multiples of 4: whole float32 buffers) geometric
    from ``low`` to ``high``, without repeats."""
    return sorted({round(low * (high / low) ** (k / (points - 1)) / 4) * 4
                   for k in range(points)})


def calibrate_network(sizes: Sequence[int], workers: int, repeats: int, load: str,
                      backend: str, model: str, comm_nice: int | None,
                      options: SpawnOptions) -> dict[str, Any]:
    """Time all-reduces of ``sizes`` bytes on ``workers`` spawned ranks (``repeats`` per size
    and measurement, beside ``load``) and fit them: the network document (``model``: the fit
    ``--network`` uses). ConfigError when the ranks' buffers do not fit memory, when torch
    is not installed, or when the measurements stay too noisy to fit."""
    # looked up at each call: tests stand in for spawn
    from dlsched.runtime.spawn import require_torch, spawn

    check_calibration_memory(sizes, workers, load, STREAM_LENGTH)
    require_torch()
    timed = spawn(time_loads, workers, (list(sizes), 2, repeats, load), options)[0]
    return loads_document(timed, workers, f"{backend}-{workers}ranks", backend, model,
                          comm_nice)


@dataclass(frozen=True)
class TrainedComparison:
    """Every policy trained on the ranks (``runs``, rank 0's), the ``rows`` of measured
    against predicted iteration seconds, and the ``config`` and rank count they ran with."""

    config: TrainConfig
    workers: int
    runs: list[PolicyRun]
    profile: ModelProfile
    rows: list[dict[str, Any]]

    def panels(self) -> list[tuple[str, Timeline]]:
        """Per policy the plan executor ran: its measured iteration (rank 0) and the
        simulator's prediction of it, on the profile pooled over the rounds."""
        problem = problem_from_profile(self.profile, self.config.network, self.workers)
        panels = []
        for run in self.runs:
            if run.plan is not None:
                panels.append((f"{run.policy}: measured (rank 0)", run.timeline))
                panels.append((f"{run.policy}: predicted", predict(run, problem).timeline))
        return panels


def train_policies(config: TrainConfig, workers: int, options: SpawnOptions
                   ) -> TrainedComparison:
    """Train ``config``'s policies on ``workers`` spawned ranks (``train_rank``) and compare
    each with the simulator's prediction of what it executed (``train.compare``); a module
    that cannot be built or fed its batch is refused before any rank starts."""
    from dlsched.runtime.spawn import spawn  # looked up at each call: tests stand in for it

    check_module(config)
    result = spawn(train_rank, workers, (config,), options)[0]
    return TrainedComparison(config, workers, result["runs"], result["profile"],
                             compare(result, config, workers))
