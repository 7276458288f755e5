"""Every policy: valid plans, never below the bound, never below the exact optimum."""

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.dataparallel import POLICIES, AlphaBeta, DPProblem, run_dataparallel
from dlsched.dataparallel.oracle import MAX_UNITS, optimal_plan
from dlsched.dataparallel.plan import validate_plan
from dlsched.dataparallel.simulate import iteration_time

MiB = 2**20
UNIT = 4 * MiB  # US-Byte's 1M-element unit; test gradients are multiples of it


@st.composite
def problems(draw, max_layers=6, max_units=3, unit=UNIT):
    layers = draw(st.integers(1, max_layers))
    times = st.floats(0.05e-3, 8e-3)
    grads = draw(st.lists(st.integers(0, max_units), min_size=layers, max_size=layers))
    grads[0] = max(grads[0], 1)
    alpha = draw(st.floats(0.05e-3, 3e-3))
    beta = draw(st.sampled_from([1e-11, 6e-11, 3e-10]))
    return DPProblem(tuple(draw(st.lists(times, min_size=layers, max_size=layers))),
                     tuple(draw(st.lists(times, min_size=layers, max_size=layers))),
                     tuple(g * unit for g in grads), AlphaBeta(alpha, beta))


@settings(max_examples=40, deadline=None)
@given(problem=problems())
def test_every_policy_is_valid_and_above_the_bound(problem):
    """Plans pass the validator and the simulated time is never below the lower bound."""
    for name in POLICIES:
        result = run_dataparallel(problem, name)
        validate_plan(problem, result.plan)
        assert result.time_s >= result.bound_s * (1 - 1e-9), name


def grid_of(problem: DPProblem, plan) -> int:
    """The coarsest unit (bytes) every block boundary of ``plan`` falls on (a layer's end
    counts as on the grid): the oracle's optimum over it is <= the plan."""
    cuts = [MiB]
    for msg in plan.messages:
        for block in msg.blocks:
            cuts.append(block.offset)
            if block.offset + block.length < problem.grad_bytes[block.layer]:
                cuts.append(block.offset + block.length)
    return math.gcd(*cuts)


@settings(max_examples=30, deadline=None)
@given(problem=problems(max_layers=4, max_units=2, unit=MiB))
def test_optimum_is_below_every_policy_and_ours_is_near_it(problem):
    """The exact optimum over a grid holding every block boundary of a policy's plan is <= that
    policy, and the 1 MiB optimum >= the bound (ByteScheduler's smallest partition is 1 MiB;
    dlsched's last sweep halves messages, so its blocks may fall between: its plan is then
    compared with the optimum on its own finer grid when that search is small enough).
    dlsched stays within 10% of the 1 MiB optimum: its worst case found so far is 5.2%, an
    instance where the optimum leaves the network idle so that a late-needed layer does not
    block urgent ones, which no greedy gap filler does. Average gaps are checked on a seeded
    set below."""
    optimum = optimal_plan(problem, MiB)
    validate_plan(problem, optimum)
    best = iteration_time(problem, optimum)
    assert best >= run_dataparallel(problem, "wfbp").bound_s * (1 - 1e-9)
    results = {name: run_dataparallel(problem, name) for name in POLICIES}
    for name, result in results.items():
        unit = grid_of(problem, result.plan)
        if sum(math.ceil(b / unit) for b in problem.grad_bytes) > MAX_UNITS:
            continue  # a grid too fine for the exhaustive search
        floor = best if unit == MiB else iteration_time(problem, optimal_plan(problem, unit))
        assert result.time_s >= floor * (1 - 1e-9), name
    assert results["dlsched"].time_s <= best * 1.10


