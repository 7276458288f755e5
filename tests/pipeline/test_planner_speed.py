"""The planner speed work (issue 23, item 4) changes no plan: the same plans as before it on
seeded random instances (recorded at commit be5aa23), and the pieces that make it faster are
exact — a deadlock found without simulating is the simulator's, pruning by the lower bound
keeps the selection, the banded partition DP covers every stage that fits and finds the
brute-force optimum."""

from __future__ import annotations

import importlib
import itertools
import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
from benchmarks.planner_cases import fingerprint

from dlsched.errors import ConfigError
from dlsched.hardware.device_graph import server_graph
from dlsched.pipeline import BASELINES, PipelineProblem, PlanError, Stage, simulate
from dlsched.pipeline.chains.chain import synthetic_chain
from dlsched.pipeline.chains.random_cases import random_problem
from dlsched.pipeline.planners import grid as grid_module
from dlsched.pipeline.planners.baselines import plan_1f1b
from dlsched.pipeline.planners.grid import grid_points, point_stages
from dlsched.pipeline.planners.partition import range_costs, sync_dp
from dlsched.pipeline.planners.planner import plan_dlsched, propose_partitions, schedule_candidates
from dlsched.pipeline.planners.pruning import Candidate, evaluate
from dlsched.pipeline.plans.actions import parse_orders
from dlsched.pipeline.plans.checks import check_plan
from dlsched.pipeline.plans.deadlock import parts_from
from dlsched.pipeline.plans.plan import PipelinePlan, overlap
from dlsched.pipeline.plans.schedules import backward_first_dispatch, one_f_one_b_orders
from dlsched.pipeline.simulation.simulate import Late, list_schedule

simulate_module = importlib.import_module("dlsched.pipeline.simulation.simulate")
plan_module = importlib.import_module("dlsched.pipeline.plans.plan")
partition_module = importlib.import_module("dlsched.pipeline.planners.partition")

BEFORE = json.loads((Path(__file__).parent / "data" / "planner_random_before.json").read_text())


@pytest.mark.parametrize("seed", range(0, 40, 3))
def test_plans_identical_to_before_the_speed_work(seed: int) -> None:
    """Every planner's plan (stages, orders, TP, recomputation), iteration time (bit for bit),
    notes and refusal equal the record made before the speed work."""
    problem = random_problem(seed)
    record = BEFORE[f"random {seed}"]
    plans = {}
    for name, planner in BASELINES.items():
        if name not in record:  # DualPipe and DualPipeV came after it (issue 50)
            continue
        try:
            plans[name] = planner(problem)
        except ConfigError as error:
            assert record[name]["error"] == str(error).splitlines()[0], name
            continue
        _same(problem, plans[name], record[name])
    try:
        ours = plan_dlsched(problem, {n: (lambda _, p=p: p) for n, p in plans.items()})
    except ConfigError as error:
        assert record["dlsched"]["error"] == str(error).splitlines()[0]
        return
    _same(problem, ours, record["dlsched"])


def _same(problem: PipelineProblem, plan: PipelinePlan, recorded: dict) -> None:
    assert recorded["plan"] == fingerprint(plan), plan.planner
    assert recorded["iteration_s"] == simulate(problem, plan).iteration_s, plan.planner
    assert recorded["notes"] == {key: str(value) for key, value in plan.notes.items()}


def _two_stage_problem() -> PipelineProblem:
    chain = synthetic_chain([1.0, 1.0], [2.0, 2.0], [0.0, 0.0])
    graph = server_graph("two", [(2, 1e12, 2**40, 1e9, 0.0)], 1e9, 0.0)
    return PipelineProblem(chain, graph, 2)


