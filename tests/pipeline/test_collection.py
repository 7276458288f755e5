"""fewer_collections: full collections put off inside, thresholds restored after."""

from __future__ import annotations

import gc

import pytest
from pipeline_cases import uniform_problem

from dlsched.pipeline.planners.baselines import plan_1f1b
from dlsched.pipeline.planners.collection import FULL_THRESHOLD, fewer_collections
from dlsched.pipeline.registry import run_planner


@pytest.fixture
def thresholds():
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def test_full_threshold_raised_inside_and_restored_after(thresholds):
    gc.set_threshold(700, 10, 10)
    with fewer_collections():
        assert gc.get_threshold() == (700, 10, FULL_THRESHOLD)
        with fewer_collections():  # nested: still raised, then back to the outer's
            assert gc.get_threshold() == (700, 10, FULL_THRESHOLD)
        assert gc.get_threshold() == (700, 10, FULL_THRESHOLD)
    assert gc.get_threshold() == (700, 10, 10)


def test_restored_after_an_error(thresholds):
    gc.set_threshold(500, 7, 3)
    with pytest.raises(RuntimeError), fewer_collections(full=50):
        assert gc.get_threshold() == (500, 7, 50)
        raise RuntimeError
    assert gc.get_threshold() == (500, 7, 3)


def test_never_lowers_a_threshold_nor_turns_collection_on(thresholds):
    gc.set_threshold(700, 10, 5000)
    with fewer_collections(full=100):
        assert gc.get_threshold() == (700, 10, 5000)
    gc.set_threshold(0, 10, 10)
    with fewer_collections():
        assert gc.get_threshold() == (0, 10, 10)
    assert gc.get_threshold() == (0, 10, 10)


def test_run_planner_plans_with_full_collections_put_off(thresholds):
    gc.set_threshold(700, 10, 10)
    seen = []

    def planner(problem):
        seen.append(gc.get_threshold())
        return plan_1f1b(problem)

    result = run_planner(uniform_problem(2, 4), "1f1b", planner)
    assert seen == [(700, 10, FULL_THRESHOLD)]
    assert gc.get_threshold() == (700, 10, 10)
    assert result.sim.iteration_s > 0

