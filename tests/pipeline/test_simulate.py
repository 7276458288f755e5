"""The simulator: hand-checked timelines, closed forms, link sharing, all-reduce, memory."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pipeline_cases import one_gpu_stages, uniform_problem

from dlsched.errors import ConfigError
from dlsched.hardware.device_graph import server_graph
from dlsched.pipeline import (
    Action,
    PipelinePlan,
    PipelineProblem,
    PlanError,
    Stage,
    plan_bound,
    run_planner,
    simulate,
    synthetic_chain,
)
from dlsched.pipeline.plans.plan import host_transfers
from dlsched.pipeline.plans.schedules import (
    gpipe_orders,
    one_f_one_b_orders,
    zb_h1_orders,
    zb_h2_orders,
)


def _spans(result, resource: str) -> list[tuple[str, float, float]]:
    return [(s.label, round(s.start, 9), round(s.end, 9)) for s in result.timeline.on(resource)]


def _plan(problem: PipelineProblem, make, p: int) -> PipelinePlan:
    stages = one_gpu_stages(p)
    return PipelinePlan("test", stages, make(stages, p, problem.num_microbatches),
                        problem.num_microbatches)


def test_two_stage_two_microbatch_gpipe_by_hand() -> None:
    """F=1 s, B=2 s per stage, 1 s transfers: worked out on paper, iteration 11 s."""
    problem = uniform_problem(2, 2, act=1e9)
    result = simulate(problem, _plan(problem, gpipe_orders, 2))
    gpu0, gpu1 = (d.name for d in problem.graph.devices)
    assert _spans(result, gpu0) == [("0F0", 0, 1), ("0F1", 1, 2), ("0B0", 7, 9), ("0B1", 9, 11)]
    assert _spans(result, gpu1) == [("1F0", 2, 3), ("1F1", 3, 4), ("1B0", 4, 6), ("1B1", 6, 8)]
    assert _spans(result, "link 1->0") == [("gradient 0B0", 6, 7), ("gradient 0B1", 8, 9)]
    assert result.iteration_s == pytest.approx(11.0)


def test_two_stage_two_microbatch_1f1b_by_hand() -> None:
    """1F1B: the last stage runs 1B0 before 1F1; same 11 s, different order."""
    problem = uniform_problem(2, 2, act=1e9)
    result = simulate(problem, _plan(problem, one_f_one_b_orders, 2))
    gpu0, gpu1 = (d.name for d in problem.graph.devices)
    assert _spans(result, gpu1) == [("1F0", 2, 3), ("1B0", 3, 5), ("1F1", 5, 6), ("1B1", 6, 8)]
    assert _spans(result, gpu0) == [("0F0", 0, 1), ("0F1", 1, 2), ("0B0", 6, 8), ("0B1", 9, 11)]
    assert result.iteration_s == pytest.approx(11.0)


@pytest.mark.parametrize(("network", "expected"), [
    ("ps", [("activation 1F0", 0.5, 2.0), ("activation 1F1", 1.0, 2.5)]),
    ("fifo", [("activation 1F0", 0.5, 1.5), ("activation 1F1", 1.0, 2.5)])])
def test_transfers_share_a_link(network: str, expected: list) -> None:
    """Two activations overlapping on one link: under processor sharing each gets half its
    bandwidth while both move; FIFO (one stream per GPU) sends the second after the first
    (its span starts when it was issued)."""
    problem = replace(uniform_problem(2, 2, f=0.5, act=1e9), network=network)
    result = simulate(problem, _plan(problem, gpipe_orders, 2))
    assert _spans(result, "link 0->1") == expected


@pytest.mark.parametrize("make", [gpipe_orders, one_f_one_b_orders])
@pytest.mark.parametrize(("p", "m"), [(2, 2), (4, 8), (4, 3), (6, 16)])
def test_closed_form_on_uniform_stages(make, p: int, m: int) -> None:
    """Uniform stages, free links: iteration (m+p-1)(f+b), bubble (p-1)/(m+p-1)."""
    problem = uniform_problem(p, m)
    result = simulate(problem, _plan(problem, make, p))
    assert result.iteration_s == pytest.approx((m + p - 1) * 3.0)
    assert result.bubble_fraction == pytest.approx((p - 1) / (m + p - 1))


def test_one_f_one_b_holds_fewer_microbatches() -> None:
    """Peak activation memory: GPipe stashes m microbatches on stage 0, 1F1B only p."""
    chain = synthetic_chain([1.0] * 3, [2.0] * 3, [0.0] * 3, stash_bytes=[100.0] * 3)
    graph = server_graph("g", [(3, 1e12, 2**30, 1e9, 0.0)], 1e9, 0.0)
    problem = PipelineProblem(chain, graph, 8)
    gpipe = simulate(problem, _plan(problem, gpipe_orders, 3))
    ofob = simulate(problem, _plan(problem, one_f_one_b_orders, 3))
    assert gpipe.peak_memory == (800.0, 800.0, 800.0)
    assert ofob.peak_memory == (300.0, 200.0, 100.0)


def test_replicated_stage_all_reduce() -> None:
    """One stage on two GPUs: microbatches alternate, then a ring all-reduce of the
    parameters: 2(r-1)(latency + P/r/bandwidth) = 2 x (1 + 1) s after the last backward."""
    chain = synthetic_chain([1.0], [2.0], [0.0], param_bytes=[2e9])
    graph = server_graph("g", [(2, 1e12, 2**40, 1e9, 1.0)], 1e9, 0.0)
    problem = PipelineProblem(chain, graph, 4)
    stages = (Stage(0, 1, (0, 1)),)
    plan = PipelinePlan("test", stages, gpipe_orders(stages, 2, 4), 4)
    result = simulate(problem, plan)
    assert [a.microbatch for a in plan.orders[1]] == [1, 3, 1, 3]
    assert _spans(result, "s0g0 sync") == [("all-reduce stage 0", 6.0, 10.0)]
    assert result.iteration_s == pytest.approx(10.0)


@pytest.mark.parametrize(("split", "network", "expected"),
                         [(True, "ps", 7.0), (True, "fifo", 7.5), (False, "fifo", 11.0)])
def test_split_stage_by_hand(split: bool, network: str, expected: float) -> None:
    """Stage 0 (F = 2 s, B = 4 s) on GPUs 0 and 1, stage 1 (F = 1 s, B = 2 s) on GPU 2,
    1 GB activations over 1 GB/s links, one microbatch. Split (DAPPLE): each replica runs half
    of it (F 1 s), sends half the bytes on its own link (0.5 s), stage 1 runs 1.5..4.5 s, the
    two halves of the gradient return in 0.5 s at once (ps) or one after the other from GPU
    2's one send stream (fifo: 1 s), the halves of B take 2 s: 7 s (ps), 7.5 s (fifo).
    Round-robin: GPU 0 runs it all: 2 + 1 + 1 + 2 + 1 + 4 = 11 s. Every byte crosses once
    either way, and a split replica stashes half the activations."""
    chain = synthetic_chain([2.0, 1.0], [4.0, 2.0], [1e9, 1e9], stash_bytes=[8.0, 8.0])
    graph = server_graph("g", [(3, 1e12, 2**40, 1e9, 0.0)], 1e9, 0.0)
    problem = PipelineProblem(chain, graph, 1, network=network)
    stages = (Stage(0, 1, (0, 1), split), Stage(1, 2, (2,)))
    plan = PipelinePlan("test", stages, gpipe_orders(stages, 3, 1), 1)
    result = simulate(problem, plan)
    assert result.iteration_s == pytest.approx(expected)
    moved = sum(span.num_bytes for span in result.timeline.spans if span.group == "network")
    assert moved == pytest.approx(2e9)
    assert result.peak_memory[0] == pytest.approx(4.0 if split else 8.0)


def test_split_stages_exchange_overlapping_parts() -> None:
    """Two split stages of 2 and 3 replicas: replica k' of the second gets the overlap of its
    third of each microbatch with each half of the first (1/3, 1/6 + 1/6, 1/3 of the bytes);
    all bytes arrive exactly once and the plan validates with every replica running every
    microbatch."""
    chain = synthetic_chain([1.0, 1.0], [2.0, 2.0], [6e8, 6e8])
    graph = server_graph("g", [(5, 1e12, 2**40, 1e9, 0.0)], 1e9, 0.0)
    problem = PipelineProblem(chain, graph, 2)
    stages = (Stage(0, 1, (0, 1), True), Stage(1, 2, (2, 3, 4), True))
    plan = PipelinePlan("test", stages, one_f_one_b_orders(stages, 5, 2), 2)
    result = simulate(problem, plan)
    received: dict[str, float] = {}
    for span in result.timeline.spans:
        if span.kind == "activation":
            received[span.resource] = received.get(span.resource, 0.0) + span.num_bytes
    assert received == pytest.approx({"link 0->2": 4e8, "link 0->3": 2e8, "link 1->3": 2e8,
                                      "link 1->4": 4e8})
    assert all(len(order) == 4 for order in plan.orders)


def test_split_needs_whole_samples_per_replica() -> None:
    """A microbatch of 4 samples splits across 2 or 4 replicas, not 3; DAPPLE on a chain of
    one sample per microbatch keeps its replicas round-robin."""
    chain = replace(synthetic_chain([1.0], [2.0], [0.0]), samples=4)
    graph = server_graph("g", [(3, 1e12, 2**40, 1e9, 0.0)], 1e9, 0.0)
    problem = PipelineProblem(chain, graph, 2)
    for replicas, fits in ((2, True), (3, False)):
        stages = (Stage(0, 1, tuple(range(replicas)), True),)
        plan = PipelinePlan("test", stages, gpipe_orders(stages, 3, 2), 2)
        if fits:
            assert simulate(problem, plan).iteration_s == pytest.approx(2 * 3.0 / replicas)
        else:
            with pytest.raises(PlanError, match="4 samples across 3 replicas"):
                simulate(problem, plan)
    single = replace(uniform_problem(2, 8, act=1e3), chain=replace(
        uniform_problem(2, 8, act=1e3).chain, samples=1))
    dapple = run_planner(single, "dapple").plan
    assert not any(stage.split for stage in dapple.stages)


def test_split_stage_plan_missing_a_replica_action_is_refused() -> None:
    """Every replica of a split stage must run every microbatch's part."""
    chain = synthetic_chain([1.0], [2.0], [0.0])
    graph = server_graph("g", [(2, 1e12, 2**40, 1e9, 0.0)], 1e9, 0.0)
    problem = PipelineProblem(chain, graph, 2)
    stages = (Stage(0, 1, (0, 1), True),)
    orders = gpipe_orders(stages, 2, 2)
    plan = PipelinePlan("test", stages, (orders[0], orders[1][:-1]), 2)
    with pytest.raises(PlanError, match="missing actions: 0B1"):
        simulate(problem, plan)


