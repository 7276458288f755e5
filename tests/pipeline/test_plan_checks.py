"""What planners keep between checks and simulations of the same plan (issue 23, item 4): a
plan found valid is not validated again but its memory is checked every time, a deadlocking
plan is refused every time, and a fixed-order plan Late at a deadline is Late again at once."""

from __future__ import annotations

import gc
import importlib

import pytest

from dlsched.errors import ConfigError
from dlsched.hardware.device_graph import server_graph
from dlsched.pipeline import BASELINES, PipelinePlan, PipelineProblem, PlanError, Stage, simulate
from dlsched.pipeline.chains.chain import synthetic_chain
from dlsched.pipeline.chains.random_cases import random_problem
from dlsched.pipeline.plans.actions import parse_orders
from dlsched.pipeline.plans.checks import check_plan
from dlsched.pipeline.plans.schedules import one_f_one_b_orders
from dlsched.pipeline.simulation.bounds import drain_after
from dlsched.pipeline.simulation.simulate import Late

checks_module = importlib.import_module("dlsched.pipeline.plans.checks")
simulate_module = importlib.import_module("dlsched.pipeline.simulation.simulate")
STAGES = (Stage(0, 1, (0,)), Stage(1, 2, (1,)))


def _problem(memory: float = 2.0**40) -> PipelineProblem:
    """Two blocks of 1e9 stashed bytes on two GPUs of ``memory`` bytes: under 1F1B with two
    microbatches GPU 0 holds 2e9 bytes without recomputation and 1e9 with full."""
    chain = synthetic_chain([1.0, 1.0], [2.0, 2.0], [1e6, 1e6], [0.0, 0.0], [1e9, 1e9])
    return PipelineProblem(chain, server_graph("two", [(2, 1e12, memory, 1e9, 0.0)], 1e9, 0.0),
                           2)


