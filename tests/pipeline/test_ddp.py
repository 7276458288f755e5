"""PP 1 x DP n baselines all-reduce in DDP buckets overlapped with the backward (issue 19, item
14): they sent one all-reduce of every gradient after the last backward."""

from __future__ import annotations

import pytest

from dlsched.hardware.device_graph import server_graph
from dlsched.pipeline import (
    PipelinePlan,
    PipelineProblem,
    Stage,
    plan_bound,
    simulate,
    synthetic_chain,
)
from dlsched.pipeline.chains.chain import REFERENCE_FLOPS
from dlsched.pipeline.planners.baselines import plan_1f1b
from dlsched.pipeline.plans.schedules import one_f_one_b_orders
from dlsched.pipeline.simulation.ddp import ddp_buckets

MIB = 2**20


def _flat(pairs: list[tuple[float, float]]) -> list[float]:
    return [value for pair in pairs for value in pair]


def test_buckets_follow_torch_ddp_caps_in_reverse_block_order() -> None:
    """One 60 MiB block: 1 MiB first, then 25 MiB buckets, ready as the backward reaches
    their last byte; two blocks: the later block's gradients come first."""
    one = synthetic_chain([1.0], [1.0], [0.0], [60 * MIB])
    assert _flat(ddp_buckets(one, 0, 1)) == pytest.approx(
        _flat([(MIB, 1 / 60), (25 * MIB, 26 / 60), (25 * MIB, 51 / 60), (9 * MIB, 1.0)]))
    two = synthetic_chain([1.0, 1.0], [3.0, 1.0], [0.0, 0.0], [10 * MIB, MIB])
    assert _flat(ddp_buckets(two, 0, 2)) == pytest.approx(_flat([(MIB, 0.25), (10 * MIB, 1.0)]))


def _two_replicas(ddp: bool) -> tuple[PipelineProblem, PipelinePlan]:
    """Blocks of F 1 s and B 2 s each, 10 MiB and 1 MiB of gradients, one stage on 2 GPUs
    joined at 1 MiB/s, 2 microbatches (one per replica)."""
    chain = synthetic_chain([1.0, 1.0], [2.0, 2.0], [0.0, 0.0], [10 * MIB, MIB])
    graph = server_graph("pair", [(2, REFERENCE_FLOPS, 2**40, MIB, 0.0)], MIB, 0.0)
    stages = (Stage(0, 2, (0, 1)),)
    plan = PipelinePlan("x", stages, one_f_one_b_orders(stages, 2, 2), 2, ddp_buckets=ddp)
    return PipelineProblem(chain, graph, 2), plan


def test_bucketed_all_reduce_by_hand() -> None:
    """Each replica: F 0-2 s, B 2-6 s. The 1 MiB bucket of block 1 is ready at 4 s (half the
    backward) and reduced by 5 s (2 ring steps of 0.5 MiB at 1 MiB/s); the 10 MiB bucket at
    6 s, reduced by 16 s. One all-reduce of 11 MiB after the backward ends at 17 s. The bound
    (backward end + the last bucket's ring) is met exactly."""
    problem, plan = _two_replicas(True)
    assert simulate(problem, plan).iteration_s == pytest.approx(16.0)
    assert plan_bound(problem, plan) == pytest.approx(16.0)
    problem, plan = _two_replicas(False)
    assert simulate(problem, plan).iteration_s == pytest.approx(17.0)


def test_pure_data_parallel_baseline_uses_ddp() -> None:
    """On one server a tiny model runs best as PP 1 x DP 8: its plan says DDP buckets."""
    chain = synthetic_chain([1e-3] * 8, [2e-3] * 8, [1e6] * 8, [1e6] * 8, [1e6] * 8)
    graph = server_graph("one", [(8, 1e12, 2**34, 1e11, 1e-6)], 1e10, 1e-5)
    plan = plan_1f1b(PipelineProblem(chain, graph, 16))
    assert (plan.notes["pp"], plan.notes["dp"], plan.ddp_buckets) == (1, 8, True)
    assert "DDP" in plan.notes["gradient sync"]
