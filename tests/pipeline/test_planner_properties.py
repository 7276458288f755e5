"""Every planner on 200 seeded random small instances: nothing but ConfigError is raised, every
plan is valid, fits memory and is not faster than its bounds, and dlsched is never slower than
a baseline. Also the pieces of the refinement crash (issue 19, item 6): a ZB-V start plan has
two neighbouring stages on one GPU, and merging them made a stage listing that GPU twice, whose
all-reduce sent from the GPU to itself over the unused (zero) diagonal of the bandwidth
matrix."""

from __future__ import annotations

import numpy as np
import pytest

from dlsched.errors import ConfigError
from dlsched.hardware.device_graph import Device, DeviceGraph
from dlsched.pipeline import (
    BASELINES,
    PipelineProblem,
    PlanError,
    Stage,
    instance_bound,
    plan_bound,
    simulate,
    synthetic_chain,
)
from dlsched.pipeline.planners.baselines import plan_zb_v
from dlsched.pipeline.planners.planner import _split_merge_moves, plan_dlsched, refine
from dlsched.pipeline.plans.plan import validate_plan
from dlsched.pipeline.plans.schedules import backward_first_dispatch
from dlsched.pipeline.simulation.network import PipelineNetwork
from dlsched.pipeline.simulation.simulate import list_schedule
from dlsched.sim import Engine

INSTANCES = 200


def matrix_graph(rng: np.random.Generator, gpus: int) -> DeviceGraph:
    """``gpus`` GPUs in one or two servers, of two speeds and three memory sizes, with an
    optional overhead per action; links faster inside a server; the diagonal 0, as the matrix
    form of a device file has it."""
    servers = rng.integers(0, 2, gpus)
    devices = tuple(Device(f"g{k}", float(rng.choice([1e12, 2e12])),
                           int(rng.choice([2**33, 2**36, 2**40])), int(servers[k]),
                           float(rng.choice([0.0, 1e-4]))) for k in range(gpus))
    same = servers[:, None] == servers[None, :]
    bandwidth = np.where(same, rng.choice([1e10, 1e11]), rng.choice([1e9, 1e10]))
    latency = np.where(same, 1e-6, 1e-5)
    np.fill_diagonal(bandwidth, 0.0)
    np.fill_diagonal(latency, 0.0)
    return DeviceGraph("random", devices, bandwidth, latency)


def random_problem(seed: int) -> PipelineProblem:
    """1-3 blocks (forward, backward seconds on 1 TFLOP/s; activation, parameter and stash
    bytes; backward splittable or not), 1-3 GPUs, 1-3 microbatches, either network mode, with
    or without replication."""
    rng = np.random.default_rng(seed)
    blocks, gpus = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    columns = [rng.uniform(low, high, blocks).tolist()
               for low, high in ((1e-3, 4e-3), (2e-3, 8e-3), (1e5, 1e8), (1e6, 1e9), (1e6, 1e9))]
    chain = synthetic_chain(*columns, split=bool(rng.integers(0, 2)))
    return PipelineProblem(chain, matrix_graph(rng, gpus), int(rng.integers(1, 4)),
                           network=str(rng.choice(["fifo", "ps"])),
                           replicate=bool(rng.integers(0, 2)))


def _check(problem: PipelineProblem, plan) -> float:
    """The plan's simulated time after checking validity, memory (inside ``simulate``) and
    both bounds."""
    sub = problem.for_plan(plan)
    validate_plan(plan, sub.chain.num_blocks, sub.graph.num_devices)
    if not problem.replicate:
        assert all(len(stage.devices) == 1 for stage in plan.stages)
    iteration = simulate(problem, plan).iteration_s
    assert iteration >= plan_bound(problem, plan) * (1 - 1e-9)
    assert iteration >= instance_bound(problem) * (1 - 1e-9)
    return iteration


@pytest.mark.parametrize("first", range(0, INSTANCES, 50))
def test_every_planner_on_random_small_instances(first: int) -> None:
    """Seeds ``first .. first + 49``: each baseline, then dlsched with the baselines' plans
    (as ``plan_dlsched(problem, BASELINES)`` gets them, without planning them twice)."""
    for seed in range(first, first + 50):
        problem = random_problem(seed)
        plans, times = {}, {}
        for name, planner in BASELINES.items():
            try:
                plans[name] = planner(problem)
            except ConfigError:
                continue
            times[name] = _check(problem, plans[name])
        try:
            ours = plan_dlsched(problem, {n: (lambda _, p=p: p) for n, p in plans.items()})
        except ConfigError:
            assert not plans, f"seed {seed}: dlsched found no plan where a baseline did"
            continue
        time = _check(problem, ours)
        assert all(time <= t * (1 + 1e-9) for t in times.values()), seed


def _zero_diagonal_problem() -> PipelineProblem:
    chain = synthetic_chain([1e-3] * 4, [2e-3] * 4, [1e6] * 4, [1e8] * 4, [1e6] * 4, split=True)
    devices = (Device("g0", 1e12, 2**40), Device("g1", 1e12, 2**40))
    bandwidth = np.array([[0.0, 1e10], [1e10, 0.0]])
    return PipelineProblem(chain, DeviceGraph("two", devices, bandwidth, np.zeros((2, 2))), 4)


def test_refinement_from_zb_v_builds_no_stage_on_one_gpu_twice() -> None:
    """ZB-V on 2 GPUs puts stages 1 and 2 on GPU 1; refinement from that plan used to merge
    them into devices (1, 1) and raised ZeroDivisionError."""
    problem = _zero_diagonal_problem()
    plan = plan_zb_v(problem)
    assert plan.stages[1].devices == plan.stages[2].devices == (1,)
    assert all(len(set(stage.devices)) == len(stage.devices)
               for move in _split_merge_moves(plan.stages) for stage in move)
    refined = refine(problem.for_plan(plan), simulate(problem, plan))
    _check(problem, refined.plan)


def test_list_scheduling_refuses_a_stage_on_one_gpu_twice() -> None:
    """Validation rejects such a stage in list scheduling too (it checked fixed plans only)."""
    problem = _zero_diagonal_problem()
    stages = (Stage(0, 1, (0,)), Stage(1, 4, (1, 1)))
    with pytest.raises(PlanError, match=r"stage 1 devices \(1, 1\): need distinct GPUs"):
        list_schedule(problem, stages, backward_first_dispatch(2, (4, 4), True), "x")


def test_transfer_to_oneself_costs_nothing() -> None:
    """A send from a GPU to itself completes at once, even over a zero-bandwidth diagonal."""
    problem = _zero_diagonal_problem()
    engine = Engine()
    network = PipelineNetwork(engine, problem.graph)
    done: list[float] = []
    engine.after(1.0, network.send, 1, 1, 1e9, ("p2p", 1), lambda: done.append(engine.now))
    engine.run()
    assert done == [1.0]
