"""Node-limited routing and the deduplicated two-hop dispatch (``job.communication.
moe_dispatch``): the expected distinct nodes against exhaustive enumeration, the bound M, and
the dispatch priced on the network dimensions."""

from __future__ import annotations

import itertools
import math

import pytest

from dlsched.errors import ConfigError
from dlsched.job.cluster import node_cluster
from dlsched.job.communication.collective_costs import curve
from dlsched.job.communication.moe_dispatch import (
    deepep_dispatch_seconds,
    expected_nodes,
    inter_node_bytes,
    node_split,
)
from dlsched.job.model_spec import Model
from dlsched.job.run_choices import check_setting


def _enumerated(experts: int, k: int, nodes: int, groups: int, topk: int) -> float:
    """Mean distinct nodes over every equally likely routing (groups, then experts)."""
    per_node, per_group = experts // nodes, experts // (groups or 1)
    total, count = 0.0, 0
    for chosen in itertools.combinations(range(groups or 1), topk or 1):
        pool = [e for g in chosen for e in range(g * per_group, (g + 1) * per_group)]
        for picked in itertools.combinations(pool, k):
            total += len({e // per_node for e in picked})
            count += 1
    return total / count


@pytest.mark.parametrize(("experts", "k", "nodes", "groups", "topk"), [
    (16, 3, 4, 0, 0), (16, 3, 4, 4, 2), (16, 4, 2, 4, 2), (16, 3, 4, 2, 1),
    (24, 2, 4, 8, 3), (12, 2, 6, 4, 2)])
def test_expected_nodes_equal_enumeration(experts: int, k: int, nodes: int, groups: int,
                                          topk: int) -> None:
    value = expected_nodes(experts, k, nodes, groups, topk)
    if groups and groups % nodes and nodes % groups:  # neither divides: the stated bound
        assert value == min(k, nodes, topk * math.ceil(nodes / groups))
        assert _enumerated(experts, k, nodes, groups, topk) <= value
    else:
        assert value == pytest.approx(_enumerated(experts, k, nodes, groups, topk))


def test_deepseek_v3_routing_stays_within_four_nodes() -> None:
    limited = expected_nodes(256, 8, 8, 8, 4)
    free = expected_nodes(256, 8, 8)
    assert limited <= 4 < free < 8
    assert limited == pytest.approx(3.629, abs=1e-3)
    # by hand: P(own group chosen) = C(7,3)/C(8,4) = 1/2; P(no expert there | chosen) =
    # C(96, 8) / C(128, 8)
    assert limited == pytest.approx(8 * 0.5 * (1 - math.comb(96, 8) / math.comb(128, 8)))
    token = 1000.0
    assert inter_node_bytes(token, limited, 8) == pytest.approx(token * limited * 7 / 8)


def test_node_split_and_dispatch_on_the_network_dimensions() -> None:
    cluster = node_cluster("dgx-h100", 64)
    split = node_split(cluster, 1, 64)  # EP 64 over 8 nodes of 8
    assert split.nodes == 8 and split.inner is not None and split.outer is not None
    assert split.inner.num_npus == 8 and split.outer.num_npus == 8
    token = 4096 * 7168 * 2.0
    nodes = expected_nodes(256, 8, 8, 8, 4)
    seconds = deepep_dispatch_seconds(token, 8, nodes, split, "baseline")
    inter = curve(split.outer, "all-to-all", "baseline").seconds(token * nodes)
    intra = curve(split.inner, "all-to-all", "baseline").seconds(token * 8)
    assert seconds == max(inter, intra) and inter > intra  # the NICs are the slower hop
    plain = curve(cluster.group_topology(1, 64), "all-to-all", "baseline").seconds(token * 8)
    assert seconds < plain
    free = deepep_dispatch_seconds(token, 8, expected_nodes(256, 8, 8), split, "baseline")
    assert seconds < free
    one_node = node_split(cluster, 1, 8)
    assert one_node.nodes == 1 and one_node.outer is None
    assert deepep_dispatch_seconds(token, 8, 1.0, one_node, "baseline") == \
        curve(one_node.inner, "all-to-all", "baseline").seconds(token * 8)


def test_router_groups_are_checked() -> None:
    base = Model(name="t", layers=2, hidden=64, heads=4, seq=128, vocab=100,
                 experts=16, top_k=4)
    with pytest.raises(ConfigError, match="router_groups"):
        base.replace(router_groups=5, router_group_topk=2)
    with pytest.raises(ConfigError, match="router_group_topk"):
        base.replace(router_groups=4, router_group_topk=5)
    with pytest.raises(ConfigError, match=r"^moe_dispatcher: 'flex' is not accepted"):
        check_setting("moe_dispatcher", "flex")


def test_the_evaluator_prices_the_dispatcher_and_the_node_limit() -> None:
    from dlsched.job.compute.moe_costs import moe_layer_costs
    from dlsched.job.execution import Execution
    from dlsched.job.model_spec import bundled_specs

    deepseek = bundled_specs()["deepseek-v3"]
    assert (deepseek.router_groups, deepseek.router_group_topk) == (8, 4)
    free = deepseek.replace(router_groups=0, router_group_topk=0)
    cluster = node_cluster("dgx-h100", 64)
    layout = Execution(tp=1, pp=1, dp=64, microbatch_size=1, global_batch=64, ep=64)
    group, split = layout.group("ep", cluster), node_split(cluster, *layout.group_ranks("ep"))

    def a2a(spec: Model, dispatcher: str) -> float:
        return moe_layer_costs(spec, layout, "h100", "bf16", None, group, "baseline",
                               dispatcher=dispatcher,
                               ep_split=split if dispatcher == "deepep" else None
                               ).a2a_forward_s

    token = 4096 * 7168 * 2.0  # T h 16-bit bytes
    probs = 4096 * 8 * 4.0  # the dispatcher's FP32 routing probabilities, one per copy
    assert a2a(deepseek, "alltoall") == a2a(free, "alltoall") == \
        2 * curve(group, "all-to-all", "baseline").seconds(8 * token) \
        + curve(group, "all-to-all", "baseline").seconds(probs)
    assert a2a(deepseek, "deepep") == 2 * deepep_dispatch_seconds(
        token, 8, expected_nodes(256, 8, 8, 8, 4), split, "baseline")
    assert a2a(deepseek, "deepep") < a2a(free, "deepep") < a2a(deepseek, "alltoall")