def test_a_halved_message_can_beat_the_coarser_grid_but_not_its_own():
    """The case hypothesis found: layer 1's 1 MiB ready first, layer 0's 1 MiB 2 ms later (alpha
    1.75 ms): dlsched sends half of layer 1, layer 0, then the other half, 0.3% below the 1 MiB
    grid's optimum; on the 512 KiB grid its plan lies on, the optimum is <= it."""
    problem = DPProblem((0.001953125, 0.0078125, 0.0078125), (0.001953125, 0.0078125, 0.0078125),
                        (MiB, MiB, 0), AlphaBeta(0.0017511366766084274, 3e-10))
    result = run_dataparallel(problem, "dlsched")
    coarse = iteration_time(problem, optimal_plan(problem, MiB))
    fine = iteration_time(problem, optimal_plan(problem, MiB // 2))
    assert grid_of(problem, result.plan) == MiB // 2
    assert fine <= result.time_s * (1 + 1e-9) and result.time_s < coarse


def test_dlsched_halves_a_large_message_for_an_urgent_one():
    """The case hypothesis found 12.3% above the optimum: layer 1's 2 MiB is ready at 50 us,
    layer 0's 1 MiB at 170.2 us (alpha 50 us, 60 ps/B). Sending layer 1 whole first holds layer
    0 until 339 us; the optimum sends half of layer 1, then layer 0 (170.2 + 50 + 62.9 us),
    then the other half while layer 0's forward runs: 283.1 + 120.2 + 50 = 453.3 us, which
    dlsched now reaches (its last sweep halves a message and defers the rest)."""
    problem = DPProblem((120.2e-6, 50e-6), (120.2e-6, 50e-6), (MiB, 2 * MiB),
                        AlphaBeta(50e-6, 6e-11))
    expected = 170.2e-6 + 50e-6 + 6e-11 * MiB + 120.2e-6 + 50e-6
    assert iteration_time(problem, optimal_plan(problem, MiB)) == pytest.approx(expected)
    assert run_dataparallel(problem, "dlsched").time_s == pytest.approx(expected)
    assert run_dataparallel(problem, "usbyte").time_s > 1.1 * expected


def test_usbyte_is_within_a_few_percent_of_the_optimum_on_average():
    """60 seeded random 2-4 layer instances: US-Byte averages within 3% of the optimum
    (measured 0.66%), dlsched within 1% (measured 0.04%)."""
    rng = random.Random(0)
    gaps: dict[str, list[float]] = {"usbyte": [], "dlsched": []}
    for _ in range(60):
        layers = rng.randint(2, 4)
        problem = DPProblem(
            tuple(rng.uniform(0.2e-3, 8e-3) for _ in range(layers)),
            tuple(rng.uniform(0.2e-3, 8e-3) for _ in range(layers)),
            tuple(rng.randint(1, 2) * UNIT for _ in range(layers)),
            AlphaBeta(rng.uniform(0.1e-3, 2e-3), rng.choice([1e-11, 6e-11, 3e-10])))
        best = iteration_time(problem, optimal_plan(problem, UNIT))
        for name, values in gaps.items():
            values.append(run_dataparallel(problem, name).time_s / best)
    assert sum(gaps["usbyte"]) / 60 <= 1.03
    assert sum(gaps["dlsched"]) / 60 <= 1.01


@settings(max_examples=25, deadline=None)
@given(problem=problems())
def test_dlsched_never_slower_than_any_policy(problem):
    """The fused search keeps every baseline's order as a candidate."""
    ours = run_dataparallel(problem, "dlsched").time_s
    for name in POLICIES:
        assert ours <= run_dataparallel(problem, name).time_s * (1 + 1e-12), name


def test_determinism():
    """Same problem, same plan and timeline."""
    problem = DPProblem((1e-3,) * 4, (2e-3,) * 4, (UNIT, 2 * UNIT, UNIT, 3 * UNIT),
                        AlphaBeta(1e-3, 6e-11))
    for name in POLICIES:
        first, second = run_dataparallel(problem, name), run_dataparallel(problem, name)
        assert first.plan == second.plan
        assert first.timeline.spans == second.timeline.spans


def test_unknown_policy():
    """Unknown policy names list the accepted ones."""
    problem = DPProblem((1e-3,), (1e-3,), (UNIT,), AlphaBeta(1e-3, 1e-10))
    with pytest.raises(ValueError, match="usbyte"):
        run_dataparallel(problem, "magic")


def test_cached_plans_equal_fresh_ones():
    """Plans reused from the per-problem cache equal plans made after clearing it; one layer
    per group gives back the problem itself (so dlsched reuses US-Byte's plan)."""
    from dlsched.dataparallel.policies import clear_plan_caches
    from dlsched.dataparallel.policies.fused import grouped_problem

    problem = DPProblem((1e-3,) * 4, (2e-3,) * 4, (UNIT, 2 * UNIT, 0, 3 * UNIT),
                        AlphaBeta(1e-3, 6e-11), in_flight=2)
    assert grouped_problem(problem, [[k] for k in range(4)]) == problem
    cached = {name: run_dataparallel(problem, name).plan for name in POLICIES}
    clear_plan_caches()
    assert cached == {name: run_dataparallel(problem, name).plan for name in POLICIES}
