"""The MoE token dispatch on the network dimensions: Megatron-Core's All-to-All, or a
node-deduplicated two-hop dispatch whose inter-node volume node-limited routing bounds.

Two dispatchers (the plan's ``moe_dispatcher``):

* ``alltoall`` (Megatron-Core's ``--moe-token-dispatcher-type alltoall``): every routed copy
  of a token, ``k`` per token, goes to its expert's rank in one All-to-All over the EP group
  (``job.compute.moe_costs``: a per-GPU buffer of ``T k L h`` 16-bit elements), priced by the
  collectives layer across the group's dimensions. Group-limited routing changes which ranks
  receive the copies, not how many bytes cross the nodes: ``k (N - 1) / N`` copies per token
  leave its node whatever the limit (``N`` the nodes the EP group spans).
* ``deepep`` (Megatron-Core's ``flex`` dispatcher with DeepEP, ``--moe-enable-deepep``; the
  dispatch of the DeepSeek-V3 technical report, Sec. 3.2.2): a token crosses the inter-node
  network once per *node* that holds one of its experts, to the GPU of the same local index
  there, which forwards it over NVLink to the GPUs holding its experts; the two hops are
  pipelined (the report: IB and NVLink communication fully overlapped), so a dispatch takes the
  longer of the two: ``max(inter, intra)`` with

      inter = All-to-All over the group's one-rank-per-node sub-network of T D L h bytes x 2
      intra = All-to-All over the group's ranks inside one node of      T k L h bytes x 2

  ``D`` the expected distinct nodes a token's ``k`` experts lie on (``expected_nodes``; its
  own node among them, which the All-to-All's ``1 / N`` share keeps local) and ``L`` the
  load factor. The combine is the same exchange reversed.

**Node-limited routing** (the model's ``router_groups`` ``G`` and ``router_group_topk``
``g``: DeepSeek-V3's config ``n_group`` 8 and ``topk_group`` 4; Megatron-Core's
``--moe-router-num-groups`` / ``--moe-router-group-topk``): the ``E`` experts form ``G``
contiguous groups of ``E / G``; a token picks ``g`` groups, then its ``k`` experts among
their ``g E / G``. With the EP group's ``E / N`` experts per node and a balanced router
(every choice equally likely, as ``router_imbalance`` 1 assumes), the expected distinct
nodes are, per node, one minus the chance that none of the ``k`` experts (drawn without
replacement) lies on it:

* no groups: ``D = N (1 - C(E - E/N, k) / C(E, k))``;
* ``q = G / N`` groups per node (integer): ``D = N sum_j P(j) (1 - C((g - j) E/G, k) /
  C(g E/G, k))``, ``P(j)`` the hypergeometric chance that ``j`` of the node's ``q`` groups are
  among the ``g`` picked; with one group per node (``G = N``, DeepSeek-V3 on 8 nodes) at most
  ``g`` nodes: ``D <= M = g``;
* ``p = N / G`` nodes per group (integer): ``D = N (g / G) (1 - C(g E/G - E/N, k) /
  C(g E/G, k))``;
* otherwise the bound ``min(k, N, g ceil(N / G))``.

DeepSeek-V3 (E 256, k 8, G 8, g 4) on EP 64 over 8 nodes: ``D = 3.63`` nodes per token
against ``5.28`` without the limit (deduplicated) and 8 copies without deduplication.

* ``hybridep`` (Megatron-Core's ``flex`` dispatcher with the HybridEP backend,
  ``--moe-flex-dispatcher-backend hybridep``: NVIDIA's kernels in DeepEP, deepseek-ai/DeepEP
  PR #420): a token goes once to each *rank* that holds one of its experts (DeepEP's
  per-rank routing map), inside an NVLink domain by TMA copies over NVLink; the combine
  returns one partial sum per token and rank. A rank receives ``T R`` rows of ``h``
  16-bit elements per dispatch, ``R`` the expected distinct ranks a token's ``k`` experts lie
  on (``expected_nodes`` with one "node" per rank: Qwen3's 128 experts, top 8, on EP 8 5.34,
  on EP 32 7.40), its own among them. Inside one domain a dispatch takes ``T R h x 2 /
  dispatch rate`` and a combine ``/ combine rate``, the rates HybridEP's measured algorithm
  bandwidth (received bytes over time, ``HYBRIDEP_RATES``); across domains the inter-node
  part is DeepEP's (each token once per destination node over the NICs, the longer of the
  two stages, as ``deepep`` above).

The split of the EP group into nodes: ranks within the cluster's first dimension (a node of a
node preset; the innermost dimension of a topology file) share a node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from dlsched.hardware import Topology
from dlsched.job.communication.collective_costs import curve

# HybridEP's algorithm bandwidth (bytes a rank receives per second, BF16 dispatch; combine),
# "Torch API" timing, 4,096 tokens of hidden 7,168, top 8, 8 local experts per rank, uniform
# random routing: DeepEP PR #420 (NVIDIA, "Add HybridEP solution for normal mode intranode
# dispatch/combine", 2025-09-21), its Performance Results tables. GB200 at 32 SMs, what
# Megatron-Bridge's performance scripts give HybridEP (scripts/performance/utils/overrides.py:
# moe_hybridep_num_sms = 32); B200 at 16 SMs, the only count measured there (GB200's 8-rank
# row moves 550 / 538 -> 546 / 569 GB/s from 16 to 32 SMs). GPU preset -> ((ranks in the
# NVLink domain, dispatch B/s, combine B/s), ...), ascending ranks; a group uses the row of the
# most ranks it has at least (the first row below that). GPUs not measured there price the
# NVLink stage at NCCL's credited NVLink rate (collectives.nccl_alltoall.nvlink_rate), an
# assumption.
HYBRIDEP_RATES: dict[str, tuple[tuple[int, float, float], ...]] = {
    "b200": ((8, 535.94e9, 530.86e9),),
    "gb200": ((8, 545.71e9, 568.94e9), (16, 523.48e9, 521.55e9), (24, 507.32e9, 483.76e9),
              (32, 484.22e9, 464.54e9), (36, 479.02e9, 447.89e9)),
}


@dataclass(frozen=True)
class NodeSplit:
    """The EP group on its nodes: ``inner`` its ranks inside one node (None: one per node),
    ``outer`` one rank per node, same local index (None: one node), ``nodes`` their count."""

    inner: Topology | None
    outer: Topology | None
    nodes: int


def node_split(cluster: object, stride: int, size: int) -> NodeSplit:
    """The split (``NodeSplit``) of a group of ``size`` ranks ``stride`` apart on ``cluster``
    (a ``job.cluster.System``; its first dimension the node)."""
    per_node = cluster.topology.dims[0].size  # type: ignore[attr-defined]
    inside = max(1, min(size, per_node // stride)) if stride < per_node else 1
    nodes = size // inside
    return NodeSplit(cluster.group_topology(stride, inside),  # type: ignore[attr-defined]
                     cluster.group_topology(stride * inside, nodes),  # type: ignore[attr-defined]
                     nodes)


def _none_hit(pool: int, avoided: int, k: int) -> float:
    """Chance that ``k`` distinct picks from ``pool`` all miss ``avoided`` of its members."""
    if k > pool:
        return 0.0
    return math.comb(pool - avoided, k) / math.comb(pool, k)


@lru_cache(maxsize=1024)
def expected_nodes(experts: int, top_k: int, nodes: int, groups: int = 0,
                   group_topk: int = 0) -> float:
    """Expected distinct nodes a token's ``top_k`` experts lie on (module docstring):
    ``experts`` evenly on ``nodes``, routing limited to ``group_topk`` of ``groups`` groups
    (0: no limit)."""
    per_node = experts // nodes
    if nodes <= 1:
        return 1.0
    if not groups or not group_topk or group_topk >= groups:
        return nodes * (1 - _none_hit(experts, per_node, top_k))
    per_group = experts // groups
    pool = group_topk * per_group
    if groups % nodes == 0:
        q = groups // nodes
        hit = sum(math.comb(q, j) * math.comb(groups - q, group_topk - j)
                  / math.comb(groups, group_topk)
                  * (1 - _none_hit(pool, j * per_group, top_k))
                  for j in range(1, min(q, group_topk) + 1))
        return nodes * hit
    if nodes % groups == 0:
        return nodes * group_topk / groups * (1 - _none_hit(pool, per_node, top_k))
    return float(min(top_k, nodes, group_topk * -(-nodes // groups)))


def deepep_dispatch_seconds(token_bytes: float, top_k: int, distinct_nodes: float,
                            split: NodeSplit, policy: str) -> float:
    """Seconds of one two-hop dispatch (= one combine) of ``token_bytes`` per GPU (its ``T L
    h`` 16-bit elements): ``max(inter, intra)`` of the module docstring."""
    inter = curve(split.outer, "all-to-all", policy).seconds(token_bytes * distinct_nodes)
    intra = curve(split.inner, "all-to-all", policy).seconds(token_bytes * top_k)
    return max(inter, intra)


def inter_node_bytes(token_bytes: float, copies: float, nodes: int) -> float:
    """Bytes one GPU sends across nodes per dispatch: ``copies`` per token (``k`` for the
    All-to-All, ``D`` deduplicated), the ``(N - 1) / N`` of them bound off its node."""
    return token_bytes * copies * (nodes - 1) / nodes


def hybridep_rates(gpu: str, ranks: int, fallback: float) -> tuple[float, float]:
    """(dispatch, combine) bytes/s a rank receives at with HybridEP on ``ranks`` ranks of one
    NVLink domain of ``gpu`` (``HYBRIDEP_RATES``; ``fallback`` for both where not measured)."""
    rows = HYBRIDEP_RATES.get(str(gpu))  # by the GPU's name (a name, or a system's GPU)
    if not rows:
        return fallback, fallback
    row = next((r for r in reversed(rows) if r[0] <= ranks), rows[0])
    return row[1], row[2]


def hybridep_seconds(token_bytes: float, experts: int, top_k: int, split: NodeSplit,
                     rates: tuple[float, float], policy: str) -> float:
    """Seconds of one HybridEP dispatch and its combine (module docstring) of ``token_bytes``
    per GPU (its ``T L h`` 16-bit elements) over an EP group of ``experts`` experts on
    ``split``, at ``rates`` (dispatch, combine) bytes/s inside a domain."""
    ranks = split.nodes * (split.inner.num_npus if split.inner is not None else 1)
    received = token_bytes * expected_nodes(experts, top_k, ranks)
    intra = (received / rates[0], received / rates[1])
    if split.nodes == 1:
        return sum(intra)
    nodes = expected_nodes(experts, top_k, split.nodes)
    inter = curve(split.outer, "all-to-all", policy).seconds(token_bytes * nodes)
    return max(inter, intra[0]) + max(inter, intra[1])
