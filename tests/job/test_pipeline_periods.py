"""The steady state of a pipeline's orders and the walk that computes it once: the periodic
structure expands to the schedules' own orders exactly, the two-lane walk equals the full walk
of each lane on random replicas, and its work does not grow with the microbatches."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pipeline_strategies import assert_same_timing

from dlsched.errors import ConfigError
from dlsched.job.evaluation import pipeline_steady
from dlsched.job.evaluation.pipeline_orders import coded_orders, periodic_orders
from dlsched.job.evaluation.pipeline_steady import fast_pipeline, replica_timings
from dlsched.job.evaluation.pipeline_walk import PipelineTimes, walk_pipeline


@pytest.mark.parametrize("schedule, chunks", [("1f1b", 1), ("zb-h1", 1), ("interleaved", 2),
                                              ("interleaved", 3), ("gpipe", 1), ("zb-v", 2)])
def test_the_structure_expands_to_the_schedule_orders(schedule: str, chunks: int) -> None:
    """Every degree 1-6 (2-6 interleaved and ZB-V) and microbatch count up to 30 with a
    structure: prefix + rounds + shifted suffix is ``rank_orders`` action for action; 1F1B
    and ZB-H1 have one from ``pp - 1`` microbatches on, ZB-V from ``2 pp - 1``, the
    interleaved schedule for multiples of pp from ``2 pp``, GPipe none (two places grow per
    rank)."""
    found = 0
    for pp in range(2 if schedule in ("interleaved", "zb-v") else 1, 7):
        for m in range(1, 31):
            structure = periodic_orders(schedule, pp, chunks, m)
            if structure is None:
                first = 2 * pp - 1 if schedule == "zb-v" else 2 * pp
                assert schedule == "gpipe" or m < first or m % pp, (pp, m)
                continue
            found += 1
            assert structure.expand(m) == coded_orders(schedule, pp, chunks, m), (pp, m)
    assert (found == 0) == (schedule == "gpipe")


def _lane(draw: st.DrawFn, n: int) -> tuple[tuple[float, ...], ...]:
    """Stage forwards, backwards and sends of ``n`` stages: equal (as a model's middle layers
    are) or each its own time, sends none, equal or each its own."""
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
    return forward, backward, send


@st.composite
def lanes(draw: st.DrawFn) -> tuple[PipelineTimes, PipelineTimes]:
    """Two random replicas of one schedule, degree and microbatch count (many microbatches),
    each with its own stage seconds and sends (``_lane``)."""
    schedule = draw(st.sampled_from(["1f1b", "zb-h1", "interleaved", "gpipe", "zb-v"]))
    pp = draw(st.integers(2 if schedule in ("interleaved", "zb-v") else 1, 8))
    chunks = draw(st.integers(2, 3)) if schedule == "interleaved" else \
        2 if schedule == "zb-v" else 1
    m = pp * draw(st.integers(1, 24)) if schedule == "interleaved" else draw(st.integers(1, 160))
    fraction = draw(st.floats(0.3, 0.7))
    return tuple(PipelineTimes(pp, chunks, m, schedule, *_lane(draw, pp * chunks), fraction)
                 for _ in range(2))


@settings(max_examples=300, deadline=None)
@given(lanes())
def test_one_walk_gives_the_full_walk_of_each_lane(pair: tuple[PipelineTimes, PipelineTimes]
                                                   ) -> None:
    """300 random pairs per run (1F1B, ZB-H1, interleaved, GPipe, ZB-V): each lane of the one
    walk is the full walk of that lane's replica alone (``walk_pipeline``; ZB-V's the unit
    walk's), to 1e-9."""
    times, quiet = pair
    fast, fast_quiet = replica_timings.__wrapped__(times, quiet)
    assert_same_timing(fast, walk_pipeline(times))
    assert_same_timing(fast_quiet, walk_pipeline(quiet))


@pytest.mark.parametrize("schedule, chunks", [("1f1b", 1), ("zb-h1", 1), ("interleaved", 2),
                                              ("zb-v", 2)])
