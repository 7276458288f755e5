"""Microbatches in flight on a pipeline rank and the stash they hold at its peak (bytes), for
``job.memory.per_gpu``: 1F1B's ``min(pp - s, m)`` (Narayanan et al., SC21, Sec. 2.2:
Megatron's warm-up ``pp - s - 1`` forwards plus one), GPipe's ``m``, Megatron-LM's interleaved
order (``megatron/core/pipeline_parallel/schedules.py``; with ``moe_a2a_overlap`` one more
warm-up forward: ``get_pp_rank_microbatches``, "we schedule one extra micro-batch forward step
before the 1f1b stages" under ``overlap_moe_expert_parallel_comm``, at NVIDIA/Megatron-LM
92c8482, 8f1c2f8, 4415119 and 24bad8e), and the V and DualPipe orders
(``job.unit_walk.held_in_flight``); ``per_gpu``'s module docstring derives them.

``accumulating_peak`` adds gradients that appear on a chunk's first backward and stay to the
end of the iteration (FSDP2's unsharded accumulation under a pipeline schedule,
``job.memory.torch_runtime``) and bytes each forward adds until the iteration ends (the last
stage's outputs ``torch.distributed.pipelining`` keeps, ``job.memory.pipeline_buffers``): it
walks the rank's forwards and backwards in Megatron-LM's order (warm-up forwards, then one
forward and one backward in turn, then the remaining backwards) and takes the largest of stash
plus gradients plus kept outputs after any step.
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
    if layout.schedule == "interleaved":  # one more under the EP All-to-All overlap
        warmup = (2 * (layout.pp - stage - 1) + (layout.chunks - 1) * layout.pp
                  + layout.run.moe_a2a_overlap)
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
                      chunk_grads: list[float], chunk_kept: list[float] | None = None
                      ) -> tuple[float, float, tuple[int, ...], float, float]:
    """Peak of rank ``stage``'s stash (``chunk_bytes`` per chunk-microbatch) plus the gradient
    bytes ``chunk_grads`` of each chunk held from that chunk's first backward on plus the
    bytes ``chunk_kept`` each forward of a chunk adds to the iteration's end (none when not
    given; module docstring): (activations, logits, chunk-microbatches per chunk, gradient
    bytes, kept bytes) at that step. The V and DualPipe orders (``UNIT_SCHEDULES``) count every
    chunk's gradients and every microbatch's kept bytes at their stash peak (an upper bound:
    their walk is ``job.unit_walk``'s)."""
    m, v = layout.num_microbatches, layout.chunks
    kept = np.zeros(len(chunk_bytes)) if chunk_kept is None else np.asarray(chunk_kept, float)
    if layout.schedule in UNIT_SCHEDULES:
        return (*in_flight_peak(layout, stage, chunk_bytes), float(sum(chunk_grads)),
                float(m * kept.sum()))
    order = megatron_interleaved_chunks(m, v, layout.pp) if v > 1 else np.zeros(m, dtype=int)
    counts, seen, forwards = _walk_states(order, v, warmup_forwards(layout, stage))
    stash = np.array([a + b for a, b in chunk_bytes])
    grads = np.asarray(chunk_grads, dtype=float)
    state, gradients = _first_largest(np.vstack([counts, forwards]), seen,
                                      np.concatenate([stash, kept]), grads)
    held, run = state[:v], state[v:]
    acts = np.array([part[0] for part in chunk_bytes])
    logits = np.array([part[1] for part in chunk_bytes])
    return (float(acts @ held), float(logits @ held), tuple(int(n) for n in held),
            float(grads @ gradients), float(kept @ run))


def _walk_states(order: np.ndarray, v: int, warmup: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Chunk-microbatches held, chunks whose gradients exist and forwards run per chunk (chunks
    x steps) after each step of the rank's walk: ``warmup`` forwards, then a forward and a
    backward in turn, then the remaining backwards; forward k runs chunk ``order[k]``, backward
    j chunk ``v - 1 - order[j]``."""
    total = order.size
    forward = np.concatenate([np.ones(warmup, dtype=int), np.tile([1, 0], total - warmup),
                              np.zeros(warmup, dtype=int)])
    forwards = np.cumsum(forward)  # forwards run after each step, and backwards
    backwards = np.arange(1, 2 * total + 1) - forwards
    run = np.zeros((v, total + 1), dtype=int)  # [c, k]: chunk c's among the first k forwards
    run[:, 1:] = np.cumsum(order[None, :] == np.arange(v)[:, None], axis=1)
    return (run[:, forwards] - run[::-1, backwards], run[::-1, backwards] > 0,
            run[:, forwards])


def _first_largest(counts: np.ndarray, seen: np.ndarray, stash: np.ndarray,
                   grads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The state (a column of ``counts`` and of ``seen``) of the first step whose stash plus
    gradients (bytes: ``stash @ counts + grads @ seen``, one dot product each, taken per
    step) is the largest, or an empty state where none exceeds 0.

    All steps are summed at once first; a step's own sums round differently, each within
    (v + 1) u of its absolute sum (any summation order: Higham, Accuracy and Stability of
    Numerical Algorithms, 2nd ed., Sec. 3.1; u = eps / 2, v chunks), so the steps within
    twice that (with a margin) of the largest hold every step whose own sum can be the
    largest. Each of their distinct states is then summed on its own, in step order (equal
    states give equal sums), and the first largest kept: the same step, to the bit, as
    summing every step on its own."""
    v = stash.size
    held = stash @ counts + grads @ seen
    size = np.abs(stash) @ np.abs(counts) + np.abs(grads) @ seen
    near = np.flatnonzero(held >= held.max() - 4 * (v + 2) * np.finfo(float).eps * size.max())
    states = np.vstack([counts[:, near], seen[:, near]]).T  # near steps x (counts, seen)
    new = np.ones(near.size, dtype=bool)
    new[1:] = (states[1:] != states[:-1]).any(axis=1)  # not the state of the step before
    states = np.ascontiguousarray(states[new])
    keys = states.view(np.dtype((np.void, states.dtype.itemsize * states.shape[1]))).ravel()
    best, at = 0.0, (np.zeros(v, dtype=int), np.zeros(grads.size, dtype=bool))
    for step in near[new][np.sort(np.unique(keys, return_index=True)[1])]:
        state = (counts[:, step].copy(), seen[:, step].copy())
        value = float(stash @ state[0] + grads @ state[1])
        if value > best:
            best, at = value, state
    return at
