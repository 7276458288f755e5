"""The interleaved schedule walked round by round with every rank at once
(``interleaved_rounds``): its rounds are the schedule's orders (every input made the round
before), both lanes equal the full walk of each on random replicas, and the periods past a
repeat are not walked."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pipeline_strategies import assert_same_timing, stage_seconds

from dlsched.job.evaluation import interleaved_rounds, pipeline_steady
from dlsched.job.evaluation.interleaved_rounds import _read, interleaved_timings, round_table
from dlsched.job.evaluation.pipeline_steady import replica_timings
from dlsched.job.evaluation.pipeline_walk import PipelineTimes, ReplicaTiming, walk_pipeline


def test_the_rounds_hold_from_two_microbatches_per_rank() -> None:
    """Every degree 2-8, 2 and 3 chunks, 1-24 microbatches per rank: rounds from 2 per rank
    on (with one per rank Megatron's warm-up runs every forward first: another order), none
    for a count that is not a multiple of the ranks; a table extended by whole periods is
    the one read off the longer orders; the 1T benchmark's replica (64 ranks, 384) has one."""
    for pp in range(2, 9):
        for chunks in (2, 3):
            for per_rank in range(1, 25):
                table = round_table(pp, chunks, pp * per_rank)
                assert (table is None) == (per_rank == 1), (pp, chunks, per_rank)
            assert round_table(pp, chunks, 2 * pp + 1) is None
    assert round_table(4, 2, 48).same(_read(4, 2, 48))
    table = round_table(64, 2, 384)
    assert table is not None and table.period == 128  # p microbatches of both chunks


@st.composite
def interleaved_lanes(draw: st.DrawFn) -> tuple[PipelineTimes, PipelineTimes]:
    """Two random interleaved replicas of one degree (2-8), chunk count (2-3) and microbatch
    count (2-24 per rank), each with its own seconds (``stage_seconds``)."""
    pp = draw(st.integers(2, 8))
    chunks = draw(st.integers(2, 3))
    m = pp * draw(st.integers(2, 24))
    return tuple(PipelineTimes(pp, chunks, m, "interleaved", *draw(stage_seconds(pp * chunks)))
                 for _ in range(2))


@settings(max_examples=300, deadline=None)
@given(interleaved_lanes())
def test_both_lanes_are_the_full_walks(pair: tuple[PipelineTimes, PipelineTimes]) -> None:
    """300 random pairs per run: each lane is ``walk_pipeline`` of that replica alone."""
    times, quiet = pair
    fast, fast_quiet = interleaved_timings(times, quiet)
    assert_same_timing(fast, walk_pipeline(times))
    assert_same_timing(fast_quiet, walk_pipeline(quiet))


def _rounds_walked_by(walk: Callable[..., tuple[ReplicaTiming, ...]], times: PipelineTimes,
                      monkeypatch: pytest.MonkeyPatch, quiet: PipelineTimes | None = None
                      ) -> tuple[int, tuple[ReplicaTiming, ...]]:
    """Rounds of this module's walk that ``walk`` of the pair runs, and its timings."""
    count = [0]
    step = interleaved_rounds._Lanes.round

    def counted(self: interleaved_rounds._Lanes, *arguments: object) -> None:
        count[0] += 1
        step(self, *arguments)

    monkeypatch.setattr(interleaved_rounds._Lanes, "round", counted)
    timings = walk(times, times if quiet is None else quiet)
    monkeypatch.setattr(interleaved_rounds._Lanes, "round", step)
    return count[0], timings


def _rounds_walked(times: PipelineTimes, quiet: PipelineTimes,
                   monkeypatch: pytest.MonkeyPatch) -> tuple[int, tuple[ReplicaTiming, ...]]:
    """Rounds the walk runs for the pair, and its timings."""
    return _rounds_walked_by(interleaved_timings, times, monkeypatch, quiet)


@pytest.mark.parametrize("pp", [4, 8, 16])
def test_the_periods_past_a_repeat_are_not_walked(pp: int,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A model's replica (2 chunks, first and last stage 1.3x the others, transfers of 0.1)
    beside the same without transfers: at 40 and 400 microbatches per rank the same rounds
    are walked, fewer than the orders hold at 40, and both lanes are the full walks'."""
    n = 2 * pp
    forward = tuple(1.3 if s in (0, n - 1) else 1.0 for s in range(n))
    backward = tuple(2.1 * f for f in forward)
    walked = []
    for m in (40 * pp, 400 * pp):
        times = PipelineTimes(pp, 2, m, "interleaved", forward, backward, (0.1,) * (n - 1))
        quiet = PipelineTimes(pp, 2, m, "interleaved", forward, backward, (0.0,) * (n - 1))
        rounds, (fast, fast_quiet) = _rounds_walked(times, quiet, monkeypatch)
        walked.append(rounds)
        assert_same_timing(fast, walk_pipeline(times))
        assert_same_timing(fast_quiet, walk_pipeline(quiet))
        assert fast.end > fast_quiet.end
    table = round_table(pp, 2, 40 * pp)
    assert walked[0] == walked[1] < table.last - table.first + 1


def test_replica_timings_walks_interleaving_here_from_16_ranks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The evaluation's walk (``replica_timings``) of an interleaved pair is this walk's from
    ``ROUNDS_FROM_PP`` ranks (16), ``pipeline_steady``'s below: the same timing both ways."""
    for pp in (8, 16):
        n = 2 * pp
        times = PipelineTimes(pp, 2, 4 * pp, "interleaved", tuple(1.0 + s / n for s in range(n)),
                              tuple(2.0 + s / n for s in range(n)), (0.05,) * (n - 1))
        rounds, mine = _rounds_walked(times, times, monkeypatch)
        assert rounds > 0
        calls, walked = _rounds_walked_by(replica_timings.__wrapped__, times, monkeypatch)
        assert (calls > 0) == (pp >= pipeline_steady.ROUNDS_FROM_PP)
        assert_same_timing(walked[0], mine[0])