def test_the_skipped_rounds_are_those_of_a_model_replica(schedule: str, chunks: int) -> None:
    """A model's replica (first and last stage heavier, transfers) beside the same without
    transfers, as an evaluation walks them, at 8-32 stages and 4-40 rounds of microbatches:
    both lanes are the full walks', and the walk reads the rounds past the repeat off the
    walked ones (``_skippable``) rather than walking them."""
    for pp in (8, 16, 32):
        n = pp * chunks
        forward = tuple(1.3 if s in (0, n - 1) else 1.0 for s in range(n))
        backward = tuple(2.1 * f for f in forward)
        for m in (4 * pp, 40 * pp):
            times = PipelineTimes(pp, chunks, m, schedule, forward, backward, (0.1,) * (n - 1))
            quiet = PipelineTimes(pp, chunks, m, schedule, forward, backward, (0.0,) * (n - 1))
            structure = periodic_orders(schedule, pp, chunks, m)
            assert structure is not None
            assert pipeline_steady._skippable(structure, pipeline_steady._Lanes(times, quiet))
            fast, fast_quiet = replica_timings.__wrapped__(times, quiet)
            assert_same_timing(fast, walk_pipeline(times))
            assert_same_timing(fast_quiet, walk_pipeline(quiet))
            assert fast.end > fast_quiet.end  # the transfers cost something


def test_the_lanes_must_share_their_schedule() -> None:
    """Two replicas of different microbatch counts are not two lanes of one walk."""
    one = PipelineTimes(2, 1, 4, "1f1b", (1.0, 1.0), (2.0, 2.0), (0.1,))
    with pytest.raises(ConfigError, match="two lanes"):
        replica_timings(one, PipelineTimes(2, 1, 8, "1f1b", (1.0, 1.0), (2.0, 2.0), (0.1,)))


def _walked(times: PipelineTimes, monkeypatch: pytest.MonkeyPatch) -> int:
    """Actions the two-lane walk runs for ``times`` (from where each rank's phase starts)."""
    count = [0]
    run = pipeline_steady._Lanes.run

    def counted(self: pipeline_steady._Lanes, orders: tuple, schedule: str,
                start: tuple[int, ...] | None = None, lookup: object = None,
                later: int = 0) -> None:
        count[0] += sum(len(order) - (start[r] if start else 0)
                        for r, order in enumerate(orders))
        run(self, orders, schedule, start, lookup, later)

    monkeypatch.setattr(pipeline_steady._Lanes, "run", counted)
    replica_timings.__wrapped__(times, times)
    monkeypatch.setattr(pipeline_steady._Lanes, "run", run)
    return count[0]


@pytest.mark.parametrize("schedule, chunks", [("1f1b", 1), ("interleaved", 2)])
def test_the_work_does_not_grow_with_the_microbatches(schedule: str, chunks: int,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A model's replica (first and last stage heavier: embedding, loss; transfers): the same
    actions are walked for 64 and for 6,400 microbatches (not 100x), far fewer than the full
    orders hold, and the timing is the full walk's. (ZB-H1 is walked round by round with
    every rank at once: ``test_pipeline_rounds``.)"""
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


@pytest.mark.parametrize("pp", [4, 8, 16])
def test_1f1b_walks_its_warm_up_and_cool_down_once(pp: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A model's 1F1B replica walks its warm-up and cool-down (``p (p - 1) / 2`` actions each)
    and whole rounds of ``2 p`` actions until the state repeats, no more: the ``r`` rounds rank
    ``r`` runs after rank 0 has left the steady state are read off the walked ones (they were
    walked before, ``p (p - 1)`` actions more)."""
    forward = tuple(1.3 if s in (0, pp - 1) else 1.0 for s in range(pp))
    times = PipelineTimes(pp, 1, 40 * pp, "1f1b", forward, tuple(2 * f for f in forward),
                          (0.1,) * (pp - 1))
    rounds, left = divmod(_walked(times, monkeypatch) - pp * (pp - 1), 2 * pp)
    assert left == 0
    assert 1 <= rounds <= pp // pipeline_steady.TRANSIENT_SHARE + pipeline_steady.MAX_CYCLE