def test_over_memory_plan_is_refused() -> None:
    """GPipe's 4 stashed microbatches do not fit: the error names the GPU and shortfall."""
    chain = synthetic_chain([1.0] * 2, [2.0] * 2, [0.0] * 2, stash_bytes=[1e9] * 2)
    graph = server_graph("g", [(2, 1e12, 3 * 10**9, 1e9, 0.0)], 1e9, 0.0)
    problem = PipelineProblem(chain, graph, 4)
    with pytest.raises(ConfigError, match=r"GPU s0g0 needs 4 GB but has 3 GB \(short by 1 GB\)"):
        simulate(problem, _plan(problem, gpipe_orders, 2))
    assert simulate(problem, _plan(problem, one_f_one_b_orders, 2)).iteration_s > 0


def test_deadlock_is_reported_with_the_grid() -> None:
    """Stage 0 waits for 0B1 while stage 1 insists on 1F1 first... a cycle: reported."""
    problem = uniform_problem(2, 2)
    stages = one_gpu_stages(2)
    orders = (
        (Action(0, "F", 0), Action(0, "B", 0), Action(0, "F", 1), Action(0, "B", 1)),
        (Action(1, "F", 1), Action(1, "B", 1), Action(1, "F", 0), Action(1, "B", 0)),
    )
    with pytest.raises(PlanError, match="deadlocks") as error:
        simulate(problem, PipelinePlan("cycle", stages, orders, 2))
    assert ">>" in str(error.value)


