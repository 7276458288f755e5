"""The unit walk's compiled program (``job.evaluation.unit_program``): one entry per unit of the
layout, its counts of each shape adding up to each rank's units, the bound they give equal to
the units summed one after another, and a deadlock refused as the walk refused it."""

from __future__ import annotations

import random

import pytest

from dlsched.errors import ConfigError
from dlsched.job.evaluation.unit_program import UnitProgram, unit_program, walk_program
from dlsched.job.evaluation.unit_walk import (
    UNIT_SCHEDULES,
    UnitLayout,
    UnitTimes,
    rank_units,
    stage_count,
    unit_bound,
    unit_layout,
    unit_seconds,
)
from dlsched.pipeline.plans.actions import Action


@pytest.mark.parametrize("schedule", UNIT_SCHEDULES)
def test_counts_and_bound_are_the_units(schedule: str) -> None:
    """Random replicas at 2-6 ranks: a step per unit of the unit's shape, each rank's shape
    counts adding up to its units, and ``unit_bound`` the busiest rank's units summed one by
    one (to 1e-12)."""
    rng = random.Random(schedule)
    for pp in (2, 4, 6):
        m = 2 * pp + 2
        n = stage_count(schedule, pp)
        times = UnitTimes(schedule, pp, m, tuple(rng.uniform(0.5, 2) for _ in range(n)),
                          tuple(rng.uniform(1, 4) for _ in range(n)), (0.1,) * (n - 1), 0.4)
        program = unit_program(unit_layout(schedule, pp, m))
        assert program is unit_program(unit_layout(schedule, pp, m))  # kept
        for rank in range(pp):
            units = rank_units(times, rank)
            assert len(program.steps[rank]) == len(units) == sum(program.counts[rank])
            assert [tuple((a.kind, a.stage) for a in program.shapes[step[2]])
                    for step in program.steps[rank]] == [
                tuple((a.kind, a.stage) for a in unit) for unit in units]  # each unit's shape
        by_hand = max(sum(unit_seconds(times, unit) for unit in rank_units(times, rank))
                      for rank in range(pp))
        assert unit_bound(times) == pytest.approx(by_hand, rel=1e-12)


def test_a_unit_waiting_for_a_later_one_is_refused() -> None:
    """Two ranks each running first the backward that waits for the other's forward: the
    walk stops with the deadlock named, as the action-by-action walk did."""
    from dlsched.pipeline.plans.plan import Stage

    stages = (Stage(0, 1, (0,)), Stage(1, 2, (1,)))
    orders = ((Action(0, "B", 0), Action(0, "F", 0)), (Action(1, "F", 0), Action(1, "B", 0)))
    layout = UnitLayout(stages, orders, (frozenset(), frozenset()))
    program: UnitProgram = unit_program(layout)
    times = UnitTimes("zb-v", 2, 1, (1.0, 1.0), (2.0, 2.0), (0.1,), 1.0)
    with pytest.raises(ConfigError, match="deadlock"):
        walk_program(program, (times,), "zb-v", unit_seconds)
