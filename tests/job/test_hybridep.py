"""The flex dispatcher's HybridEP backend and the All-to-All dispatcher's chunk sorts
(job.communication.moe_dispatch, job.compute.moe_costs), checked by hand."""

from __future__ import annotations

import math

import pytest

from dlsched.job.cluster import node_cluster
from dlsched.job.communication.moe_dispatch import (
    expected_nodes,
    hybridep_rates,
    hybridep_seconds,
    node_split,
)
from dlsched.job.compute.moe_costs import chunk_sorts, moe_layer_costs, routed_ops
from dlsched.job.execution import Execution
from dlsched.job.model_spec import Model

SMALL = Model("moe-small", 4, 1024, 8, 1024, 32000, ffn_hidden=2048, kv_heads=8,
              tied_embeddings=False, gated_ffn=True, bias=False, rms_norm=True,
              learned_positions=False, experts=8, top_k=2)


def test_rates_by_ranks_in_the_domain() -> None:
    # DeepEP PR #420, Torch API: B200 8 ranks at 16 SMs; GB200 by ranks at 32 SMs
    assert hybridep_rates("b200", 8, 1.0) == (535.94e9, 530.86e9)
    assert hybridep_rates("gb200", 32, 1.0) == (484.22e9, 464.54e9)
    assert hybridep_rates("gb200", 20, 1.0) == (523.48e9, 521.55e9)  # the 16-rank row
    assert hybridep_rates("gb200", 64, 1.0) == (479.02e9, 447.89e9)  # the most measured, 36
    assert hybridep_rates("gb200", 4, 1.0) == (545.71e9, 568.94e9)  # fewer than 8: the first
    assert hybridep_rates("h100", 8, 370.8e9) == (370.8e9, 370.8e9)  # not measured


def test_one_domain_receives_each_token_once_per_rank() -> None:
    # Qwen3's 128 experts, top 8, on EP 8: 8 (1 - C(112, 8) / C(128, 8)) = 5.34 ranks a token
    ranks = 8 * (1 - math.comb(112, 8) / math.comb(128, 8))
    assert ranks == pytest.approx(5.34, abs=0.01)
    assert expected_nodes(128, 8, 8) == pytest.approx(ranks)
    cluster = node_cluster("dgx-b200", 8)
    split = node_split(cluster, 1, 8)
    token = 16384 * 2048 * 2.0  # T h 16-bit bytes
    rates = hybridep_rates("b200", 8, 0.0)
    assert hybridep_seconds(token, 128, 8, split, rates, "baseline") == pytest.approx(
        token * ranks / 535.94e9 + token * ranks / 530.86e9)


def test_the_evaluator_prices_hybridep_without_chunk_sorts() -> None:
    cluster = node_cluster("dgx-b200", 8)
    layout = Execution(1, 1, 8, 1, 8, ep=4)  # 2 local experts per rank
    group, split = layout.group("ep", cluster), node_split(cluster, *layout.group_ranks("ep"))
    hybrid = moe_layer_costs(SMALL, layout, "b200", "bf16", None, group, "baseline",
                             dispatcher="hybridep", ep_split=split)
    token = 1024 * 1024 * 2.0
    rates = hybridep_rates("b200", 4, 0.0)
    assert hybrid.a2a_forward_s == pytest.approx(
        hybridep_seconds(token, 8, 2, split, rates, "baseline"))
    nccl = moe_layer_costs(SMALL, layout, "b200", "bf16", None, group, "baseline")
    # the All-to-All dispatcher's forward has the two chunk sorts HybridEP does not run
    assert nccl.layer_f - nccl.a2a_forward_s > hybrid.layer_f - hybrid.a2a_forward_s


def test_chunk_sorts_read_and_write_every_received_row() -> None:
    _, experts, _ = routed_ops(SMALL, 1, 1, 4)  # 2 local experts: 1024 x 2 rows received
    sorted_ops = chunk_sorts(SMALL, experts, 4)
    assert sorted_ops[:len(experts)] == experts
    sort, restore = sorted_ops[len(experts):]
    assert (sort.label, restore.label) == ("sort-chunks", "restore-chunks")
    assert sort.elements == restore.elements == 2 * 1024 * 2 * 1024  # read and write
    _, one_each, _ = routed_ops(SMALL, 1, 1, 8)  # one local expert: nothing to sort
    assert chunk_sorts(SMALL, one_each, 8) == one_each