def test_same_inputs_same_timeline() -> None:
    """Determinism: two runs give identical spans."""
    problem = uniform_problem(3, 5, act=3e8)
    plan = _plan(problem, one_f_one_b_orders, 3)
    assert simulate(problem, plan).timeline.spans == simulate(problem, plan).timeline.spans


@pytest.mark.parametrize(("p", "m"), [(4, 8), (8, 16), (4, 4)])
def test_zb_h1_closed_form(p: int, m: int) -> None:
    """ZB-H1 with F = I = W = 1 s: m(F+I+W) + (p-1)(F+I-W), and no stage holds more than
    p microbatches (1F1B's first-stage memory)."""
    chain = synthetic_chain([1.0] * p, [2.0] * p, [0.0] * p, stash_bytes=[1.0] * p, split=True)
    graph = server_graph("g", [(p, 1e12, 2**30, 1e9, 0.0)], 1e9, 0.0)
    problem = PipelineProblem(chain, graph, m)
    result = simulate(problem, _plan(problem, zb_h1_orders, p))
    assert result.iteration_s == pytest.approx(3.0 * m + (p - 1))
    assert max(result.peak_memory) == p


@pytest.mark.parametrize("factor", [1.0, 1.5])
def test_split_backward_factor_by_hand(factor: float) -> None:
    """A split backward costs ``factor`` x the full one: with F = 1 s, B = 2 s and an even
    split, every I and W takes ``factor`` s; on one stage the 8 microbatches take
    8(F + I + W) = 8(1 + 2 factor) s, while 1F1B's full backwards take 8(F + B) = 24 s."""
    m = 8
    chain = replace(synthetic_chain([1.0], [2.0], [0.0], split=True),
                    split_backward_factor=factor)
    graph = server_graph("g", [(1, 1e12, 2**30, 1e9, 0.0)], 1e9, 0.0)
    problem = PipelineProblem(chain, graph, m)
    zb = simulate(problem, _plan(problem, zb_h1_orders, 1))
    assert zb.iteration_s == pytest.approx(m * (1 + 2 * factor))
    durations = {span.kind: span.duration for span in zb.timeline.spans}
    assert durations["backward-input"] == pytest.approx(factor)
    assert durations["backward-weight"] == pytest.approx(factor)
    assert simulate(problem, _plan(problem, one_f_one_b_orders, 1)).iteration_s == \
        pytest.approx(3.0 * m)