def test_parts_received_counted_once_per_replica_as_per_microbatch() -> None:
    """``parts_from`` (kept per stage pair and replica) equals counting, for every
    microbatch, the sending replicas of that microbatch whose part overlaps the receiver's,
    for split and unsplit stages of 1-4 replicas."""
    for senders, receivers in itertools.product(range(1, 5), repeat=2):
        for split_a, split_b in itertools.product((False, True), repeat=2):
            stages = (Stage(0, 1, tuple(range(senders)), split_a),
                      Stage(1, 2, tuple(range(senders, senders + receivers)), split_b))
            for source, target in ((0, 1), (1, 0)):
                for dst in stages[target].devices:
                    theirs = stages[target].part(dst)
                    for j in range(6):
                        count = sum(1 for d in stages[source].devices_for(j)
                                    if overlap(stages[source].part(d), theirs) > 0)
                        assert parts_from(stages, source, target, dst) == count


def test_deadlock_found_without_simulating() -> None:
    """GPU 0 waits for the gradient of microbatch 0 before sending microbatch 1 on, while GPU 1
    waits for microbatch 1 first: check_plan names the same GPU and action as the simulator."""
    problem = _two_stage_problem()
    plan = PipelinePlan("x", (Stage(0, 1, (0,)), Stage(1, 2, (1,))),
                        parse_orders("gpu0: 0F0 0B0 0F1 0B1\ngpu1: 1F1 1B1 1F0 1B0"), 2)
    with pytest.raises(PlanError) as simulated:
        simulate(problem, plan)
    with pytest.raises(PlanError) as checked:
        check_plan(problem, plan)
    assert str(checked.value) == str(simulated.value)
    assert "gpu0 waits forever on 0B0" in str(checked.value)


def test_deadlock_check_agrees_with_the_simulator_on_shuffled_orders() -> None:
    """Baseline plans of random instances with their per-GPU orders shuffled (F before B/I
    before W kept per microbatch): refused with the same message, or run, by both."""
    shuffle, checked = random.Random(0), 0
    for problem, plan in _baseline_plans(range(12)):
        for _ in range(3):
            shuffled = replace(plan, orders=tuple(_shuffled(order, shuffle)
                                                  for order in plan.orders))
            try:
                simulate(problem, shuffled)
                simulated = ""
            except PlanError as error:
                simulated = str(error)
            except ConfigError:
                continue  # memory: refused before running, by both
            try:
                check_plan(problem, shuffled)
                found = ""
            except PlanError as error:
                found = str(error)
            assert found == simulated
            checked += 1
    assert checked > 100


def _baseline_plans(seeds: range) -> Iterator[tuple[PipelineProblem, PipelinePlan]]:
    """(instance, plan) for every baseline's plan of the random instances ``seeds``; a
    baseline that refuses an instance is skipped."""
    for seed in seeds:
        problem = random_problem(seed)
        for planner in BASELINES.values():
            try:
                yield problem, planner(problem)
            except ConfigError:
                continue


def _shuffled(order: tuple, shuffle: random.Random) -> tuple:
    """The actions of ``order`` in a random order, each microbatch's F, B/I, W kept in turn."""
    positions = list(order)
    shuffle.shuffle(positions)
    rank = {"F": 0, "B": 1, "I": 1, "W": 2}
    per_microbatch: dict[tuple[int, int], list] = {}
    for action in sorted(order, key=lambda a: rank[a.kind]):
        per_microbatch.setdefault((action.stage, action.microbatch), []).append(action)
    taken = {key: iter(actions) for key, actions in per_microbatch.items()}
    return tuple(next(taken[(a.stage, a.microbatch)]) for a in positions)


@dataclass(frozen=True)
class _Result:
    iteration_s: float


