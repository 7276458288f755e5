"""Memory model (Korthikanti stash, recomputation), PP x DP grid baselines, the in-flight
slots bound and the oracle's proof status."""

from __future__ import annotations

import pytest
from pipeline_cases import one_gpu_stages, uniform_problem

from dlsched.errors import ConfigError
from dlsched.hardware.device_graph import server_graph
from dlsched.models.zoo import get_model
from dlsched.pipeline import (
    PipelinePlan,
    PipelineProblem,
    Stage,
    chain_from_model,
    plan_bound,
    run_planner,
    simulate,
    synthetic_chain,
)
from dlsched.pipeline.chains.memory_model import MemoryModel, transformer_stash
from dlsched.pipeline.planners.oracle import oracle
from dlsched.pipeline.plans.schedules import interleaved_orders, one_f_one_b_orders


def test_korthikanti_stash_per_layer() -> None:
    """16-bit: s b h (34 + 5 a s / h) without, 34 s b h selective, 2 s b h full."""
    s, b, h, a = 2048, 1, 12288, 96
    expected = s * b * h * (34 + 5 * a * s / h)
    assert transformer_stash(s, b, h, a, 2, "none") == pytest.approx(expected)
    assert transformer_stash(s, b, h, a, 2, "selective") == 34 * s * b * h
    assert transformer_stash(s, b, h, a, 2, "full") == 2 * s * b * h


def test_zoo_transformer_chain_under_recomputation() -> None:
    """GPT-3 layer blocks carry the Korthikanti stash; full recomputation adds one forward
    to the backward and keeps the layer input; selective adds the attention core 4 b s^2 h;
    18 bytes of state per parameter (bf16 weights, fp32 gradients, fp32 master weights, Adam);
    fp32 doubles the activation bytes."""
    model = get_model("gpt3-175b")
    chain = chain_from_model(model, 1)
    layer = chain.block_names.index("h.0")
    s, h = 2048, 12288
    assert chain.stash_bytes[layer] == pytest.approx(s * h * (34 + 5 * 96 * s / h))
    assert chain.static_bytes(layer, layer + 1) == pytest.approx(
        18 * sum(x.params for x in model.layers if x.block == "h.0"))
    full = chain.with_recompute("full")
    assert full.backward_flops[layer] == pytest.approx(3 * chain.forward_flops[layer])
    assert full.stash_bytes[layer] == pytest.approx(2 * s * h)
    selective = chain.with_recompute("selective")
    assert selective.backward_flops[layer] - chain.backward_flops[layer] == 4 * s * s * h
    assert selective.stash_bytes[layer] == 34 * s * h
    assert full.with_recompute("none") is chain
    fp32 = chain_from_model(model, 1, memory=MemoryModel("fp32"))
    assert fp32.activation_bytes[layer] == 2 * chain.activation_bytes[layer]
    with pytest.raises(ConfigError, match="recompute: 'some'"):
        chain.with_recompute("some")
    with pytest.raises(ConfigError, match="fp8"):
        MemoryModel("fp8")


@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8)])
def test_full_recomputation_closed_form(p: int, m: int) -> None:
    """Full recomputation on uniform stages: 1F1B takes (m + p - 1)(f + b + f)."""
    problem = uniform_problem(p, m)
    stages = one_gpu_stages(p)
    plan = PipelinePlan("x", stages, one_f_one_b_orders(stages, p, m), m, recompute="full")
    assert simulate(problem, plan).iteration_s == pytest.approx((m + p - 1) * 4.0)


def test_in_flight_slots_bound_by_hand() -> None:
    """Stage 0 holds one microbatch: 4 microbatches run in 4 round trips of f0+f1+b1+b0 =
    6 s = 24 s; the memory-capped 1F1B meets the bound exactly, the memory-blind terms give
    only (m + p - 1)(f + b) = 15 s."""
    chain = synthetic_chain([1.0] * 2, [2.0] * 2, [0.0] * 2, stash_bytes=[100.0, 1.0])
    graph = server_graph("tight", [(2, 1e12, 150, 1e9, 0.0)], 1e9, 0.0)
    problem = PipelineProblem(chain, graph, 4)
    stages = one_gpu_stages(2)
    plan = PipelinePlan("x", stages, one_f_one_b_orders(stages, 2, 4, (1, 1)), 4)
    assert plan_bound(problem, plan) == pytest.approx(24.0)
    assert simulate(problem, plan).iteration_s == pytest.approx(24.0)


def test_interleaved_with_data_parallel_and_uneven_microbatches() -> None:
    """Interleaved 1F1B on 2 pipeline ranks x 2 replicas with 5 microbatches (not a multiple
    of the pipeline degree): every GPU busy, valid, deadlock-free."""
    problem = uniform_problem(4, 5)
    groups = ((0, 1), (2, 3))
    stages = tuple(Stage(s, s + 1, groups[s % 2]) for s in range(4))
    plan = PipelinePlan("x", stages, interleaved_orders(2, 5, groups, 4), 5)
    result = simulate(problem, plan)
    assert all(plan.orders) and result.iteration_s >= plan_bound(problem, plan) * (1 - 1e-9)


def test_grid_baselines_name_their_configuration() -> None:
    """On one server with a tiny model pure data parallelism wins; every grid baseline finds
    it and says so (pp, dp, recompute, schedule)."""
    chain = synthetic_chain([1e-3] * 8, [2e-3] * 8, [1e6] * 8, [1e6] * 8, [1e6] * 8, split=True)
    graph = server_graph("one", [(8, 1e12, 2**34, 1e11, 1e-6)], 1e10, 1e-5)
    problem = PipelineProblem(chain, graph, 16)
    for name in ("gpipe", "1f1b", "zb-h1"):
        row = run_planner(problem, name).row()
        assert (row["pp"], row["dp"], row["recompute"]) == (1, 8, "none"), name


def test_memory_aware_baseline_recomputes_before_giving_up() -> None:
    """When no plain configuration fits, 1F1B recomputes or lowers its warm-up instead of
    failing; the plan fits memory."""
    chain = synthetic_chain([1e-3] * 8, [2e-3] * 8, [1e6] * 8, [1e8] * 8, [2e9] * 8)
    graph = server_graph("tight", [(4, 1e12, 6 * 10**9, 1e11, 1e-6)], 1e10, 1e-5)
    problem = PipelineProblem(chain, graph, 16)
    result = run_planner(problem, "1f1b")
    row = result.row()
    assert row["recompute"] != "none" or row["warm_up"] == "memory-capped"
    assert max(result.sim.peak_memory) <= 6 * 10**9


def test_oracle_reports_proven_optimum() -> None:
    """Small instances are solved to proven optimality: zero gap, lower bound = optimum."""
    problem = uniform_problem(2, 2, act=1e6)
    best = oracle(problem)
    assert best.proven and best.gap == 0.0
    assert best.lower_bound_s == pytest.approx(best.iteration_s)