def test_action_overhead_by_hand() -> None:
    """A GPU's overhead is added to every compute action: one stage, 2 microbatches of
    F = 1 s and B = 2 s with 0.5 s per action: GPipe takes 2(1.5) + 2(2.5) = 8 s; the bound
    counts the overhead in the GPU's work and is met."""
    chain = synthetic_chain([1.0], [2.0], [0.0])
    graph = server_graph("g", [(1, 1e12, 2**30, 1e9, 0.0)], 1e9, 0.0).with_overheads([0.5])
    problem = PipelineProblem(chain, graph, 2)
    plan = _plan(problem, gpipe_orders, 1)
    result = simulate(problem, plan)
    assert result.iteration_s == pytest.approx(8.0)
    assert [s.duration for s in result.timeline.spans] == pytest.approx([1.5, 1.5, 2.5, 2.5])
    assert plan_bound(problem, plan) == pytest.approx(8.0)


def test_transfer_overhead_by_hand() -> None:
    """A GPU's transfer overhead is host time for each activation or gradient it sends or
    receives across GPUs: two stages on two GPUs, one microbatch of F = 1 s, B = 2 s per
    stage, 0.25 s per transfer on 1 GB/s (1 GB: 1 s): F0 1.25 + 1 + F1 1.25 + B1 2.25 + 1 +
    B0 2.25 = 9 s. Both stages on one GPU: nothing crosses, 6 s."""
    chain = synthetic_chain([1.0, 1.0], [2.0, 2.0], [1e9, 1e9])
    graph = server_graph("g", [(2, 1e12, 2**30, 1e9, 0.0)], 1e9, 0.0).with_overheads(
        [0.0, 0.0], [0.25, 0.25])
    problem = PipelineProblem(chain, graph, 1)
    apart = (Stage(0, 1, (0,)), Stage(1, 2, (1,)))
    result = simulate(problem, PipelinePlan("x", apart, gpipe_orders(apart, 2, 1), 1))
    assert result.iteration_s == pytest.approx(9.0)
    computes = sorted(s.duration for s in result.timeline.spans if s.group != "network")
    assert computes == pytest.approx([1.25, 1.25, 2.25, 2.25])
    together = (Stage(0, 1, (0,)), Stage(1, 2, (0,)))
    order = (Action(0, "F", 0), Action(1, "F", 0), Action(1, "B", 0), Action(0, "B", 0))
    assert simulate(problem, PipelinePlan("x", together, (order, ()), 1)).iteration_s == \
        pytest.approx(6.0)