def test_pruning_keeps_the_selection_and_skips_hopeless_candidates() -> None:
    """Random times with bounds below them: the first-fastest over the simulated candidates
    (in their own order) is the first-fastest over all, and the kept groups' times too;
    candidates whose bound is above the kept times are never run, and one run past its
    deadline (Late) ends after the kept times."""
    rng = np.random.default_rng(1)
    for _ in range(200):
        times = rng.choice([1.0, 1.5, 2.0, 3.0, 5.0], size=12)
        bounds = times * rng.uniform(0.5, 1.0, size=12)
        groups = rng.integers(0, 4, size=12)
        for keep in (1, 2):
            ran: list[int] = []
            late: list[int] = []

            def run(deadline: float, k: int, ran: list[int] = ran, late: list[int] = late,
                    times: np.ndarray = times) -> _Result:
                ran.append(k)
                if times[k] > deadline:
                    late.append(k)
                    raise Late
                return _Result(float(times[k]))
            candidates = [Candidate(float(bounds[k]), int(groups[k]),
                                    lambda deadline, k=k, run=run: run(deadline, k))
                          for k in range(12)]
            kept = evaluate(candidates, keep)
            assert [k for k, _ in kept] == sorted(set(ran) - set(late))
            fastest: dict[int, float] = {}
            for k in range(12):
                fastest[int(groups[k])] = min(fastest.get(int(groups[k]), np.inf), times[k])
            top = sorted(fastest.values())[:keep]
            for k in range(12):
                if times[k] <= top[-1]:
                    assert k in ran and k not in late  # could be kept, so it was simulated
            assert all(times[k] > top[-1] for k in late)
            assert all(bounds[k] <= top[-1] * (1 + 1e-6) for k in ran)
            first = min(range(12), key=lambda k: (times[k], k))
            assert min(kept, key=lambda item: (item[1].iteration_s, item[0]))[0] == first
            kept_fastest: dict[int, float] = {}
            for k, result in kept:
                kept_fastest[int(groups[k])] = min(kept_fastest.get(int(groups[k]), np.inf),
                                                   result.iteration_s)
            assert sorted(kept_fastest.values())[:keep] == top