def _counting(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[int]:
    calls: list[int] = []
    original = getattr(module, name)

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return original(*args, **kwargs)
    monkeypatch.setattr(module, name, counted)
    return calls


def test_a_valid_plan_is_validated_once_and_its_memory_checked_every_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The same stages and orders under full recomputation (1e9 bytes on GPU 0, fits 1.5e9)
    and without it (2e9, does not): validated and found to run to its end once, refused for
    memory under 'none' after being found valid under 'full'."""
    validated = _counting(monkeypatch, checks_module, "validate_plan")
    stalled = _counting(monkeypatch, checks_module, "stalled_at")
    problem = _problem(1.5e9)
    orders = one_f_one_b_orders(STAGES, 2, 2)
    full = PipelinePlan("x", STAGES, orders, 2, {}, "full")
    check_plan(problem, full, deadlock=False)
    assert (len(validated), len(stalled)) == (1, 0)
    check_plan(problem, full)
    check_plan(problem, full)
    assert (len(validated), len(stalled)) == (1, 1)
    with pytest.raises(ConfigError, match="does not fit in memory"):
        check_plan(problem, PipelinePlan("x", STAGES, orders, 2, {}, "none"))
    assert (len(validated), len(stalled)) == (1, 1)


def test_a_deadlocking_plan_is_refused_every_time() -> None:
    """GPU 0 waits for the gradient of microbatch 0 before sending microbatch 1 on, GPU 1 for
    microbatch 1 first: valid, so kept as such, but it deadlocks at every check."""
    problem = _problem()
    plan = PipelinePlan("x", STAGES,
                        parse_orders("gpu0: 0F0 0B0 0F1 0B1\ngpu1: 1F1 1B1 1F0 1B0"), 2)
    for _ in range(2):
        with pytest.raises(PlanError, match="gpu0 waits forever on 0B0"):
            check_plan(problem, plan)


def test_a_plan_late_at_a_deadline_is_late_at_an_earlier_one_without_simulating(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A fixed-order plan Late at half its time is Late at a third of it without simulating
    again; without a deadline it runs (once more) to the same time as on a fresh instance."""
    runs = _counting(monkeypatch, simulate_module._Run, "run")
    problem = _problem()
    plan = PipelinePlan("x", STAGES, one_f_one_b_orders(STAGES, 2, 2), 2)
    time = simulate(_problem(), plan).iteration_s
    assert len(runs) == 1
    for deadline in (time / 2, time / 3):
        with pytest.raises(Late):
            simulate(problem, plan, deadline)
    assert len(runs) == 2
    assert simulate(problem, plan).iteration_s == time
    assert len(runs) == 3


def test_a_gpu_that_cannot_finish_its_compute_by_the_deadline_is_late_at_its_first_start(
) -> None:
    """``_problem``: blocks of 1 s forward and 2 s backward, two microbatches: each GPU has
    6 s of compute. With a 5 s deadline the run is Late when GPU 0 starts its first action,
    at t=0 with nothing recorded (before: when a span ended after 5 s); with 6.5 s (above
    the compute, below the iteration with its waits) it stops later."""
    problem = _problem()
    orders = one_f_one_b_orders(STAGES, 2, 2)
    run = simulate_module._Run(problem, STAGES, orders, None, False, 5.0)
    with pytest.raises(Late):
        run.run()
    assert (run.engine.now, run.records) == (0.0, [])
    time = simulate(problem, PipelinePlan("x", STAGES, orders, 2)).iteration_s
    assert time > 6.5
    run = simulate_module._Run(problem, STAGES, orders, None, False, 6.5)
    with pytest.raises(Late):
        run.run()
    assert run.engine.now > 0.0


@pytest.mark.parametrize("seed", range(12))
def test_late_exactly_when_the_iteration_ends_after_the_deadline(seed: int) -> None:
    """Random instances, every baseline's plan: with a deadline at its simulated time it
    runs to that time; 1e-7 below it, Late (on a fresh instance each, nothing kept)."""
    for planner in BASELINES.values():
        try:
            plan = planner(random_problem(seed))
        except ConfigError:
            continue
        time = simulate(random_problem(seed), plan).iteration_s
        assert simulate(random_problem(seed), plan, time).iteration_s == time
        with pytest.raises(Late):
            simulate(random_problem(seed), plan, time * (1 - 1e-7))


def test_what_must_follow_a_gpus_last_action_by_hand() -> None:
    """``_problem``: GPU 1's last action is a B of stage 1, whose gradient (1e6 B at 1e9 B/s:
    1 ms) must reach GPU 0 and run its 2 s backward; nothing follows GPU 0's last B. With
    split backwards only all-reduces follow (none here: no stage is replicated)."""
    assert drain_after(_problem(), STAGES, False, False) == [0.0, pytest.approx(2.001)]
    assert drain_after(_problem(), STAGES, True, False) == [0.0, 0.0]


def _dlsched_objects(objects: list[object]) -> list[str]:
    """The objects of dlsched's own classes among ``objects`` (bound methods by their
    instance), as type names."""
    found = []
    for thing in objects:
        owner = getattr(thing, "__self__", thing)
        if type(owner).__module__.startswith("dlsched."):
            found.append(type(owner).__qualname__)
    return found


def test_a_run_stopped_late_leaves_no_cyclic_garbage() -> None:
    """Its pending events and transfers referred back to it (a cycle that waited for a full
    collection); they are dropped when it stops, so none of its objects is left for the
    collector (without that, a random instance's 1F1B plan stopped halfway left 19 of them:
    the run, its engine, network, links, ...). Only dlsched's own objects are counted:
    garbage that other code makes in the same window (a thread left by an earlier test,
    torch) is not this run's."""
    plan = BASELINES["1f1b"](random_problem(0))
    time = simulate(random_problem(0), plan).iteration_s
    problem = random_problem(0)
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        with pytest.raises(Late):
            simulate(problem, plan, time / 2)
        gc.collect()
        assert _dlsched_objects(gc.garbage) == []
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
