"""What a plan's recomputation costs when memory is why it recomputes: one note for ``plan``.

The search keeps only layouts whose memory fits the GPU less its runtime reserve and a
fragmentation margin (``job.evaluation.evaluate.memory_fits``). When the chosen plan recomputes
(``full``, ``selective``, Megatron-Core's ``modules:...`` or ``block:N``) and the same layout
without recomputation would be faster but fails that check, ``recompute_note`` says so with
both times and the memory, when that memory would fit the GPU less its runtime reserve and
fails only the fragmentation margin: there the recomputation is the price of the margin, not of
the layout, and a framework that holds less than the check counts can run faster than the plan
(Meta's Llama 3 405B run, its own framework, reached 41% MFU at a layout where the check has
dlsched recompute: docs/time-to-train.md). A layout over the GPU itself gets no note.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from dlsched.errors import ConfigError
from dlsched.job.evaluation.evaluate import evaluate
from dlsched.job.memory.allocator import fragmentation_margin
from dlsched.pipeline.chains.memory_model import usable_bytes
from dlsched.units import format_bytes

if TYPE_CHECKING:
    from dlsched.job.evaluation.evaluate import Job, JobResult

NOTED_GAIN = 0.03
"""The least share of the iteration recomputation must cost for the note (3%: below it the
recomputation is not worth a line)."""
SKIPPED_MODES = ("none", "selective-op")
"""Recomputation settings the note does not look at: none, and TorchTitan's per-op policy,
its own trade (every Megatron mode is compared: selective, full, ``modules:...``,
``block:N``)."""


def recompute_note(job: Job, result: JobResult) -> str | None:
    """The note (module docstring) for ``result``, None when it does not recompute, or the
    layout without recomputation is not faster by ``NOTED_GAIN``, fits the check anyway (the
    search then weighed it), needs more than the GPU less its reserve, or cannot run."""
    layout = result.layout
    if layout.recompute in SKIPPED_MODES:
        return None
    try:
        plain = evaluate(job, replace(layout, recompute="none"))
    except ConfigError:
        return None
    gain = 1 - plain.iteration_s / result.iteration_s
    if plain.fits or gain < NOTED_GAIN:
        return None
    margin = fragmentation_margin(layout.run.expandable_segments)
    reserve = plain.memory.get("reserve", 0.0)
    admitted = usable_bytes(job.cluster.memory, reserve, margin)
    needed = plain.memory_bytes - reserve
    if needed > usable_bytes(job.cluster.memory, reserve, 0.0):
        return None
    return (f"{layout.label()}: recomputation ({layout.recompute}) is the memory margin's "
            f"price: without it the layout would take {plain.iteration_s:.3f} s ({gain:.1%} "
            f"less, MFU {plain.mfu:.1%}) and keep {format_bytes(needed)} per GPU, within the "
            f"{format_bytes(job.cluster.memory)} GPU less its runtime reserve but over the "
            f"{format_bytes(admitted)} the check admits with its {margin:.0%} fragmentation "
            "margin; a framework that holds less than the check counts can run faster than "
            "this plan")
