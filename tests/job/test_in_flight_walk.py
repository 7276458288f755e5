"""``job.memory.in_flight.accumulating_peak`` (all of a rank's steps at once) against the
step-by-step walk it replaced, kept here as the reference: exactly equal results (float
equality, the same step on ties) on every schedule the module prices, PP degree, rank,
microbatch count and byte sizes (ties, values rounding away, zeros)."""

from __future__ import annotations

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from dlsched.errors import ConfigError
from dlsched.job.evaluation.unit_walk import UNIT_CHUNKS, UNIT_SCHEDULES
from dlsched.job.execution import Execution
from dlsched.job.memory.in_flight import (
    accumulating_peak,
    in_flight_peak,
    megatron_interleaved_chunks,
    warmup_forwards,
)


def walked_peak(layout: Execution, stage: int, chunk_bytes: list[tuple[float, float]],
                chunk_grads: list[float], chunk_kept: list[float] | None = None
                ) -> tuple[float, float, tuple[int, ...], float, float]:
    """The reference: the rank's forwards and backwards walked one at a time in Megatron-LM's
    order (warm-up forwards, one forward and one backward in turn, the remaining backwards),
    stash plus kept outputs plus gradients summed after each step, the first step holding the
    largest kept."""
    m, v = layout.num_microbatches, layout.chunks
    kept = np.zeros(len(chunk_bytes)) if chunk_kept is None else np.asarray(chunk_kept, float)
    if layout.schedule in UNIT_SCHEDULES:
        return (*in_flight_peak(layout, stage, chunk_bytes), float(sum(chunk_grads)),
                float(m * kept.sum()))
    order = megatron_interleaved_chunks(m, v, layout.pp) if v > 1 else np.zeros(m, dtype=int)
    warmup, total = warmup_forwards(layout, stage), order.size
    ops = [True] * warmup + [True, False] * (total - warmup) + [False] * warmup
    stash = np.array([a + b for a, b in chunk_bytes])
    grads = np.asarray(chunk_grads, dtype=float)
    counts, seen = np.zeros(v, dtype=int), np.zeros(v, dtype=bool)
    run = np.zeros(v, dtype=int)  # forwards run per chunk
    best, at = 0.0, (counts.copy(), seen.copy(), run.copy())
    forward = backward = 0
    for is_forward in ops:
        if is_forward:
            counts[order[forward]] += 1
            run[order[forward]] += 1
            forward += 1
        else:
            chunk = v - 1 - order[backward]
            counts[chunk] -= 1
            seen[chunk] = True
            backward += 1
        held = float(np.concatenate([stash, kept]) @ np.concatenate([counts, run])
                     + grads @ seen)
        if held > best:
            best, at = held, (counts.copy(), seen.copy(), run.copy())
    acts = np.array([part[0] for part in chunk_bytes])
    logits = np.array([part[1] for part in chunk_bytes])
    return (float(acts @ at[0]), float(logits @ at[0]), tuple(int(n) for n in at[0]),
            float(grads @ at[1]), float(kept @ at[2]))


# byte sizes: round numbers (exact sums, many ties between different steps), decimals that
# round (0.1 + 0.2 != 0.3), values a larger one absorbs (1e-3 beside 1e16), zeros, and any
BYTES = st.one_of(st.sampled_from([0.0, 0.1, 0.2, 0.3, 1.0, 2.0, 3.0, 1 / 3, 1e-3, 1e16, 5e15]),
                  st.integers(0, 8).map(float), st.floats(0.0, 1e12))
SCHEDULES = ("1f1b", "zb-h1", "gpipe", "interleaved", *UNIT_SCHEDULES)


@settings(max_examples=400, deadline=None)
@given(schedule=st.sampled_from(SCHEDULES), pp=st.integers(1, 16), m=st.integers(1, 48),
       chunks=st.integers(2, 4), rank=st.integers(0, 15), data=st.data())
def test_accumulating_peak_is_the_walk(schedule: str, pp: int, m: int, chunks: int, rank: int,
                                       data: st.DataObject) -> None:
    v = chunks if schedule == "interleaved" else UNIT_CHUNKS.get(schedule, 1)
    try:
        layout = Execution(1, pp, 1, 1, m, v, schedule)
    except ConfigError:  # DualPipe's microbatch rules, ZB-V's two ranks
        assume(False)
        raise
    stage = rank % pp
    held = 2 if schedule in UNIT_SCHEDULES else v  # those hold two stages a rank (unit_walk)
    sizes = data.draw(st.lists(st.tuples(BYTES, BYTES), min_size=held, max_size=held))
    grads = data.draw(st.lists(BYTES, min_size=held, max_size=held))
    kept = data.draw(st.none() | st.lists(BYTES, min_size=held, max_size=held))
    assert accumulating_peak(layout, stage, sizes, grads, kept) == \
        walked_peak(layout, stage, sizes, grads, kept)


def test_equal_sums_keep_the_first_step() -> None:
    """PP 2, 2 chunks, 4 microbatches, rank 0 (chunks 0 0 1 1 0 0 1 1, warm-up 2 + 2 = 4
    forwards), 1 B a chunk-microbatch, gradients 0 B for chunk 0 and 2 B for chunk 1: after
    F F F F F B(1) F the rank holds chunks (4, 1) and chunk 1's gradients, 5 + 2 = 7 B; later
    F(1) B(0) F(1) holds (3, 2) and both chunks' gradients, 5 + 0 + 2 = 7 B too (and nothing
    more ever): the first of the two is the peak."""
    layout = Execution(1, 2, 1, 1, 4, 2, "interleaved")
    sizes, grads = [(1.0, 0.0), (1.0, 0.0)], [0.0, 2.0]
    assert walked_peak(layout, 0, sizes, grads) == (5.0, 0.0, (4, 1), 2.0, 0.0)
    assert accumulating_peak(layout, 0, sizes, grads) == (5.0, 0.0, (4, 1), 2.0, 0.0)
