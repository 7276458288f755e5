"""The steady state of a pipeline's orders and the walk that skips its repeats: the periodic
structure expands to the schedules' own orders exactly, the fast walk equals the full walk on
random replicas, and its work does not grow with the microbatches."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.job.evaluation import pipeline_walk
from dlsched.job.evaluation.pipeline_orders import coded_orders, periodic_orders
from dlsched.job.evaluation.pipeline_walk import PipelineTimes, fast_pipeline, walk_pipeline


@pytest.mark.parametrize("schedule, chunks", [("1f1b", 1), ("zb-h1", 1), ("interleaved", 2),
                                              ("interleaved", 3), ("gpipe", 1)])
def test_the_structure_expands_to_the_schedule_orders(schedule: str, chunks: int) -> None:
    """Every degree 1-6 (2-6 interleaved) and microbatch count up to 30 with a structure:
    prefix + rounds + shifted suffix is ``rank_orders`` action for action; 1F1B and ZB-H1
    have one from ``pp - 1`` microbatches on, the interleaved schedule for multiples of pp
    from ``2 pp``, GPipe none (two places grow per rank)."""
    found = 0
    for pp in range(2 if schedule == "interleaved" else 1, 7):
        for m in range(1, 31):
            structure = periodic_orders(schedule, pp, chunks, m)
            if structure is None:
                assert schedule == "gpipe" or m < 2 * pp or m % pp, (pp, m)
                continue
            found += 1
            assert structure.expand(m) == coded_orders(schedule, pp, chunks, m), (pp, m)
    assert (found == 0) == (schedule == "gpipe")


@st.composite
def replicas(draw: st.DrawFn) -> PipelineTimes:
    """A random replica with many microbatches: stages equal (as a model's middle layers are)
    or each its own time, sends none, equal or each its own."""
    schedule = draw(st.sampled_from(["1f1b", "zb-h1", "interleaved", "gpipe"]))
    pp = draw(st.integers(2 if schedule == "interleaved" else 1, 8))
    chunks = draw(st.integers(2, 3)) if schedule == "interleaved" else 1
    m = pp * draw(st.integers(1, 24)) if schedule == "interleaved" else draw(st.integers(1, 160))
    n = pp * chunks
    equal = draw(st.booleans())
    base = draw(st.floats(0.5, 1.5))
    forward = tuple(base if equal and 0 < s < n - 1 else draw(st.floats(0.5, 1.5))
                    for s in range(n))
    ratio = draw(st.floats(1.8, 3.2))
    backward = tuple(f * (ratio if equal else draw(st.floats(1.8, 3.2))) for f in forward)
    kind = draw(st.sampled_from(["none", "equal", "each"]))
    one = draw(st.floats(0.0, 0.8))
    send = tuple(0.0 if kind == "none" else one if kind == "equal" else
                 draw(st.floats(0.0, 0.8)) for _ in range(n - 1))
    return PipelineTimes(pp, chunks, m, schedule, forward, backward, send,
                         draw(st.floats(0.3, 0.7)))


@settings(max_examples=300, deadline=None)
@given(replicas())
def test_skipping_the_repeats_gives_the_full_walk(times: PipelineTimes) -> None:
    """300 random replicas per run: the end and every rank's last backward start and end
    equal the full walk's to 1e-9 (floating-point rounding of the skipped sums only)."""
    fast, full = fast_pipeline.__wrapped__(times), walk_pipeline(times)
    assert fast.end == pytest.approx(full.end, rel=1e-9, abs=1e-12)
    assert fast.last_backward_start == pytest.approx(full.last_backward_start, rel=1e-9,
                                                     abs=1e-12)
    assert fast.last_backward_end == pytest.approx(full.last_backward_end, rel=1e-9,
                                                   abs=1e-12)


def _walked(times: PipelineTimes, monkeypatch: pytest.MonkeyPatch) -> int:
    """Actions the fast walk runs for ``times``."""
    count = [0]
    run = pipeline_walk._Walk.run

    def counted(self: pipeline_walk._Walk, orders: tuple, schedule: str) -> None:
        count[0] += sum(len(order) for order in orders)
        run(self, orders, schedule)

    monkeypatch.setattr(pipeline_walk._Walk, "run", counted)
    fast_pipeline.__wrapped__(times)
    monkeypatch.setattr(pipeline_walk._Walk, "run", run)
    return count[0]


@pytest.mark.parametrize("schedule, chunks", [("1f1b", 1), ("zb-h1", 1), ("interleaved", 2)])
def test_the_work_does_not_grow_with_the_microbatches(schedule: str, chunks: int,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A model's replica (first and last stage heavier: embedding, loss; transfers): the same
    actions are walked for 64 and for 6,400 microbatches (not 100x), far fewer than the full
    orders hold, and the timing is the full walk's."""
    pp = 8
    n = pp * chunks
    forward = tuple(1.3 if s in (0, n - 1) else 1.0 for s in range(n))
    small, large = (PipelineTimes(pp, chunks, m, schedule, forward,
                                  tuple(2 * f for f in forward), (0.1,) * (n - 1))
                    for m in (64, 6400))
    walked = _walked(small, monkeypatch), _walked(large, monkeypatch)
    assert walked[0] == walked[1]
    assert walked[1] < sum(len(o) for o in coded_orders(schedule, pp, chunks, 6400)) / 50
    assert fast_pipeline(large).end == pytest.approx(walk_pipeline(large).end, rel=1e-9)
