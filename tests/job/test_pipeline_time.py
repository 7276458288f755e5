"""The fast pipeline walk against the pipeline simulator, a hand-computed case and the bound."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.job.evaluation.evaluate import _bound
from dlsched.job.evaluation.pipeline_time import (
    PipelineTimes,
    event_pipeline,
    fast_pipeline,
    one_f_one_b_closed_form,
)


@st.composite
def replicas(draw: st.DrawFn) -> PipelineTimes:
    """A random replica: every schedule, 1-6 ranks, stage times that differ, sends shorter
    than a stage's compute."""
    schedule = draw(st.sampled_from(["1f1b", "gpipe", "zb-h1", "interleaved"]))
    pp = draw(st.integers(2 if schedule == "interleaved" else 1, 6))
    chunks = draw(st.integers(2, 3)) if schedule == "interleaved" else 1
    m = pp * draw(st.integers(1, 3)) if schedule == "interleaved" else draw(st.integers(1, 12))
    n = pp * chunks
    forward = tuple(draw(st.floats(0.5, 1.5)) for _ in range(n))
    backward = tuple(f * draw(st.floats(1.8, 3.2)) for f in forward)
    send = draw(st.floats(0.0, 0.2))
    return PipelineTimes(pp, chunks, m, schedule, forward, backward, (send,) * (n - 1),
                         draw(st.floats(0.3, 0.7)))


@settings(max_examples=200, deadline=None)
@given(replicas())
def test_fast_walk_within_one_percent_of_the_simulator_and_never_below_the_bound(
        times: PipelineTimes) -> None:
    """200 random replicas per run: the walk's iteration within 1% of pipeline.simulate's,
    and neither below the lower bound."""
    fast, event = fast_pipeline(times), event_pipeline(times)
    assert fast.end == pytest.approx(event.end, rel=0.01)
    assert fast.end >= _bound(times) * (1 - 1e-12)
    assert event.end >= _bound(times) * (1 - 1e-12)


def test_1f1b_without_transfers_is_the_textbook_formula() -> None:
    """Identical stages, no transfers: (m + p - 1)(f + b) exactly = 11 x 3 s for p 4, m 8."""
    times = PipelineTimes(4, 1, 8, "1f1b", (1.0,) * 4, (2.0,) * 4, (0.0,) * 3)
    assert fast_pipeline(times).end == pytest.approx(33.0)
    assert one_f_one_b_closed_form(4, 8, 1.0, 2.0, 0.0) == pytest.approx(33.0)


def test_gpipe_by_hand() -> None:
    """GPipe over 2 stages, 2 microbatches, f 1 s, b 2 s, sends 0.5 s: stage 1 runs F0 at
    1.5-2.5, F1 at 2.5-3.5 (sent at 2.0-2.5 ... F1 of stage 0 ends at 2, arrives 2.5), B0
    3.5-5.5, B1 5.5-7.5; stage 0 gets B0's gradient at 6.0 and B1's at 8.0: ends 10.0."""
    times = PipelineTimes(2, 1, 2, "gpipe", (1.0, 1.0), (2.0, 2.0), (0.5,))
    result = fast_pipeline(times)
    assert result.end == pytest.approx(10.0)
    assert result.last_backward_end == pytest.approx((10.0, 7.5))
    assert event_pipeline(times).end == pytest.approx(10.0)
