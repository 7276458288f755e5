"""The unit walk level by level (``job.evaluation.unit_levels``): each lane equal to the
unit-by-unit walk (``unit_program.walk_program``) of that replica on random ZB-V, DualPipe
and DualPipeV replicas (their sends, all-to-alls hidden by overlapped pairs, Megatron-Core's
merged 1F1B units), a deadlock refused, and the graph's levels counted by hand."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pipeline_strategies import assert_same_timing, stage_seconds

from dlsched.errors import ConfigError
from dlsched.job.evaluation.pipeline_walk import PipelineTimes, ReplicaTiming
from dlsched.job.evaluation.unit_levels import (
    _tables,
    level_program,
    shape_seconds,
    walk_level_lanes,
)
from dlsched.job.evaluation.unit_program import unit_program, walk_program
from dlsched.job.evaluation.unit_walk import (
    UNIT_CHUNKS,
    UnitLayout,
    UnitTimes,
    layout_of,
    stage_count,
    unit_layout,
    unit_seconds,
)
from dlsched.pipeline.plans.actions import Action
from dlsched.pipeline.plans.plan import Stage


@st.composite
def unit_lanes(draw: st.DrawFn) -> tuple[PipelineTimes, ...]:
    """Two or three random replicas of one unit schedule, degree, microbatch count and input
    fraction (DualPipe: even degree 2-8 and even count 2 pp .. 2 pp + 16; DualPipeV 2 pp ..
    2 pp + 16 on 2-8 ranks; ZB-V 1-40 on 2-8), each with its own seconds (``stage_seconds``)
    and all-to-all shares (none, or up to 40% of each chunk)."""
    schedule = draw(st.sampled_from(["zb-v", "dualpipe", "dualpipev"]))
    pp = draw(st.sampled_from([2, 4, 6, 8]) if schedule == "dualpipe" else st.integers(2, 8))
    m = (draw(st.integers(1, 40)) if schedule == "zb-v" else
         2 * pp + draw(st.integers(0, 8)) * (2 if schedule == "dualpipe" else 1))
    fraction = draw(st.floats(0.3, 0.7))
    n = stage_count(schedule, pp)
    lanes = []
    for _ in range(draw(st.integers(2, 3))):
        forward, backward, send = draw(stage_seconds(n))
        hidden = draw(st.booleans())
        share = st.floats(0.0, 0.4) if hidden else st.just(0.0)
        lanes.append(PipelineTimes(pp, UNIT_CHUNKS[schedule], m, schedule, forward, backward,
                                   send, fraction,
                                   tuple(f * draw(share) for f in forward),
                                   tuple(b * draw(share) for b in backward)))
    return tuple(lanes)


def _each_alone(lanes: tuple[PipelineTimes, ...]) -> list[ReplicaTiming]:
    program = unit_program(layout_of(lanes[0]))
    return [ReplicaTiming(*walk_program(program, (lane,), lane.schedule, unit_seconds)[0])
            for lane in lanes]


@settings(max_examples=300, deadline=None)
@given(unit_lanes())
def test_each_lane_is_the_unit_walk(lanes: tuple[PipelineTimes, ...]) -> None:
    """300 random replica sets per run: every lane's ends and last backwards are those of the
    unit-by-unit walk of that replica alone (to 1e-9: a folded chain's seconds are summed
    before they are added)."""
    program = unit_program(layout_of(lanes[0]))
    walked = walk_level_lanes(program, lanes, lanes[0].schedule, unit_seconds)
    for fast, full in zip(walked, _each_alone(lanes), strict=True):
        assert_same_timing(ReplicaTiming(*fast), full)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["1f1b", "interleaved"]), st.integers(2, 6), st.integers(1, 24),
       st.data())
def test_merged_pairs_are_the_unit_walk(schedule: str, pp: int, m: int,
                                        data: st.DataObject) -> None:
    """Megatron-Core's merged 1F1B (interleaved: two chunks, microbatches a multiple of the
    degree) priced by a random table of merged steps: each lane equal to the unit-by-unit walk."""
    chunks = 2 if schedule == "interleaved" else 1
    m = m * pp if chunks == 2 else m
    n = pp * chunks
    lanes = []
    for _ in range(2):
        forward, backward, send = data.draw(stage_seconds(n))
        comm = tuple(f * data.draw(st.floats(0.0, 0.4)) for f in forward)
        comm_back = tuple(b * data.draw(st.floats(0.0, 0.4)) for b in backward)
        table = tuple(tuple(data.draw(st.floats(0.5, 6.0)) for _ in range(n + 1))
                      for _ in range(n + 1))  # [f][b], n: none (a2a_overlap.pair_table's)
        lanes.append(PipelineTimes(pp, chunks, m, schedule, forward, backward, send, 0.5,
                                   comm, comm_back, table))
    program = unit_program(layout_of(lanes[0]))
    walked = walk_level_lanes(program, tuple(lanes), schedule, unit_seconds)
    for fast, full in zip(walked, _each_alone(tuple(lanes)), strict=True):
        assert_same_timing(ReplicaTiming(*fast), full)


@settings(max_examples=100, deadline=None)
@given(unit_lanes())
def test_shapes_priced_at_once_are_unit_seconds(lanes: tuple[PipelineTimes, ...]) -> None:
    """Every unit shape of the layout (single actions, full backwards I W, overlapped pairs F
    & I W hiding their all-to-alls): ``shape_seconds`` is ``unit_seconds`` (the same products
    and sums in the same order, so bit for bit)."""
    program = unit_program(layout_of(lanes[0]))
    for lane in lanes:
        assert shape_seconds(program, _tables(program)[0], lane).tolist() == [
            unit_seconds(lane, unit) for unit in program.shapes]


def test_levels_by_hand() -> None:
    """ZB-V on 2 ranks, 1 microbatch (stages 0 1 | 2 3 in a V; F 1 s, I = W = 1 s, sends
    0.1 s): rank 0 runs F0 F3 I3 W3 I0 W0, rank 1 F1 F2 I2 W2 I1 W1. A unit read by its
    successors only through one predecessor (F0 after nothing, F2 after F1 on its rank, I3
    after its F3, each W after its I) is folded into what reads it, and a transfer's arrival
    read as max(unit + hop, stream + hop), so the levels are F0, F1, F3, I2, I1, I0, W0: 7
    (14 nodes deep walked one by one with a node per transfer). The end by hand: 1 + 0.1 + 1
    + 1 + 0.1 + 1 + 1 + 0.1 + 1 + 1 + 1 + 0.1 + 1 + 1 = 10.4 s (rank 0's W0; rank 1 ends at
    9.3 s), rank 1's last backward (W1) 8.3-9.3 s."""
    times = UnitTimes("zb-v", 2, 1, (1.0,) * 4, (2.0,) * 4, (0.1,) * 3, 0.5)
    program = unit_program(unit_layout("zb-v", 2, 1))
    levels = level_program(program, ((True,) * 3, (True,) * 3), "zb-v")
    assert len(levels.levels) == 7
    (start, end, last), _ = walk_level_lanes(program, (times, times), "zb-v", unit_seconds)
    assert last == pytest.approx(10.4)
    assert (start[1], end[1]) == pytest.approx((8.3, 9.3))
    assert (start[0], end[0]) == pytest.approx((9.4, 10.4))


def test_a_deadlock_is_refused() -> None:
    """Two ranks each first running the backward that waits for the other's forward: the
    graph cannot be built, and the error names the deadlock as the unit walk's does."""
    stages = (Stage(0, 1, (0,)), Stage(1, 2, (1,)))
    orders = ((Action(0, "B", 0), Action(0, "F", 0)), (Action(1, "F", 0), Action(1, "B", 0)))
    program = unit_program(UnitLayout(stages, orders, (frozenset(), frozenset())))
    times = UnitTimes("zb-v", 2, 1, (1.0, 1.0), (2.0, 2.0), (0.1,), 1.0)
    with pytest.raises(ConfigError, match="zb-v orders deadlock"):
        walk_level_lanes(program, (times,), "zb-v", unit_seconds)
