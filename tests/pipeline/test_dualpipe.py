"""DualPipe and DualPipeV (DeepSeek-V3 report, section 3.2.1; the deepseek-ai/DualPipe
repository): hand-computed makespans against the published bubble formula, the published
activation memory, every order run to its end, never below the plan's bound, and what an
overlapped unit does to the timeline."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from pipeline_cases import uniform_problem

from dlsched.errors import ConfigError
from dlsched.pipeline import PipelinePlan, Stage, plan_bound, simulate, synthetic_chain
from dlsched.pipeline.plans.actions import parse_orders
from dlsched.pipeline.plans.deadlock import stalled_at
from dlsched.pipeline.plans.dualpipe import dualpipe_units, dualpipev_units, flatten
from dlsched.pipeline.plans.plan import validate_plan
from dlsched.pipeline.plans.runtimes import runtime_for
from dlsched.pipeline.plans.schedules import zb_v_orders
from dlsched.pipeline.simulation.memory import peak_memory


def _v_stages(p: int) -> tuple[Stage, ...]:
    return tuple(Stage(s, s + 1, (s if s < p else 2 * p - 1 - s,)) for s in range(2 * p))


def _dual_stages(p: int) -> tuple[Stage, ...]:
    return tuple(Stage(s, s + 1, (s, p - 1 - s)) for s in range(p))


def _dualpipe(p: int, m: int) -> PipelinePlan:
    orders, joined = flatten(dualpipe_units(m, p))
    return PipelinePlan("dualpipe", _dual_stages(p), orders, m, joined=joined)


def _dualpipev(p: int, m: int) -> PipelinePlan:
    orders, joined = flatten(dualpipev_units(m, tuple((k,) for k in range(p)), p))
    return PipelinePlan("dualpipev", _v_stages(p), orders, m, joined=joined)


def _bubble(pp_stages: int, f: float, b: float, w: float) -> float:
    """The DeepSeek-V3 report's Table 2 bubble, (PP/2 - 1)(F&B + B - 3W), with F&B = F + B
    (no communication to hide here)."""
    return (pp_stages / 2 - 1) * (f + b + b - 3 * w)


@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (4, 12), (6, 12), (8, 16), (8, 20)])
def test_dualpipe_makespan_is_the_published_bubble(p: int, m: int) -> None:
    """F = 1 s, B = 2 s (I = W = 1 s), free links: each GPU runs one chunk of every
    microbatch (half of them in each direction), 3m s of work, plus the published bubble
    (PP/2 - 1)(F&B + B - 3W) = (p/2 - 1) 2 s; e.g. 4 ranks, 8 microbatches: 24 + 2 = 26 s."""
    problem = uniform_problem(p, m, f=1.0, b=2.0, split=True)
    plan = _dualpipe(p, m)
    assert simulate(problem, plan).iteration_s == pytest.approx(3 * m + _bubble(p, 1, 2, 1))
    assert plan_bound(problem, plan) <= simulate(problem, plan).iteration_s + 1e-9


@pytest.mark.parametrize(("p", "m"), [(2, 4), (3, 6), (4, 8), (4, 10), (8, 16)])
def test_dualpipev_makespan_is_the_published_bubble(p: int, m: int) -> None:
    """The same on p ranks of a V of PP = 2p stages: 6m s of work per GPU plus (p - 1) 2 s;
    4 ranks, 8 microbatches: 48 + 6 = 54 s (ZB-V: 48 + 3 s, but it has no pairs to hide
    communication in)."""
    problem = replace(uniform_problem(2 * p, m, f=1.0, b=2.0, split=True),
                      graph=uniform_problem(p, m).graph)
    plan = _dualpipev(p, m)
    assert simulate(problem, plan).iteration_s == pytest.approx(6 * m + _bubble(2 * p, 1, 2, 1))


@pytest.mark.parametrize(("make", "p", "m", "stages"), [
    (_dualpipe, 4, 8, 4), (_dualpipe, 8, 24, 8), (_dualpipev, 4, 8, 8), (_dualpipev, 4, 12, 8)])
def test_activation_memory_is_pp_plus_one(make, p: int, m: int, stages: int) -> None:
    """Table 2 of the report (and the repository's table for DualPipeV): at most PP + 1
    chunk stashes in flight on every rank, PP the number of stages."""
    chain = synthetic_chain([1.0] * stages, [2.0] * stages, [0.0] * stages,
                            stash_bytes=[1.0] * stages, split=True)
    assert peak_memory(chain, make(p, m), p) == [stages + 1.0] * p


def test_pairs_and_directions() -> None:
    """Rank 0 of DualPipe on 4 ranks, 8 microbatches: two warm-up forwards of its own stage
    (even microbatches enter at rank 0), then stage 3 (the reverse direction's last stage,
    odd microbatches) alternating with stage 0, the zero-bubble I W F, and pairs F & B as one
    unit each (F, I, W joined)."""
    plan = _dualpipe(4, 8)
    order, joined = plan.orders[0], plan.joined[0]
    assert order[:7] == parse_orders("gpu0: 0F0 0F2 0F4 3F1 3I1 3W1 3F3")[0]
    units, start = [], 0
    for i in range(len(order)):
        if i not in joined:
            units.append(" ".join(map(str, order[start:i + 1])))
            start = i + 1
    assert "0F6 3I3 3W3" in units and "3F5 0I0 0W0" in units
    validate_plan(plan, 4, 4)


@pytest.mark.parametrize("seed", range(8))
def test_never_below_the_bound_and_no_deadlock(seed: int) -> None:
    """Random stage costs, transfers and microbatch counts: the orders run to their end
    (the dry-run check agrees) and the simulated time is never below ``plan_bound``."""
    rng = random.Random(seed)
    p = rng.choice([2, 4, 6])
    m = 2 * p + 2 * rng.randrange(3)
    for stages, plan, gpus in ((p, _dualpipe(p, m), p), (2 * p, _dualpipev(p, m), p)):
        chain = synthetic_chain([rng.uniform(0.5, 2) for _ in range(stages)],
                                [rng.uniform(1, 4) for _ in range(stages)],
                                [rng.uniform(0, 5e8) for _ in range(stages)], split=True)
        problem = replace(uniform_problem(gpus, m), chain=chain)
        assert stalled_at(plan.stages, plan.orders, m, plan.joined) is None
        assert simulate(problem, plan).iteration_s >= plan_bound(problem, plan) - 1e-9


def _two_stage_plan(joined: tuple[frozenset[int], ...]) -> PipelinePlan:
    orders = parse_orders("gpu0: 0F0 0F1 0I0 0W0 0I1 0W1\ngpu1: 1F0 1I0 1W0 1F1 1I1 1W1")
    return PipelinePlan("pair", tuple(Stage(s, s + 1, (s,)) for s in range(2)), orders, 2,
                        joined=joined)


def test_a_unit_waits_for_all_inputs_and_sends_at_its_end() -> None:
    """Two stages, F = I = W = 1 s, free links. Alone, 0F1 runs at 1-2 s and the iteration
    ends at 8 s. Joined with 0I0 0W0 (an F & B pair), it starts only when 0I0's gradient is
    there (3 s), ends at 6 s, and only then sends 1F1's input: 1F1 6-7, 1I1 7-8, 0I1 8-9,
    0W1 9-10 s; the unit's spans follow one another on the GPU."""
    problem = uniform_problem(2, 2, f=1.0, b=2.0, split=True)
    assert simulate(problem, _two_stage_plan((frozenset(), frozenset()))).iteration_s == 8.0
    result = simulate(problem, _two_stage_plan((frozenset({1, 2}), frozenset())))
    assert result.iteration_s == pytest.approx(10.0)
    spans = {s.label: (s.start, s.end) for s in result.timeline.spans if s.resource == "s0g0"}
    assert [spans[a] for a in ("0F1", "0I0", "0W0")] == [(3.0, 4.0), (4.0, 5.0), (5.0, 6.0)]


def test_a_unit_can_deadlock_where_its_actions_alone_do_not() -> None:
    """Joining 0F1 with 0I1 asks for 0I1's gradient before 0F1 has sent what it comes from:
    the dry run finds gpu0 stuck at 0F1 and the simulator refuses the plan."""
    plan = _two_stage_plan((frozenset({1}), frozenset()))
    plan = replace(plan, orders=parse_orders(
        "gpu0: 0F0 0F1 0I1 0I0 0W0 0W1\ngpu1: 1F0 1I0 1W0 1F1 1I1 1W1"))
    assert stalled_at(plan.stages, plan.orders, 2, plan.joined) == (0, 1)
    with pytest.raises(Exception, match="deadlocks"):
        simulate(uniform_problem(2, 2, split=True), plan)


@pytest.mark.parametrize(("make", "p", "m", "field"), [
    (lambda p, m: dualpipe_units(m, p), 3, 6, "pp"),
    (lambda p, m: dualpipe_units(m, p), 4, 6, "num_microbatches"),
    (lambda p, m: dualpipe_units(m, p), 4, 9, "num_microbatches"),
    (lambda p, m: dualpipev_units(m, tuple((k,) for k in range(p)), p), 4, 7,
     "num_microbatches")])
def test_refused_shapes(make, p: int, m: int, field: str) -> None:
    """DualPipe needs an even rank count and an even number of microbatches, both at least
    2 x ranks, as the authors' repository asserts; DualPipeV at least 2 x ranks."""
    with pytest.raises(ConfigError, match=field):
        make(p, m)


def test_a_pair_hides_each_chunks_communication_behind_the_others_compute() -> None:
    """The pair unit of ``test_a_unit_waits_for_all_inputs_and_sends_at_its_end`` (0F1 with
    0I0 0W0, 3 s of compute one after another) on a chain whose stage 0 spends 0.4 s of its
    forward and 0.5 s of its backward in its own communication (``Chain.overlap_seconds``):
    the pair takes max(3 - 0.9, 0.9) = 2.1 s (3-5.1 s), then 1F1 5.1-6.1, 1I1 6.1-7.1, 0I1
    7.1-8.1, 0W1 8.1-9.1 s; lone actions keep their communication (no unit: 8 s as before);
    the spans of the pair share its 2.1 s in proportion (0.7 s each)."""
    chain = synthetic_chain([1.0, 1.0], [2.0, 2.0], [0.0, 0.0], split=True)
    chain = replace(chain, overlap_seconds=[[0.4, 0.5], [0.0, 0.0]])
    problem = replace(uniform_problem(2, 2, split=True), chain=chain)
    assert simulate(problem, _two_stage_plan((frozenset(), frozenset()))).iteration_s == 8.0
    result = simulate(problem, _two_stage_plan((frozenset({1, 2}), frozenset())))
    assert result.iteration_s == pytest.approx(9.1)
    spans = {s.label: (s.start, s.end) for s in result.timeline.spans if s.resource == "s0g0"}
    assert spans["0F1"] == pytest.approx((3.0, 3.7))
    assert spans["0W0"] == pytest.approx((4.4, 5.1))


def test_overlap_seconds_refused_when_malformed() -> None:
    """One (forward, backward) pair of seconds >= 0 per block, named in the error."""
    chain = synthetic_chain([1.0, 1.0], [2.0, 2.0], [0.0, 0.0])
    with pytest.raises(ConfigError, match="overlap_seconds"):
        replace(chain, overlap_seconds=[[0.4, -0.5], [0.0, 0.0]])
    with pytest.raises(ConfigError, match="overlap_seconds"):
        replace(chain, overlap_seconds=[0.4, 0.5])


def test_torch_runs_dualpipev_plans() -> None:
    """A DualPipeV plan is torch's V-style ``ScheduleDualPipeV`` (its pairs are
    OVERLAP_F_B actions there), a ZB-V plan of the same stages ``ScheduleZBVZeroBubble``."""
    assert runtime_for(_dualpipev(4, 8)) == "torch (DualPipeV)"
    zb_v = PipelinePlan("zb-v", _v_stages(4), zb_v_orders(8, tuple((k,) for k in range(4)), 4),
                        8)
    assert runtime_for(zb_v) == "torch (ZB-V)"
