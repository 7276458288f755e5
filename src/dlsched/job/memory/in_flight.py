"""Microbatches in flight on a pipeline rank and the stash they hold at its peak (bytes), for
``job.memory.per_gpu``: 1F1B's ``min(pp - s, m)`` (Narayanan et al., SC21, Sec. 2.2:
Megatron's warm-up ``pp - s - 1`` forwards plus one), GPipe's ``m``, Megatron-LM's interleaved
order (``megatron/core/pipeline_parallel/schedules.py``), and the V and DualPipe orders
(``job.unit_walk.held_in_flight``); ``per_gpu``'s module docstring derives them.

``accumulating_peak`` adds gradients that appear on a chunk's first backward and stay to the
end of the iteration (FSDP2's unsharded accumulation under a pipeline schedule,
``job.memory.torch_runtime``): it walks the rank's forwards and backwards in Megatron-LM's order
(warm-up forwards, then one forward and one backward in turn, then the remaining backwards) and
takes the largest of stash plus gradients after any step.
"""

from __future__ import annotations

import numpy as np

from dlsched.job.evaluation.unit_walk import UNIT_SCHEDULES, held_in_flight
from dlsched.job.execution import Execution


def warmup_forwards(layout: Execution, stage: int) -> int:
    """Forwards (of chunk-microbatches) rank ``stage`` runs before its first backward."""
    m = layout.num_microbatches
    if layout.schedule == "gpipe":
        return m * layout.chunks
    if layout.schedule == "interleaved":
        warmup = 2 * (layout.pp - stage - 1) + (layout.chunks - 1) * layout.pp
        return min(warmup, m * layout.chunks)
    return min(layout.pp - stage - 1, m)


def in_flight_peak(layout: Execution, stage: int,
                   chunk_bytes: list[tuple[float, float]]) -> tuple[float, float, tuple[int, ...]]:
    """Peak stash of rank ``stage`` (activations, logits, chunk-microbatches held per chunk),
    walking the schedule's order of forwards and backwards (module docstring)."""
    m, v = layout.num_microbatches, layout.chunks
    if layout.schedule in UNIT_SCHEDULES:  # their own orders, two chunks (job.unit_walk)
        counts = np.array(held_in_flight(layout.schedule, layout.pp, m, stage)).T
        return _peak_of(counts, chunk_bytes)
    warmup = warmup_forwards(layout, stage)
    if v == 1:
        held = m if warmup >= m else warmup + 1
        return held * chunk_bytes[0][0], held * chunk_bytes[0][1], (held,)
    order = megatron_interleaved_chunks(m, v, layout.pp)
    forwards = np.cumsum(order[None, :] == np.arange(v)[:, None], axis=1)
    # after forward k, backwards 0 .. k - warmup - 1 have run; backward j is chunk v-1-order[j]
    done = np.arange(order.size) - warmup - 1
    backwards = np.where(done >= 0, forwards[::-1][:, np.maximum(done, 0)], 0)
    return _peak_of(forwards - backwards, chunk_bytes)


def _peak_of(counts: np.ndarray, chunk_bytes: list[tuple[float, float]]
             ) -> tuple[float, float, tuple[int, ...]]:
    """(activations, logits, chunk-microbatches per chunk) at the step of ``counts`` (chunks
    x steps: microbatches held) where the stash is largest."""
    acts, logits = (np.array([part[i] for part in chunk_bytes]) for i in (0, 1))
    held = (acts + logits) @ counts
    peak = int(np.argmax(held))
    return (float(acts @ counts[:, peak]), float(logits @ counts[:, peak]),
            tuple(int(n) for n in counts[:, peak]))


def megatron_interleaved_chunks(m: int, v: int, pp: int) -> np.ndarray:
    """The chunk of each forward in Megatron-LM's interleaved order (``get_schedule_table``
    with ``microbatch_group_size_per_vp_stage`` = pp): per group of ``pp`` microbatches (the
    last group takes the rest), every chunk in turn; backward ``k`` runs chunk ``v - 1 -``
    that of forward ``k``. Megatron-LM itself runs it only for ``m`` a multiple of ``pp``."""
    groups = [m - first if first + pp >= m else pp for first in range(0, m, pp)]
    return np.concatenate([np.repeat(np.arange(v), size) for size in groups])


def accumulating_peak(layout: Execution, stage: int, chunk_bytes: list[tuple[float, float]],
                      chunk_grads: list[float]) -> tuple[float, float, tuple[int, ...], float]:
    """Peak of rank ``stage``'s stash (``chunk_bytes`` per chunk-microbatch) plus the gradient
    bytes ``chunk_grads`` of each chunk held from that chunk's first backward on (module
    docstring): (activations, logits, chunk-microbatches per chunk, gradient bytes) at that
    step. The V and DualPipe orders (``UNIT_SCHEDULES``) count every chunk's gradients at
    their stash peak (an upper bound: their walk is ``job.unit_walk``'s)."""
    if layout.schedule in UNIT_SCHEDULES:
        return (*in_flight_peak(layout, stage, chunk_bytes), float(sum(chunk_grads)))
    m, v = layout.num_microbatches, layout.chunks
    order = megatron_interleaved_chunks(m, v, layout.pp) if v > 1 else np.zeros(m, dtype=int)
    warmup, total = warmup_forwards(layout, stage), order.size
    # True: the next forward, False: the next backward (backward j runs chunk v - 1 - order[j])
    ops = [True] * warmup + [True, False] * (total - warmup) + [False] * warmup
    stash = np.array([a + b for a, b in chunk_bytes])
    grads = np.asarray(chunk_grads, dtype=float)
    counts, seen = np.zeros(v, dtype=int), np.zeros(v, dtype=bool)
    best, at = 0.0, (counts.copy(), seen.copy())
    forward = backward = 0
    for is_forward in ops:
        if is_forward:
            counts[order[forward]] += 1
            forward += 1
        else:
            chunk = v - 1 - order[backward]
            counts[chunk] -= 1
            seen[chunk] = True
            backward += 1
        held = float(stash @ counts + grads @ seen)
        if held > best:
            best, at = held, (counts.copy(), seen.copy())
    acts = np.array([part[0] for part in chunk_bytes])
    logits = np.array([part[1] for part in chunk_bytes])
    return (float(acts @ at[0]), float(logits @ at[0]), tuple(int(n) for n in at[0]),
            float(grads @ at[1]))