def test_grid_simulates_only_configurations_that_can_win() -> None:
    """1F1B's grid on 8 GPUs: the plan is the fastest of simulating every configuration, and
    fewer configurations are simulated than run (before: all of them)."""
    chain = synthetic_chain([1e-3] * 8, [2e-3] * 8, [1e7] * 8)
    graph = server_graph("two", [(4, 1e12, 2**40, 1e11, 1e-6)] * 2, 1e9, 1e-5)
    problem = PipelineProblem(chain, graph, 8, ("none",))
    exhaustive = None
    for point in grid_points(problem):
        stages = point_stages(problem, point)
        plan = PipelinePlan("1f1b", stages, one_f_one_b_orders(stages, 8 // point.tp, 8), 8,
                            {}, point.recompute, point.tp, point.ddp)
        time = simulate(problem, plan).iteration_s
        if exhaustive is None or time < exhaustive * (1 - 1e-12):
            exhaustive = time
    calls: list[int] = []

    def counted(problem: PipelineProblem, plan: PipelinePlan, deadline: float):
        calls.append(1)
        return simulate(problem, plan, deadline)
    original = grid_module.simulate
    grid_module.simulate = counted
    try:
        fresh = replace(problem)
        plan = plan_1f1b(fresh)
    finally:
        grid_module.simulate = original
    assert simulate(fresh, plan).iteration_s == exhaustive
    assert 0 < len(calls) < sum(1 for _ in grid_points(problem))


def test_banded_costs_cover_every_stage_that_fits() -> None:
    """With memory for 1 to 3 blocks per GPU, every block range that fits (by hand: 4 x
    parameter bytes + stash <= usable memory) has finite latency = work / FLOP/s in the band,
    and no other range is finite."""
    for room in (1, 2, 3):
        params = [1e9, 2e9, 1e9, 1e9, 2e9, 1e9]
        chain = synthetic_chain([1e-3] * 6, [2e-3] * 6, [1e6] * 6, params, [1e8] * 6)
        capacity = chain.reserve_bytes + (4 * 2e9 * room + 1e8 * room) / (
            1 - chain.fragmentation)
        graph = server_graph("g", [(3, 1e12, int(capacity), 1e10, 0.0)], 1e9, 0.0)
        problem = PipelineProblem(chain, graph, 4, ("none",))
        costs = range_costs(problem, [0, 1, 2], identical=False)
        for band in costs.runs.values():
            finite = {(int(band.starts[k, i1]), i1)
                      for k, i1 in zip(*np.nonzero(np.isfinite(band.latency)), strict=True)}
            fits = {(i0, i1) for i0, i1 in itertools.combinations(range(7), 2)
                    if 4 * sum(params[i0:i1]) + 1e8 * (i1 - i0) <= chain.usable(capacity)}
            assert finite == fits
            for i0, i1 in fits:
                k = int(np.nonzero(band.starts[:, i1] == i0)[0][0])
                assert band.latency[k, i1] == pytest.approx((i1 - i0) * 3e-3)


def test_banded_sync_dp_finds_the_brute_force_optimum() -> None:
    """On 6 blocks and 3 GPUs with memory for at most 2 blocks per GPU: for every candidate
    bottleneck, the DP's best partition per number of GPUs used costs what the cheapest of all
    partitions into GPU runs with every period <= t_max costs."""
    chain = synthetic_chain([1e-3, 2e-3, 1e-3, 3e-3, 1e-3, 2e-3], [2e-3] * 6, [1e6] * 6,
                            [1e9] * 6, [1e8] * 6)
    capacity = chain.reserve_bytes + (4e9 * 2 + 2e8) / (1 - chain.fragmentation)
    graph = server_graph("g", [(3, 1e12, int(capacity), 1e10, 1e-6)], 1e9, 0.0)
    problem = PipelineProblem(chain, graph, 4, ("none",))
    costs = range_costs(problem, [0, 1, 2], identical=False)

    def stage(u0: int, z: int, i0: int, i1: int) -> tuple[float, float]:
        band = costs.runs[(u0, z)]
        rows = np.nonzero(band.starts[:, i1] == i0)[0]
        if not len(rows):
            return np.inf, np.inf
        k = int(rows[0])
        return (band.latency[k, i1] + band.hops[i1] + band.sync[k, i1],
                band.period[k, i1])
    periods = sorted({float(p) for band in costs.runs.values()
                      for p in band.period[np.isfinite(band.latency)]})
    found = sync_dp(costs, 6, [(t, 1.0) for t in periods])
    for t_max, partitions in zip(periods, found, strict=True):
        best: dict[int, float] = {}
        for cuts in itertools.chain.from_iterable(
                itertools.combinations(range(1, 6), k) for k in range(3)):
            bounds = (0, *cuts, 6)
            for runs in itertools.product((1, 2, 3), repeat=len(bounds) - 1):
                if sum(runs) > 3:
                    continue
                starts = np.cumsum((0, *runs))
                parts = [stage(int(starts[s]), runs[s], bounds[s], bounds[s + 1])
                         for s in range(len(runs))]
                if all(period <= t_max for _, period in parts):
                    used = sum(runs)
                    best[used] = min(best.get(used, np.inf), sum(c for c, _ in parts))
        got = {sum(len(st.devices) for st in stages): sum(
            stage(u0, len(st.devices), st.first, st.last)[0]
            for st, u0 in zip(stages, np.cumsum([0] + [len(st.devices) for st in stages]),
                              strict=False))
            for stages in partitions}
        assert got == pytest.approx({used: cost for used, cost in best.items()
                                     if np.isfinite(cost)})


def test_a_simulation_is_shared_only_by_plans_whose_numbers_are_equal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On a chain without selective-recomputation data, selective recomputation leaves every
    number as it is: the same stages and orders under 'selective' return the result of 'none'
    without simulating again (bit-identical to simulating it on a fresh instance); under
    'full' (recomputed forwards, smaller stash) the plan is simulated and runs longer."""
    chain = synthetic_chain([1e-3] * 4, [2e-3] * 4, [1e7] * 4, [1e8] * 4, [1e8] * 4)
    graph = server_graph("two", [(2, 1e12, 2**40, 1e11, 1e-6)], 1e9, 0.0)
    problem = PipelineProblem(chain, graph, 4)
    stages = (Stage(0, 2, (0,)), Stage(2, 4, (1,)))
    orders = one_f_one_b_orders(stages, 2, 4)
    runs: list[str] = []
    original = simulate_module._Run.run

    def counted(run) -> None:
        runs.append(run.problem.chain.recompute)
        original(run)
    monkeypatch.setattr(simulate_module._Run, "run", counted)
    times = {mode: simulate(problem, PipelinePlan("x", stages, orders, 4, {}, mode)).iteration_s
             for mode in ("none", "selective", "full")}
    assert runs == ["none", "full"]
    fresh = PipelineProblem(chain, server_graph("two", [(2, 1e12, 2**40, 1e11, 1e-6)], 1e9,
                                                0.0), 4)
    assert times["selective"] == simulate(fresh, PipelinePlan("x", stages, orders, 4, {},
                                                               "selective")).iteration_s
    assert runs[-1] == "selective"
    assert times["full"] > times["none"]


def test_list_schedules_are_shared_by_instances_that_simulate_alike(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A list schedule is kept per device graph: the same stages and rule on an instance that
    differs only in what planners may choose (``runnable_only``) return the kept result (same
    orders and time as simulating it on a fresh graph); under the other network mode it is
    simulated again. A rule Late at a deadline is Late at an earlier one without simulating,
    and without a deadline ends after it."""
    chain = synthetic_chain([1e-3] * 4, [2e-3] * 4, [1e7] * 4, [1e8] * 4, [1e8] * 4)

    def graph():
        return server_graph("two", [(2, 1e12, 2**40, 1e11, 1e-6)] * 2, 1e9, 1e-5)
    problem = PipelineProblem(chain, graph(), 4)
    stages = (Stage(0, 2, (0, 2)), Stage(2, 4, (1, 3)))
    rule = backward_first_dispatch(2, (4, 4), False)
    runs: list[str] = []
    original = simulate_module._Run.run

    def counted(run) -> None:
        runs.append(run.problem.network)
        original(run)
    monkeypatch.setattr(simulate_module._Run, "run", counted)
    first = list_schedule(problem, stages, rule, "x")
    again = list_schedule(replace(problem, runnable_only=True), stages, rule, "y")
    assert runs == ["fifo"] and again.plan.planner == "y"
    fresh = list_schedule(PipelineProblem(chain, graph(), 4), stages, rule, "x")
    assert (again.iteration_s, again.plan.orders) == (fresh.iteration_s, fresh.plan.orders)
    assert first.iteration_s == fresh.iteration_s
    ps = replace(problem, network="ps")
    list_schedule(ps, stages, rule, "x")
    assert runs == ["fifo", "fifo", "ps"]
    other = backward_first_dispatch(2, (1, 1), False)
    for deadline in (first.iteration_s / 2, first.iteration_s / 3):
        with pytest.raises(Late):  # the second is Late without simulating again
            list_schedule(problem, stages, other, "x", deadline)
    assert runs == ["fifo", "fifo", "ps", "fifo"]
    assert list_schedule(problem, stages, other, "x").iteration_s > first.iteration_s / 2
    assert runs[-1] == "fifo" and len(runs) == 5


def test_candidate_bounds_are_kept_and_never_above_their_simulated_times() -> None:
    """Random instances: a partition's candidate bounds asked again (kept) equal those found
    on a fresh instance, and no candidate simulates faster than its bound."""
    for seed in range(8):
        problem = random_problem(seed)
        for stages in propose_partitions(problem)[:3]:
            first = schedule_candidates(problem, stages)
            again = schedule_candidates(problem, stages)
            fresh = schedule_candidates(replace(problem), stages)
            assert ([c.bound for c in first] == [c.bound for c in again]
                    == [c.bound for c in fresh])
            for candidate in first:
                result = candidate.run(math.inf)
                if result is not None:
                    assert result.iteration_s >= candidate.bound * (1 - 1e-9)


def test_fast_order_check_agrees_with_the_full_check() -> None:
    """Baseline plans of random instances, as they are and with one GPU's order mutated
    (two actions swapped, one dropped, one repeated, one moved to another GPU): the fast
    check passes exactly the plans the full check passes."""
    mutate, checked = random.Random(2), {True: 0, False: 0}
    for problem, plan in _baseline_plans(range(10)):
        for variant in [plan] + [_mutated(plan, mutate) for _ in range(6)]:
            instance = problem.for_plan(variant)
            fast = plan_module._orders_valid(variant, variant.split_backward)
            try:
                _full_check(variant, instance.chain.num_blocks, instance.graph.num_devices)
                full = True
            except PlanError:
                full = False
            assert fast == full
            checked[full] += 1
    assert min(checked.values()) > 40


def _full_check(plan: PipelinePlan, num_blocks: int, num_devices: int) -> None:
    original = plan_module._orders_valid
    plan_module._orders_valid = lambda plan, split: False
    try:
        plan_module.validate_plan(plan, num_blocks, num_devices)
    finally:
        plan_module._orders_valid = original


def _mutated(plan: PipelinePlan, mutate: random.Random) -> PipelinePlan:
    orders = [list(order) for order in plan.orders]
    k = mutate.choice([k for k, order in enumerate(orders) if order])
    i, j = mutate.randrange(len(orders[k])), mutate.randrange(len(orders[k]))
    how = mutate.choice(("swap", "drop", "repeat", "move"))
    if how == "swap":
        orders[k][i], orders[k][j] = orders[k][j], orders[k][i]
    elif how == "drop":
        del orders[k][i]
    elif how == "repeat":
        orders[k].insert(j, orders[k][i])
    else:
        orders[(k + 1) % len(orders)].append(orders[k].pop(i))
    return replace(plan, orders=tuple(map(tuple, orders)))


def test_balanced_cuts_reach_the_brute_force_bottleneck() -> None:
    """Random chains of 2-9 blocks cut into 1 to every block stages with random loads (and
    the same loads reversed, in the same batch): the windowed DP's cuts give the smallest
    largest (work x load) over all ways to cut."""
    rng = random.Random(3)
    for _ in range(300):
        blocks = rng.randint(2, 9)
        work = [rng.choice([1.0, 2.0, 3.0, rng.random()]) for _ in range(blocks)]
        chain = synthetic_chain(work, [2 * w for w in work], [0.0] * blocks)
        loads = tuple(rng.choice([1.0, 1.5, rng.random()]) for _ in range(rng.randint(1, blocks)))
        total = np.concatenate([[0.0], np.cumsum(np.array(work) * 3e12)])
        batch = [loads, loads[::-1]]
        for weights, firsts in zip(batch, partition_module._balanced_cuts(chain, batch),
                                   strict=True):
            assert firsts[0] == 0 and all(a < b for a, b in itertools.pairwise(firsts))
            best = min(_bottleneck(total, (0, *cuts), weights)
                       for cuts in itertools.combinations(range(1, blocks), len(weights) - 1))
            assert _bottleneck(total, firsts, weights) == best


def _bottleneck(total: np.ndarray, firsts: tuple[int, ...], loads: tuple[float, ...]) -> float:
    """Largest (work x load) of the stages starting at ``firsts`` (``total``: cumulative work)."""
    ends = (*firsts[1:], len(total) - 1)
    return max((total[b] - total[a]) * load for a, b, load in zip(firsts, ends, loads,
                                                                   strict=True))
