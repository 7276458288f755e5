"""Memory of a pipeline plan per GPU (bytes): static state of the hosted stages plus the
activations stashed by the microbatches in flight, walked along the GPU's action order.

Every figure here is a GPU's footprint, what it occupies as ``nvidia-smi`` reports it: the
chain's runtime reserve (``Chain.reserve_bytes``, once per GPU that hosts a stage) plus the
model's bytes grossed up by the allocator's ``fragmentation`` (bytes / (1 - fragmentation)),
so a plan fits when every footprint is at most the GPU's memory, which is the same as the
model's bytes fitting ``Chain.usable(memory)``.
"""

from __future__ import annotations

from dlsched.errors import ConfigError
from dlsched.pipeline.chains.chain import Chain
from dlsched.pipeline.plans.plan import PipelinePlan, Stage
from dlsched.units import format_bytes


def _gross(chain: Chain, num_bytes: float) -> float:
    """Footprint of ``num_bytes`` of model memory: grossed up by the fragmentation."""
    return num_bytes / (1.0 - chain.fragmentation)


def static_footprint(chain: Chain, first: int, last: int) -> float:
    """Footprint of a GPU hosting only blocks ``first..last-1`` with nothing in flight:
    reserve + grossed-up weights, gradients, optimizer state and transients (bytes)."""
    return chain.reserve_bytes + _gross(chain, chain.static_bytes(first, last))


def static_memory(chain: Chain, stages: tuple[Stage, ...], num_devices: int) -> list[float]:
    """Footprint per GPU of the stages it hosts, nothing in flight: the reserve on every GPU
    that hosts a stage plus each stage's grossed-up static bytes (bytes per GPU)."""
    memory = [0.0] * num_devices
    hosting = {device for stage in stages for device in stage.devices}
    for device in hosting:
        memory[device] = chain.reserve_bytes
    for stage in stages:
        size = _gross(chain, chain.static_bytes(stage.first, stage.last))
        for device in stage.devices:
            memory[device] += size
    return memory


def action_stash(chain: Chain, stage: Stage) -> float:
    """Footprint one action's forward stashes until its backward: the stage's stash per
    microbatch (a replica's part of it on a split stage), grossed up by the fragmentation."""
    return _gross(chain, float(chain.stash_bytes[stage.first:stage.last].sum()) * stage.share)


def peak_memory(chain: Chain, plan: PipelinePlan, num_devices: int) -> list[float]:
    """Peak footprint per GPU when it runs its order: static + max stashed activations (a split
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
    """Raise ConfigError naming the first GPU whose peak footprint exceeds its memory, and by
    how much."""
    for name, peak, capacity in zip(names, peaks, capacities, strict=True):
        if peak > capacity:
            raise ConfigError(f"plan does not fit in memory: GPU {name} needs "
                              f"{format_bytes(peak)} but has {format_bytes(capacity)} (short "
                              f"by {format_bytes(peak - capacity)}) counting the runtime "
                              "reserve and fragmentation")
