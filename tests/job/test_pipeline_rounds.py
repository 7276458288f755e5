"""ZB-H1 walked round by round with every rank at once (``pipeline_rounds``): its rounds are
the schedule's orders, both lanes equal the full walk of each on random replicas, and the
rounds past a repeat are not walked; GPipe rank by rank with every microbatch at once, equal
to the full walk likewise."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pipeline_strategies import assert_same_timing, stage_seconds

from dlsched.job.evaluation import pipeline_rounds
from dlsched.job.evaluation.pipeline_rounds import (
    gpipe_holds,
    gpipe_timings,
    zb_h1_holds,
    zb_h1_timings,
)
from dlsched.job.evaluation.pipeline_steady import replica_timings
from dlsched.job.evaluation.pipeline_walk import PipelineTimes, ReplicaTiming, walk_pipeline


def test_the_rounds_are_the_zb_h1_orders() -> None:
    """Every degree 2-8 and microbatch count 1-40 (compared action for action up to the
    first two counts with a steady round, by the periodic structure beyond: checked against
    the direct comparison), and 64 ranks at 384 microbatches (the 1T benchmark's replica)."""
    for pp in range(2, 9):
        for m in range(1, 41):
            assert zb_h1_holds(pp, m), (pp, m)
            assert pipeline_rounds._same_orders(pp, m), (pp, m)
    assert zb_h1_holds(64, 384)


def test_other_schedules_are_not_walked_here() -> None:
    """1F1B, interleaving and a single rank are left to ``pipeline_steady``'s walk."""
    one = PipelineTimes(2, 1, 4, "1f1b", (1.0, 1.0), (2.0, 2.0), (0.1,))
    assert zb_h1_timings(one, one) is None
    single = PipelineTimes(1, 1, 4, "zb-h1", (1.0,), (2.0,), ())
    assert zb_h1_timings(single, single) is None


@st.composite
def zb_h1_lanes(draw: st.DrawFn) -> tuple[PipelineTimes, PipelineTimes]:
    """Two random ZB-H1 replicas of one degree (2-10), microbatch count (1-200) and input
    fraction, each with its own seconds (``stage_seconds``)."""
    pp = draw(st.integers(2, 10))
    m = draw(st.integers(1, 200))
    fraction = draw(st.floats(0.3, 0.7))
    return tuple(PipelineTimes(pp, 1, m, "zb-h1", *draw(stage_seconds(pp)), fraction)
                 for _ in range(2))


@settings(max_examples=300, deadline=None)
@given(zb_h1_lanes())
def test_both_lanes_are_the_full_walks(pair: tuple[PipelineTimes, PipelineTimes]) -> None:
    """300 random pairs per run: each lane is ``walk_pipeline`` of that replica alone."""
    times, quiet = pair
    fast, fast_quiet = zb_h1_timings(times, quiet)
    assert_same_timing(fast, walk_pipeline(times))
    assert_same_timing(fast_quiet, walk_pipeline(quiet))


def _rounds_walked(times: PipelineTimes, quiet: PipelineTimes,
                   monkeypatch: pytest.MonkeyPatch) -> tuple[int, tuple[ReplicaTiming, ...]]:
    """Rounds the walk runs for the pair (its input-gradient steps), and its timings."""
    count = [0]
    inputs = pipeline_rounds._Rounds.inputs

    def counted(self: pipeline_rounds._Rounds, *bounds: int) -> None:
        count[0] += 1
        inputs(self, *bounds)

    monkeypatch.setattr(pipeline_rounds._Rounds, "inputs", counted)
    timings = zb_h1_timings(times, quiet)
    monkeypatch.setattr(pipeline_rounds._Rounds, "inputs", inputs)
    return count[0], timings


@pytest.mark.parametrize("pp", [4, 8, 16])
def test_the_rounds_past_a_repeat_are_not_walked(pp: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A model's replica (first and last stage 1.3x the others, transfers of 0.1) beside the
    same without transfers: at 40 and 400 rounds of microbatches per rank the same rounds are
    walked (the warm-up, the rounds until the state repeats, the cool-down: fewer than the
    ``m + p - 1`` rounds the orders hold at 40 per rank), and both lanes are the full walks'
    (the transfers cost something)."""
    forward = tuple(1.3 if s in (0, pp - 1) else 1.0 for s in range(pp))
    backward = tuple(2.1 * f for f in forward)
    walked = []
    for m in (40 * pp, 400 * pp):
        times = PipelineTimes(pp, 1, m, "zb-h1", forward, backward, (0.1,) * (pp - 1))
        quiet = PipelineTimes(pp, 1, m, "zb-h1", forward, backward, (0.0,) * (pp - 1))
        rounds, (fast, fast_quiet) = _rounds_walked(times, quiet, monkeypatch)
        walked.append(rounds)
        assert_same_timing(fast, walk_pipeline(times))
        assert_same_timing(fast_quiet, walk_pipeline(quiet))
        assert fast.end > fast_quiet.end
    assert walked[0] == walked[1] < 40 * pp + pp - 1


def test_replica_timings_walks_zb_h1_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """The evaluation's walk (``replica_timings``) of a ZB-H1 pair is this walk's."""
    times = PipelineTimes(4, 1, 12, "zb-h1", (1.0, 1.1, 1.0, 1.3), (2.0, 2.1, 2.2, 2.6),
                          (0.1, 0.2, 0.1), 0.4)
    rounds, mine = _rounds_walked(times, times, monkeypatch)
    assert rounds == 12 + 4 - 1  # no repeat in so few rounds: every round walked
    assert replica_timings.__wrapped__(times, times) == mine


@st.composite
def gpipe_lanes(draw: st.DrawFn) -> tuple[PipelineTimes, PipelineTimes]:
    """Two random GPipe replicas of one degree (2-10) and microbatch count (1-200), each with
    its own seconds (``stage_seconds``)."""
    pp = draw(st.integers(2, 10))
    m = draw(st.integers(1, 200))
    return tuple(PipelineTimes(pp, 1, m, "gpipe", *draw(stage_seconds(pp))) for _ in range(2))


@settings(max_examples=200, deadline=None)
@given(gpipe_lanes())
def test_gpipe_lanes_are_the_full_walks(pair: tuple[PipelineTimes, PipelineTimes]) -> None:
    """200 random GPipe pairs per run: each lane is ``walk_pipeline`` of that replica alone,
    and the evaluation's walk (``replica_timings``) is this one."""
    times, quiet = pair
    assert gpipe_holds(times.pp, times.num_microbatches)
    fast, fast_quiet = gpipe_timings(times, quiet)
    assert_same_timing(fast, walk_pipeline(times))
    assert_same_timing(fast_quiet, walk_pipeline(quiet))
    assert replica_timings.__wrapped__(times, quiet) == (fast, fast_quiet)


def test_gpipe_by_hand() -> None:
    """Two ranks, forward 1 s and backward 2 s each, transfers of 0.5 s, three microbatches:
    rank 0's forwards end at 1, 2, 3 and arrive at 1.5, 2.5, 3.5; rank 1's end at 2.5, 3.5,
    4.5; its backwards run 4.5-6.5, 6.5-8.5, 8.5-10.5 and their gradients arrive at 7, 9, 11;
    rank 0's backwards (free from 3) run 7-9, 9-11, 11-13."""
    times = PipelineTimes(2, 1, 3, "gpipe", (1.0, 1.0), (2.0, 2.0), (0.5,))
    walked, _ = gpipe_timings(times, times)
    assert walked.last_backward_start == pytest.approx((11.0, 8.5))
    assert walked.last_backward_end == pytest.approx((13.0, 10.5))
    assert walked.end == pytest.approx(13.0)
