"""Memory of a pipeline plan per GPU (bytes): static state of the hosted stages plus the
activations stashed by the microbatches in flight, walked along the GPU's action order."""

from __future__ import annotations

from dlsched.errors import ConfigError
from dlsched.pipeline.chain import Chain
from dlsched.pipeline.plan import PipelinePlan, Stage
from dlsched.units import format_bytes


def static_memory(chain: Chain, stages: tuple[Stage, ...], num_devices: int) -> list[float]:
    """Weights, gradients and optimizer state of every stage a GPU hosts (bytes per GPU)."""
    memory = [0.0] * num_devices
    for stage in stages:
        size = chain.static_bytes(stage.first, stage.last)
        for device in stage.devices:
            memory[device] += size
    return memory


def action_stash(chain: Chain, stage: Stage) -> float:
    """Bytes one action's forward stashes until its backward: the stage's stash per
    microbatch, or a replica's part of it on a split stage."""
    return float(chain.stash_bytes[stage.first:stage.last].sum()) * stage.share


def peak_memory(chain: Chain, plan: PipelinePlan, num_devices: int) -> list[float]:
    """Peak bytes per GPU when it runs its order: static + max stashed activations (a split
    stage's replica stashes its part of each microbatch)."""
    static = static_memory(chain, plan.stages, num_devices)
    stash = [action_stash(chain, st) for st in plan.stages]
    peaks = []
    for device, order in enumerate(plan.orders):
        current = peak = static[device]
        for action in order:
            if action.kind == "F":
                current += stash[action.stage]
                peak = max(peak, current)
            elif action.frees:
                current -= stash[action.stage]
        peaks.append(peak)
    return peaks


def check_memory(peaks: list[float], names: list[str], capacities: list[int]) -> None:
    """Raise ConfigError naming the first GPU whose peak exceeds its memory, and by how much."""
    for name, peak, capacity in zip(names, peaks, capacities, strict=True):
        if peak > capacity:
            raise ConfigError(f"plan does not fit in memory: GPU {name} needs "
                              f"{format_bytes(peak)} but has {format_bytes(capacity)} "
                              f"(short by {format_bytes(peak - capacity)})")
