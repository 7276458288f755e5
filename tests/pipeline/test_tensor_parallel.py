"""Tensor parallelism as a planning dimension: TP groups, per-GPU chain costs by hand, the
Korthikanti stash with sequence parallelism, one-stage TP plans simulated by hand, the
PP x DP x TP grid, plan files, torch export and the CLI."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.collectives.nccl import NcclNode, nccl_choice
from dlsched.errors import ConfigError
from dlsched.hardware.device_graph import cluster_graph, server_graph
from dlsched.pipeline import (
    BASELINES,
    Chain,
    PipelinePlan,
    PipelineProblem,
    Stage,
    instance_bound,
    load_plan,
    plan_bound,
    run_planner,
    save_plan,
    saved_from_result,
    simulate,
    to_torch,
)
from dlsched.pipeline.chains.model_source import load_chain
from dlsched.pipeline.chains.tensor_parallel import (
    TensorLayout,
    check_degree,
    group_graph,
    ring_allreduce_s,
    tensor_groups,
    tp_allreduce_s,
    valid_degrees,
)
from dlsched.pipeline.plans.schedules import gpipe_orders


def _layer_chain(forward_s: float = 0.010, backward_s: float = 0.020,
                 message_bytes: float = 1e6) -> Chain:
    """One transformer-like block (2 + 2 all-reduce equivalents) on a 1 TFLOP/s GPU."""
    return Chain("toy", ("layer",), np.array([forward_s * 1e12]), np.array([backward_s * 1e12]),
                 np.array([4e6]), np.array([8e6]), np.array([6e6]), input_grad_fraction=0.5,
                 tensor_layout=TensorLayout(((2.0, 2.0),), message_bytes, 8))


def test_ring_allreduce_by_hand() -> None:
    """4 GPUs at 1 GB/s and 2 us: 2 x 3 steps of (2 us + S/4 / 1 GB/s)."""
    graph = cluster_graph(1, 4, flops=1e12, intra=(1e9, 2e-6))
    assert ring_allreduce_s(graph, (0, 1, 2, 3), 4e6) == pytest.approx(6 * (2e-6 + 1e-3))
    assert ring_allreduce_s(graph, (2,), 4e6) == 0.0


def test_tp_allreduce_as_nccl_prices_it_on_an_nvidia_node() -> None:
    """With an NCCL node the TP all-reduce is NCCL's tuner's (collectives.nccl, the evaluator's
    model: 8 A100s credited 240 GB/s, slower than the graph's 300 GB/s ring at 64 MiB); without
    one, or across servers, the ring on the graph's links; the problem's TP chain uses it."""
    graph = cluster_graph(2, 8, flops=1e12, intra=(300e9, 5e-6), inter=(25e9, 5e-6))
    node = NcclNode("ampere", 300e9, 25e9, True, "amd")
    group, size = tuple(range(8)), 64 * 2**20
    nccl = nccl_choice(node, "all-reduce", size, 8, 1).seconds
    assert tp_allreduce_s(graph, group, size, node) == pytest.approx(nccl)
    assert nccl > ring_allreduce_s(graph, group, size)
    assert tp_allreduce_s(graph, group, size) == ring_allreduce_s(graph, group, size)
    across = (0, 8)
    assert tp_allreduce_s(graph, across, size, node) == ring_allreduce_s(graph, across, size)
    chain = _layer_chain(message_bytes=size)
    problem = PipelineProblem(chain, graph, 4, tensor_parallel=(8,), nccl=node)
    assert problem.tensor(8).chain.forward_flops[0] == pytest.approx(
        chain.forward_flops[0] / 8 + 2 * nccl * 1e12)


def test_groups_stay_inside_servers() -> None:
    graph = cluster_graph(2, 4)
    assert tensor_groups(graph, 2) == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert tensor_groups(graph, 4) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    with pytest.raises(ConfigError, match="tensor_parallel: 3 does not divide"):
        tensor_groups(graph, 3)


def test_valid_degrees_follow_model_heads_and_graph() -> None:
    """GPT-3 (96 heads) on 8-GPU servers: 1, 2, 4, 8; GPT-2 XL has 25 heads (1 only, as
    Megatron requires heads divisible by TP); a CNN has no tensor layout; a graph whose
    servers differ accepts 1 only."""
    graph = cluster_graph(2, 8)
    assert valid_degrees(graph, load_chain("gpt3-175b", 1).tensor_layout) == (1, 2, 4, 8)
    assert valid_degrees(graph, load_chain("bert-large", 8).tensor_layout) == (1, 2, 4, 8)
    assert valid_degrees(graph, load_chain("gpt2-xl", 1).tensor_layout) == (1,)
    assert valid_degrees(graph, load_chain("vgg19", 8).tensor_layout) == (1,)
    mixed = server_graph("mixed", [(4, 1e12, 2**34, 300e9, 5e-6), (4, 1e12, 2**34, 32e9, 5e-6)],
                         12.5e9, 1e-5)
    assert valid_degrees(mixed, load_chain("gpt3-175b", 1).tensor_layout) == (1,)
    with pytest.raises(ConfigError, match="identical links"):
        check_degree(mixed, load_chain("gpt3-175b", 1).tensor_layout, 2)
    with pytest.raises(ConfigError, match="tensor layout"):
        PipelineProblem(load_chain("vgg19", 8), graph, 4, tensor_parallel=(2,))


def test_group_graph_links_first_members() -> None:
    graph = cluster_graph(2, 4, intra=(300e9, 5e-6), inter=(25e9, 1e-5))
    grouped = group_graph(graph, tensor_groups(graph, 2))
    assert grouped.num_devices == 4
    assert grouped.devices[1].name == "s0g2..s0g3"
    assert grouped.bandwidth[0, 1] == 300e9 and grouped.bandwidth[0, 2] == 25e9
    assert [d.server for d in grouped.devices] == [0, 0, 1, 1]


def test_tensor_parallel_chain_by_hand() -> None:
    """t = 2, one all-reduce equivalent = 1 ms on a 1 TFLOP/s GPU: forward 10/2 + 2 = 7 ms,
    backward 20/2 + 2 = 12 ms, of which I = 5 + 2 ms and W = 5 ms; bytes halved."""
    chain = _layer_chain()
    tp = chain.with_tensor_parallel(2, 1e-3, 1e12)
    assert tp.forward_flops[0] == pytest.approx(7e9)
    assert tp.backward_flops[0] == pytest.approx(12e9)
    inputs, weights = tp.grad_shares
    assert inputs * 12e-3 == pytest.approx(7e-3) and weights * 12e-3 == pytest.approx(5e-3)
    for name in ("activation_bytes", "param_bytes", "stash_bytes"):
        assert getattr(tp, name)[0] == pytest.approx(getattr(chain, name)[0] / 2)
    full = tp.with_recompute("full")  # the recomputed forward repeats its exchanges
    assert full.backward_flops[0] == pytest.approx(19e9)
    assert chain.with_recompute("full").with_tensor_parallel(2, 1e-3, 1e12).backward_flops[0] \
        == pytest.approx(19e9)


def test_korthikanti_stash_with_sequence_parallelism() -> None:
    """GPT-3 layer at TP 8 with sequence parallelism: s b h (34 + 5 a s / h) / 8 bytes;
    parameters per GPU 1/8; the all-reduce equivalent is a ring over the server's NVLink."""
    chain = load_chain("gpt3-175b", 1)
    problem = PipelineProblem(chain, cluster_graph(1, 8, flops=4e14, intra=(300e9, 5e-6)), 8)
    tp = problem.tensor(8)
    layer = chain.block_names.index("h.0")
    s, h, a = 2048, 12288, 96
    assert tp.chain.stash_bytes[layer] == pytest.approx(s * h * (34 + 5 * a * s / h) / 8)
    assert tp.chain.param_bytes[layer] == pytest.approx(chain.param_bytes[layer] / 8)
    message_s = 14 * (5e-6 + 2 * s * h / 8 / 300e9)
    assert tp.chain.forward_flops[layer] == pytest.approx(
        chain.forward_flops[layer] / 8 + 2 * message_s * 4e14)
    assert tp.graph.num_devices == 1 and tp.gpu_groups == (tuple(range(8)),)


def test_one_stage_tp_plan_by_hand() -> None:
    """One layer on a TP group of 2 GPUs (1 GB/s, no latency: an all-reduce equivalent of
    1 MB takes 2 x 1 x 0.5 MB / 1 GB/s = 1 ms), GPipe over 2 microbatches: 2 x 7 + 2 x 12 ms."""
    problem = PipelineProblem(_layer_chain(), cluster_graph(1, 2, flops=1e12, intra=(1e9, 0.0)),
                              2)
    stages = (Stage(0, 1, (0,)),)
    plan = PipelinePlan("hand", stages, gpipe_orders(stages, 1, 2), 2, tensor_parallel=2)
    result = simulate(problem, plan)
    assert result.iteration_s == pytest.approx(0.038)
    assert plan_bound(problem, plan) == pytest.approx(0.038)
    assert instance_bound(problem) <= result.iteration_s


def test_grid_picks_megatron_tensor_parallelism_for_gpt3() -> None:
    """GPT-3 175B on 8 servers of 8 GPUs: Megatron's choice, TP 8 inside a server and PP 8
    across them, is what the 1F1B grid picks; without TP nothing fits without
    recomputation, and TP beats the best TP 1 plan; bound never beaten."""
    chain = load_chain("gpt3-175b", 1)
    graph = cluster_graph(8, 8, flops=4e14, intra=(300e9, 5e-6), inter=(25e9, 1e-5))
    problem = PipelineProblem(chain, graph, 32)
    result = run_planner(problem, "1f1b")
    assert (result.plan.tensor_parallel, result.plan.num_stages) == (8, 8)
    assert result.row()["gpus_used"] == 64 and result.row()["tp"] == 8
    assert result.bound_s <= result.sim.iteration_s * (1 + 1e-9)
    assert result.instance_bound_s <= result.sim.iteration_s
    flat = run_planner(replace(problem, tensor_parallel=(1,)), "1f1b")
    assert flat.plan.tensor_parallel == 1 and flat.plan.recompute != "none"
    assert result.sim.iteration_s < flat.sim.iteration_s


def test_tp_plan_file_round_trip_and_torch_refusal(tmp_path: Path) -> None:
    problem = PipelineProblem(_layer_chain(), cluster_graph(1, 2, flops=1e12, intra=(1e9, 0.0)),
                              2, tensor_parallel=(2,))
    result = run_planner(problem, "gpipe")
    assert result.plan.tensor_parallel == 2
    path = save_plan(saved_from_result(result, 1), tmp_path / "tp.json")
    saved = load_plan(path)
    assert saved.plan == result.plan and saved.device_names == ("s0g0..s0g1",)
    assert simulate(problem, saved.plan).iteration_s == pytest.approx(result.sim.iteration_s)
    with pytest.raises(ConfigError, match="tensor parallelism 2"):
        to_torch(saved.plan)
    with pytest.raises(ConfigError, match="degree 1 only"):
        replace(problem, replicate=False)


@pytest.mark.parametrize(("value", "message"), [
    ("3", "tensor_parallel: 3 does not divide"), ("0", "--tensor-parallel"),
    ("two", "--tensor-parallel")])
def test_cli_bad_tensor_parallel_exits_2(run_cli, value: str, message: str) -> None:
    code, _, err = run_cli("pipeline", "plan", "--model", "bert-large", "--devices",
                           "2x8-NVLink-100Gb", "--planner", "1f1b", "--tensor-parallel", value)
    assert code == 2
    assert message in " ".join(err.split())


def test_dlsched_searches_tensor_parallel_and_is_never_slower() -> None:
    """An 8-layer chain with 2 GB of state per layer on 4 GB GPUs (1 GB per layer at TP 2):
    dlsched plans at TP above 1 and is never slower than any baseline, each searching its own
    space (the grid ones over TP too)."""
    rng = np.random.default_rng(3)
    n = 8
    chain = Chain("toy", tuple(f"h.{i}" for i in range(n)), rng.uniform(2e9, 4e9, n),
                  rng.uniform(4e9, 8e9, n), np.full(n, 4e6), np.full(n, 5e8), np.full(n, 5e7),
                  state_factor=4.0, tensor_layout=TensorLayout(((2.0, 2.0),) * n, 4e6, 8))
    graph = cluster_graph(2, 4, flops=1e12, memory=4 * 2**30, intra=(300e9, 5e-6),
                          inter=(12.5e9, 1e-5))
    problem = PipelineProblem(chain, graph, 4)
    assert problem.degrees() == (1, 2, 4)
    ours = run_planner(problem, "dlsched")
    assert ours.plan.tensor_parallel > 1
    assert ours.sim.iteration_s >= ours.bound_s * (1 - 1e-9)
    for name in BASELINES:
        try:
            theirs = run_planner(problem, name).sim.iteration_s
        except ConfigError:
            continue
        assert ours.sim.iteration_s <= theirs * (1 + 1e-9), name


@settings(max_examples=40, deadline=None)
@given(st.integers(3, 6), st.integers(1, 2), st.sampled_from([2, 4]), st.integers(1, 6),
       st.sampled_from(["gpipe", "1f1b", "zb-h1", "zb-v", "interleaved"]),
       st.integers(0, 10**6))
def test_tp_plans_never_beat_their_bounds(blocks: int, servers: int, per_server: int, m: int,
                                          name: str, seed: int) -> None:
    """Random layered chains on random clusters, every TP degree: each grid baseline's plan at
    that degree is no faster than its plan bound, and no faster than the instance bound of the
    GPUs themselves (TP only adds work)."""
    rng = np.random.default_rng(seed)
    chain = Chain("toy", tuple(f"h.{i}" for i in range(blocks)),
                  rng.uniform(1e9, 4e9, blocks), rng.uniform(2e9, 8e9, blocks),
                  rng.uniform(1e5, 1e8, blocks), rng.uniform(1e6, 1e8, blocks),
                  rng.uniform(1e6, 1e8, blocks), input_grad_fraction=rng.uniform(0.3, 0.7),
                  tensor_layout=TensorLayout(((2.0, 2.0),) * blocks, float(rng.uniform(1e5, 1e8)),
                                             8))
    graph = cluster_graph(servers, per_server, flops=1e12, intra=(rng.uniform(1e10, 3e11), 5e-6),
                          inter=(rng.uniform(1e9, 2.5e10), 1e-5))
    root = PipelineProblem(chain, graph, m, network=str(rng.choice(["fifo", "ps"])))
    for t in root.degrees():
        try:
            result = run_planner(replace(root, tensor_parallel=(t,)), name)
        except ConfigError:
            continue
        assert result.plan.tensor_parallel == t
        assert result.sim.iteration_s >= result.bound_s * (1 - 1e-9)
        assert result.sim.iteration_s >= instance_bound(root) * (1 - 1e-9)
