"""Interleaved 1F1B for every number of microbatches (issue 19, item 5): the orders used to
deadlock when the microbatches were not a multiple of the pipeline degree (rounds of ``p`` and
a shorter last round), and the baseline grid skipped those configurations silently."""

from __future__ import annotations

from types import SimpleNamespace

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
from dlsched.pipeline.planners.baselines import plan_interleaved
from dlsched.pipeline.plans.plan import validate_plan
from dlsched.pipeline.plans.schedules import (
    interleaved_orders,
    interleaved_rank_order,
    interleaved_rounds,
)


def _looped(p: int, v: int, d: int, m: int) -> tuple[PipelineProblem, PipelinePlan]:
    """``p x v`` one-block stages (F 1 s, B 2 s, 1 MB activations over 1 GB/s) on ``p`` ranks
    of ``d`` replicas, rank ``k`` holding stages ``k, k + p, ...``."""
    chain = synthetic_chain([1.0] * (p * v), [2.0] * (p * v), [1e6] * (p * v))
    graph = server_graph("uniform", [(p * d, 1e12, 2**40, 1e9, 0.0)], 1e9, 0.0)
    groups = tuple(tuple(range(k * d, (k + 1) * d)) for k in range(p))
    stages = tuple(Stage(s, s + 1, groups[s % p]) for s in range(p * v))
    plan = PipelinePlan("interleaved", stages, interleaved_orders(v, m, groups, p * d), m)
    return PipelineProblem(chain, graph, m), plan


@pytest.mark.parametrize("p", [2, 3, 4, 5])
def test_every_microbatch_count_completes(p: int) -> None:
    """Every (p, v, m, d) with v = 2, 3, m = 1..3p+2 and d = 1, 2: the plan is valid (each
    action once, F before B on a GPU), the simulation completes (every cross-GPU dependency
    met, no deadlock) and no faster than its bound. Before the fix, p = 4, v = 3, m = 5
    deadlocked (and 319 of 1,512 combinations up to p = 8, m = 32)."""
    for v in (2, 3):
        for d in (1, 2):
            for m in range(d, 3 * p + 3):
                problem, plan = _looped(p, v, d, m)
                validate_plan(plan, p * v, p * d)
                iteration = simulate(problem, plan).iteration_s
                assert iteration >= plan_bound(problem, plan) * (1 - 1e-9), (p, v, m, d)


def test_rounds() -> None:
    """max(1, m // p) rounds, as equal as possible, each of at least p microbatches."""
    assert interleaved_rounds(8, 4) == [4, 4]
    assert interleaved_rounds(10, 4) == [5, 5]
    assert interleaved_rounds(9, 4) == [5, 4]
    assert interleaved_rounds(3, 4) == [3]
    assert interleaved_rounds(23, 4) == [5, 5, 5, 4, 4]


def test_megatron_closed_form_when_p_divides_m() -> None:
    """Chunks of F = 1 s, B = 2 s, free links, m a multiple of p: m v (F + B) of work per
    rank plus the interleaved bubble (p - 1)(F + B), 1/v of 1F1B's on stages v times larger
    (Narayanan et al., SC 2021, section 2.2): (p, v, m) = (4, 2, 8) takes 48 + 9 s."""
    chain = synthetic_chain([1.0] * 8, [2.0] * 8, [0.0] * 8)
    graph = server_graph("free", [(4, 1e12, 2**40, 1e9, 0.0)], 1e9, 0.0)
    groups = tuple((k,) for k in range(4))
    stages = tuple(Stage(s, s + 1, groups[s % 4]) for s in range(8))
    plan = PipelinePlan("x", stages, interleaved_orders(2, 8, groups, 4), 8)
    assert simulate(PipelineProblem(chain, graph, 8), plan).iteration_s == pytest.approx(
        8 * 2 * 3 + 3 * 3)


def test_orders_equal_torch_where_torch_accepts_m() -> None:
    """Where torch's ScheduleInterleaved1F1B accepts m (a multiple of its round count), every
    rank's compute order is torch's, action for action."""
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    for p in range(1, 6):
        for v in (2, 3, 4):
            for m in range(1, 4 * p + 2):
                rounds = max(1, m // p)
                if m % rounds:
                    continue
                fake = SimpleNamespace(n_local_stages=v, microbatches_per_round=m // rounds,
                                       pp_group_size=p, _n_microbatches=m)
                for rank in range(p):
                    ops = schedules.ScheduleInterleaved1F1B._calculate_single_rank_operations(
                        fake, rank)
                    kinds = {"FORWARD": "F", "FULL_BACKWARD": "B"}
                    theirs = [f"{a.stage_index}{kinds[a.computation_type.name]}"
                              f"{a.microbatch_index}" for a in ops if a is not None]
                    ours = [str(a) for a in interleaved_rank_order(v, list(range(m)), p, rank)]
                    assert ours == theirs, (p, v, m, rank)


def test_grid_skips_nothing_silently() -> None:
    """With 5 microbatches every interleaved configuration runs (none skipped, so no note);
    where some do not fit memory, the plan's ``skipped`` note counts them."""
    chain = synthetic_chain([1e-3] * 8, [2e-3] * 8, [1e6] * 8, [1e6] * 8, [1e6] * 8)
    graph = server_graph("roomy", [(4, 1e12, 2**40, 1e10, 1e-6)], 1e9, 1e-5)
    plan = plan_interleaved(PipelineProblem(chain, graph, 5, ("none",)))
    assert "skipped" not in plan.notes
    tight = synthetic_chain([1e-3] * 8, [2e-3] * 8, [1e6] * 8, [1e6] * 8, [1e9] * 8)
    graph = server_graph("tight", [(4, 1e12, 11 * 10**9, 1e10, 1e-6)], 1e9, 1e-5)
    plan = plan_interleaved(PipelineProblem(tight, graph, 5, ("none",)))
    assert plan.notes["skipped"] == "4 of 7 configurations skipped: 4 out of memory"
