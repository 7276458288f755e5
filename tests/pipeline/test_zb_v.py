"""ZB-V (Qi et al., ICLR 2024, section 6): two stages per GPU in a V, closed form on
uniform stages, 1F1B's memory, replicas and short iterations."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pipeline_cases import uniform_problem

from dlsched.pipeline import PipelinePlan, Stage, plan_bound, simulate, synthetic_chain
from dlsched.pipeline.plans.plan import validate_plan
from dlsched.pipeline.plans.schedules import zb_v_orders
from dlsched.pipeline.simulation.memory import peak_memory


def _v_stages(p: int, replicas: int = 1) -> tuple[Stage, ...]:
    """Stage ``s`` on rank ``s`` going down and on rank ``2p - 1 - s`` coming up; rank ``k``
    = GPUs ``k*replicas .. k*replicas + replicas - 1``."""
    def rank(k: int) -> tuple[int, ...]:
        return tuple(range(k * replicas, (k + 1) * replicas))
    return tuple(Stage(s, s + 1, rank(s if s < p else 2 * p - 1 - s)) for s in range(2 * p))


@pytest.mark.parametrize(("p", "m"), [(2, 3), (2, 4), (3, 5), (3, 6), (4, 7), (4, 12)])
def test_zero_bubble_closed_form(p: int, m: int) -> None:
    """F = I = W = 1 s and free links, m >= 2p - 1: every rank runs 2m (F + I + W) = 6m s of
    work after the first forward reaches it, (p - 1) s in: 6m + p - 1 s, which is also the
    plan's lower bound (no schedule of this mapping is faster)."""
    problem = uniform_problem(2 * p, m, f=1.0, b=2.0, split=True)
    stages = _v_stages(p)
    plan = PipelinePlan("zb-v", stages, zb_v_orders(m, tuple((k,) for k in range(p)), 2 * p), m)
    assert simulate(problem, plan).iteration_s == pytest.approx(6 * m + p - 1)
    assert plan_bound(problem, plan) == pytest.approx(6 * m + p - 1)


@pytest.mark.parametrize(("p", "m"), [(3, 6), (4, 8), (4, 12)])
def test_memory_is_one_f_one_b_s(p: int, m: int) -> None:
    """At most 2p chunk stashes on every rank: p microbatches of a whole (two-chunk) stage,
    what 1F1B's first stage holds, and the same on every rank."""
    chain = synthetic_chain([1.0] * 2 * p, [2.0] * 2 * p, [0.0] * 2 * p,
                            stash_bytes=[1.0] * 2 * p, split=True)
    plan = PipelinePlan("zb-v", _v_stages(p), zb_v_orders(m, tuple((k,) for k in range(p)), p), m)
    assert peak_memory(chain, plan, p) == [2.0 * p] * p


@pytest.mark.parametrize(("p", "m", "replicas"), [(3, 2, 1), (4, 3, 1), (2, 7, 2), (3, 9, 3)])
def test_short_iterations_and_replicas_are_complete(p: int, m: int, replicas: int) -> None:
    """Fewer than 2p - 1 microbatches (per replica) and data-parallel replicas taking
    microbatches round-robin: every GPU runs F, I and W of each of its microbatches once, in
    a valid order, and the plan runs to the end."""
    stages = _v_stages(p, replicas)
    groups = tuple(stage.devices for stage in stages[:p])
    n = max(2 * p, p * replicas)
    plan = PipelinePlan("zb-v", stages, zb_v_orders(m, groups, n), m)
    validate_plan(plan, 2 * p, n)
    problem = replace(uniform_problem(n, m, split=True),
                      chain=synthetic_chain([1.0] * 2 * p, [2.0] * 2 * p, [0.0] * 2 * p,
                                            split=True))
    assert simulate(problem, plan).iteration_s > 0


def test_turn_of_the_v_needs_no_transfer() -> None:
    """Stages p - 1 and p share the last rank: with 1 s transfers between ranks one
    microbatch crosses 2(p - 1) links down and up, not 2p - 1."""
    p = 3
    problem = uniform_problem(2 * p, 1, f=1.0, b=2.0, act=1e9, split=True)
    plan = PipelinePlan("zb-v", _v_stages(p), zb_v_orders(1, tuple((k,) for k in range(p)),
                                                          2 * p), 1)
    # 6 forwards and 6 input gradients of 1 s, 2 x 2(p - 1) transfers of 1 s, the last
    # rank's W of stage 3 (it runs right after 3I, before 2I, in the paper's order) and
    # rank 0's final W of stage 0: 6 + 6 + 8 + 1 + 1 s.
    assert simulate(problem, plan).iteration_s == pytest.approx(6 + 6 + 4 * (p - 1) + 2)
