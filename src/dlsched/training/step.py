"""One training step of a zoo model on one GPU, without communication (``dlsched compute``):
forward, backward and step seconds from the calibrated GPU model, and the model FLOPs
utilization."""

from __future__ import annotations

from typing import Any

from dlsched.models.compute import calibrated, mfu, training_flops
from dlsched.models.zoo import get_model

STARVED = 0.1
"""A step whose GPU waits for kernel launches this fraction of the time or more gets a note."""


def step_row(model: str, batch_size: int, device: str, precision: str | None,
             channels_last: bool = False, lm_head: bool = True) -> dict[str, Any]:
    """One prediction: forward, backward and step seconds, the GPU's busy seconds, the
    fraction of the step it waits for launches and MFU (model FLOP / step time / the
    precision's peak)."""
    compute = calibrated(device, precision, channels_last=channels_last)
    zoo = get_model(model, lm_head=lm_head)
    timed = compute.step(zoo, batch_size)
    step = timed.step_s
    return {"model": model, "batch_size": batch_size, "device": compute.gpu.name,
            "precision": compute.precision, "channels_last": channels_last, "lm_head": lm_head,
            "forward_s": sum(timed.forward), "backward_s": sum(timed.backward), "step_s": step,
            "gpu_busy_s": timed.gpu_busy_s, "launch_bound": timed.launch_bound,
            "mfu": mfu(training_flops(zoo, batch_size), step, 1, compute.peak_flops)}


def starved_note(row: dict[str, Any]) -> str | None:
    """A note when the GPU waits for the host's kernel launches much of the step (None
    otherwise)."""
    if row["launch_bound"] < STARVED:
        return None
    return (f"the GPU waits for kernel launches {row['launch_bound']:.0%} of the step (eager "
            "PyTorch's host launches are the bottleneck: a larger batch, CUDA graphs or "
            "torch.compile would hide them)")