def test_host_transfers_counts_overlapping_parts() -> None:
    """An F of a stage split over GPUs 1 and 2 receives from the one GPU before it and
    sends to the two halves of the stage after it (split over 3 and 4) that overlap its half
    (GPU 1: samples 0-1/2; GPU 3: 0-1/2, GPU 4: 1/2-1: one); a W moves nothing."""
    stages = (Stage(0, 1, (0,)), Stage(1, 2, (1, 2), True), Stage(2, 3, (3, 4), True))
    assert host_transfers(stages, Action(1, "F", 0), 1) == 2
    assert host_transfers(stages, Action(0, "F", 0), 0) == 2
    assert host_transfers(stages, Action(2, "B", 0), 4) == 1
    assert host_transfers(stages, Action(1, "W", 0), 1) == 0


def test_split_backward_factor_survives_recomputation() -> None:
    """Full recomputation puts each block's forward before its input gradient: I + W = the
    recomputed forward + factor x B and W = factor x (1 - fraction) x B, per block."""
    chain = replace(synthetic_chain([1.0, 2.0], [2.0, 4.0], [0.0, 0.0], split=True),
                    input_grad_fraction=0.4, split_backward_factor=1.5)
    full = chain.with_recompute("full")
    inputs, weights = full.grad_shares
    backward = full.backward_flops.sum()
    assert backward * (inputs + weights) == pytest.approx(3e12 + 1.5 * 6e12)
    assert backward * weights == pytest.approx(1.5 * 0.6 * 6e12)


@pytest.mark.parametrize(("p", "m"), [(4, 8), (8, 16), (3, 12)])
@pytest.mark.parametrize("transfer", [0.0, 0.3, 1.0])
def test_zb_h2_closed_form(p: int, m: int, transfer: float) -> None:
    """ZB-H2 with F = I = W = 1 s and transfers of ``c`` s: the extra warm-up forwards cover
    every round trip, so each stage is busy from its first forward on and the iteration is
    m(F+I+W) + (p-1)(F+2c) (the paper's parallelogram plus the head and the last gradient's
    way back); stage s holds its 2(p-s)-1 warm-up microbatches plus s whose W is deferred
    (2p-1 on the first stage, the paper's about 2p); ZB-H1 is never faster and, with
    transfers, slower."""
    chain = synthetic_chain([1.0] * p, [2.0] * p, [transfer * 1e9] * p, stash_bytes=[1.0] * p,
                            split=True)
    graph = server_graph("g", [(p, 1e12, 2**30, 1e9, 0.0)], 1e9, 0.0)
    problem = PipelineProblem(chain, graph, m)
    result = simulate(problem, _plan(problem, zb_h2_orders, p))
    assert result.iteration_s == pytest.approx(3.0 * m + (p - 1) * (1 + 2 * transfer))
    assert list(result.peak_memory) == [2 * p - 1 - s for s in range(p)]
    h1 = simulate(problem, _plan(problem, zb_h1_orders, p)).iteration_s
    assert h1 >= result.iteration_s - 1e-9
    assert (h1 > result.iteration_s + 0.1) == (transfer > 0)
