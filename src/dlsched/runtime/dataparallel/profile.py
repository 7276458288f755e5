"""Profile a torch module into dlsched layers: one layer per parameter tensor, in
``named_parameters()`` order, with forward and backward seconds and gradient sizes.

Timing (warm-up iterations, then the median of ``repeats``; perf counters on the CPU, CUDA
events on a GPU) uses the points a data-parallel executor sees:

- backward: a post-accumulate-grad hook stamps when each parameter's gradient is ready (its
  last accumulation, for a parameter used twice such as a tied embedding);
  ready[l] (seconds after ``loss.backward()`` starts, made non-increasing in l as the
  simulator's chain assumes) gives ``backward[l] = ready[l] - ready[l+1]``;
- medians: per layer, scaled so that they sum to the median total of a pass
  (``scaled_medians``; on a shared core the plain medians would drop the time slices the
  thread waits for);
- forward: each module owning parameters starts when its forward pre-hook fires and lasts until
  the next owner starts (the last one until backward starts, so the loss is included). The
  whole time goes to the module's last parameter and 0 to the others, because the module can
  only start once all of its parameters are updated. With an optimizer, the owner's share of
  one optimizer step over all parameters (in proportion to its parameter count; the executor
  runs a barrier plan's update as that one call, right before the first forward) is added
  to it.

The loss is ``loss_fn(output)``, by default the mean of the squared output. ``execution``
(``runtime.execution``) sets the precision (autocast around the forward and the loss, TF32 on
a GPU) and what happens to parameters the loss never reaches (``unused``: skip profiles them
with no backward time and a gradient ready when the backward starts, as DDP's
``find_unused_parameters`` runs them; error refuses the module). The caller puts the module
and its input on the device (``Execution.prepare``); a CUDA module is timed with CUDA events.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from dlsched.errors import ConfigError
from dlsched.models.profile_io import LayerProfile, ModelProfile
from dlsched.report import write_text
from dlsched.runtime.execution import Execution
from dlsched.runtime.recorder import Clock

OptimizerFactory = Callable[[list[nn.Parameter]], torch.optim.Optimizer]


def default_loss(output: torch.Tensor) -> torch.Tensor:
    """Mean of the squared output (any output shape)."""
    return output.float().pow(2).mean()


def parameter_owners(module: nn.Module) -> list[tuple[nn.Module, list[int]]]:
    """Modules owning parameters directly, each with its parameters' layer indices (a tied
    parameter belongs to the first module holding it), in ``named_modules()`` order."""
    index = {id(p): i for i, (_, p) in enumerate(module.named_parameters())}
    owners, seen = [], set()
    for _, sub in module.named_modules():
        mine = [index[id(p)] for p in sub.parameters(recurse=False)
                if id(p) in index and id(p) not in seen]
        seen.update(id(p) for p in sub.parameters(recurse=False))
        if mine:
            owners.append((sub, mine))
    return owners


def owner_sizes(owners: list[tuple[nn.Module, list[int]]],
                parameters: list[nn.Parameter]) -> np.ndarray:
    """Parameters (elements) of each owning module: the weights one optimizer step's seconds
    are split by between the modules it updates (``parameters`` in ``named_parameters()``
    order, as the owners' layer indices are)."""
    return np.array([sum(parameters[i].numel() for i in layers) for _, layers in owners],
                    dtype=float)


def _stamper(stamps: dict[int, Any], key: int, clock: Clock,
             first: bool) -> Callable[..., None]:
    """A hook recording under ``key`` the first (or last) time it fires in a pass."""

    def hook(*_: Any) -> None:
        if not first or key not in stamps:
            stamps[key] = clock.stamp()

    return hook


def _one_pass(module: nn.Module, example_input: Any, loss_fn: Callable[..., torch.Tensor],
              clock: Clock, owners: list[tuple[nn.Module, list[int]]],
              starts: dict[int, Any], ready: dict[int, Any],
              execution: Execution) -> tuple[list[float], list[float]]:
    starts.clear()
    ready.clear()
    module.zero_grad(set_to_none=True)
    first = clock.stamp()
    with execution.autocast():
        loss = loss_fn(module(example_input))
    backward_start = clock.stamp()
    loss.backward()
    clock.seconds(clock.stamp())
    order = sorted(range(len(owners)), key=lambda o: clock.seconds(starts.get(o, first)))
    forward = [0.0] * len(owners)
    for position, owner in enumerate(order):
        end = (starts[order[position + 1]] if position + 1 < len(order) else backward_start)
        forward[owner] = clock.seconds(end) - clock.seconds(starts.get(owner, first))
    origin = clock.seconds(backward_start)
    num_layers = sum(len(layers) for _, layers in owners)
    missing = [layer for layer in range(num_layers) if layer not in ready]
    if missing and execution.unused == "error":
        name = list(module.named_parameters())[missing[0]][0]
        raise ConfigError(f"module: parameter {name} gets no gradient from the loss (--unused "
                          "error); --unused skip profiles it as DDP's find_unused_parameters "
                          "runs it")
    return forward, [clock.seconds(ready[layer]) - origin if layer in ready else 0.0
                     for layer in range(num_layers)]


def unused_parameters(module: nn.Module, example_input: Any,
                      loss_fn: Callable[..., torch.Tensor] = default_loss,
                      execution: Execution | None = None) -> list[str]:
    """Names of the parameters that get no gradient from ``loss_fn(module(example_input))``
    (one forward and backward; the gradients are cleared afterwards)."""
    execution = execution or Execution()
    module.zero_grad(set_to_none=True)
    with execution.running():
        with execution.autocast():
            loss = loss_fn(module(example_input))
        loss.backward()
    names = [name for name, p in module.named_parameters() if p.grad is None]
    module.zero_grad(set_to_none=True)
    return names


def _time_updates(owners: list[tuple[nn.Module, list[int]]], parameters: list[nn.Parameter],
                  optimizer: OptimizerFactory, clock: Clock, repeats: int) -> np.ndarray:
    """Per owner, seconds of its share of one optimizer step over every parameter (the
    median of ``repeats`` after one not timed), split in proportion to the owners' parameter
    counts: the executor updates a barrier plan's modules in one call."""
    step = optimizer(parameters)
    seconds = []
    for _ in range(repeats + 1):
        start = clock.stamp()
        step.step()
        seconds.append(clock.seconds(clock.stamp()) - clock.seconds(start))
    sizes = owner_sizes(owners, parameters)
    return float(np.median(seconds[1:])) * sizes / sizes.sum()


def scaled_medians(runs: np.ndarray) -> np.ndarray:
    """Per-column medians of ``runs`` (one row per repeat, seconds), scaled so that they sum
    to the median of the row sums. A thread sharing its core is descheduled for whole time
    slices at random points: a median per layer drops those gaps (most layers are not hit in
    most repeats), so the plain medians sum to the time on a core of its own; the scaling
    spreads the shared-core total over the layers in proportion to their medians."""
    medians = np.median(runs, axis=0)
    total = float(np.sum(medians))
    return medians * (float(np.median(runs.sum(axis=1))) / total) if total > 0 else medians


def layer_times(forward_runs: np.ndarray, ready_runs: np.ndarray,
                owners: list[tuple[nn.Module, list[int]]],
                updates: np.ndarray | float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Per-layer forward and backward seconds from repeated passes: ``forward_runs`` (one row
    per pass, one column per owning module, seconds), ``ready_runs`` (one row per pass: each
    layer's gradient-ready seconds after backward starts) and per-owner ``updates`` seconds
    added to the forwards. Ready times are made non-increasing in the layer, backward[l] =
    ready[l] - ready[l+1]; both use ``scaled_medians``; an owner's forward goes to its last
    parameter."""
    forward_owner = scaled_medians(forward_runs) + updates
    ready = np.maximum.accumulate(ready_runs[:, ::-1], axis=1)[:, ::-1]
    backward = scaled_medians(ready - np.append(ready[:, 1:], np.zeros((len(ready), 1)),
                                                axis=1))
    forward = np.zeros(ready_runs.shape[1])
    for (_, layers), seconds in zip(owners, forward_owner, strict=True):
        forward[max(layers)] += seconds
    return forward, backward


def profile(module: nn.Module, example_input: Any, *, loss_fn: Callable[..., torch.Tensor]
            = default_loss, warmup: int = 3, repeats: int = 10,
            optimizer: OptimizerFactory | None = None, name: str = "profiled",
            execution: Execution | None = None) -> ModelProfile:
    """Per-parameter forward/backward seconds (medians of ``repeats`` after ``warmup``) and
    parameter counts under ``execution`` (default: as built, unused parameters skipped); the
    module's parameters change only if ``optimizer`` is given (the timed optimizer steps are
    applied)."""
    execution = execution or Execution()
    if warmup < 0 or repeats < 1:
        raise ConfigError(f"repeats: need warmup >= 0 and repeats >= 1 (got {warmup}, "
                          f"{repeats})")
    named = list(module.named_parameters())
    if not named:
        raise ConfigError("module: has no parameters to profile")
    parameters = [p for _, p in named]
    clock = Clock(cuda=parameters[0].is_cuda)
    owners = parameter_owners(module)
    starts: dict[int, Any] = {}
    ready: dict[int, Any] = {}
    handles = [sub.register_forward_pre_hook(_stamper(starts, o, clock, first=True))
               for o, (sub, _) in enumerate(owners)]
    handles += [p.register_post_accumulate_grad_hook(_stamper(ready, i, clock, first=False))
                for i, p in enumerate(parameters)]
    try:
        with execution.running():
            runs = [_one_pass(module, example_input, loss_fn, clock, owners, starts, ready,
                              execution) for _ in range(warmup + repeats)][warmup:]
    finally:
        for handle in handles:
            handle.remove()
    updates = (_time_updates(owners, parameters, optimizer, clock, repeats)
               if optimizer is not None else 0.0)
    forward, backward = layer_times(np.array([r[0] for r in runs]),
                                    np.array([r[1] for r in runs]), owners, updates)
    names = dict(module.named_modules(remove_duplicate=False))
    block = {i: next(n for n, m in names.items() if m is sub)
             for sub, layers in owners for i in layers}
    return ModelProfile(name=name, dtype_bytes=parameters[0].element_size(), layers=[
        LayerProfile(name=param_name, params=p.numel(), forward_time_s=float(forward[i]),
                     backward_time_s=float(backward[i]), block=block.get(i, ""))
        for i, (param_name, p) in enumerate(named)])


def profile_csv(model: ModelProfile) -> str:
    """The profile as CSV: ``name, params, forward_time_s, backward_time_s, block``."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["name", "params", "forward_time_s", "backward_time_s", "block"])
    for layer in model.layers:
        writer.writerow([layer.name, layer.params, repr(layer.forward_time_s),
                         repr(layer.backward_time_s), layer.block])
    return out.getvalue()


def write_profile(model: ModelProfile, path: str | Path) -> None:
    """Write the profile as CSV (``.csv``) or JSON (any other suffix)."""
    path = Path(path)
    text = (profile_csv(model) if path.suffix.lower() == ".csv"
            else model.model_dump_json(indent=1))
    write_text(path, text)


def median_profile(profiles: list[ModelProfile]) -> ModelProfile:
    """Element-wise median of several ranks' profiles of the same module (deterministic, so
    every rank derives the same plan from it)."""
    first = profiles[0]
    forward = np.median([[x.forward_time_s for x in p.layers] for p in profiles], axis=0)
    backward = np.median([[x.backward_time_s for x in p.layers] for p in profiles], axis=0)
    return first.model_copy(update={"layers": [
        layer.model_copy(update={"forward_time_s": float(f), "backward_time_s": float(b)})
        for layer, f, b in zip(first.layers, forward, backward, strict=True)]})
