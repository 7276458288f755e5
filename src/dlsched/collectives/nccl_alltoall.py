"""All-to-All priced as NCCL runs it: grouped point-to-point sends, each peer its own share.

NCCL has no All-to-All algorithm of its own: ``torch.distributed.all_to_all_single`` (what
Megatron-Core's ``all_to_all`` calls) is ``ncclGroupStart``, one ``ncclSend`` and one
``ncclRecv`` per peer, ``ncclGroupEnd`` (PyTorch ``ProcessGroupNCCL::alltoall_base``; nccl-tests
``alltoall.cu`` the same). Each rank therefore sends ``D / P`` bytes of its ``D``-byte buffer
straight to each of its ``P - 1`` peers, ``(P - 1) / P x D`` in all, once: no forwarding, unlike
a halving-doubling (Bruck) exchange that sends ``D / 2`` in each of ``log2 P`` steps. The peers
on the same NVLink domain are reached by the P2P transport over NVLink, the others by the
network transport through the GPU's own NIC; NCCL's grouped operations drive both at once, so
the call takes the longer of the two:

    seconds = latency + max(intra / nvlink_rate, inter / nic_rate)
    intra = (r - 1) / P x D,   inter = (P - r) / P x D

(``r`` ranks per NVLink domain, ``P = r x n`` over ``n`` domains, ``D`` the per-rank buffer).

Rates, each NCCL's own constant (``collectives.nccl``):

- ``nvlink_rate``: the bandwidth NCCL credits a GPU's NVLinks (topo.h ``SM90_NVLINK_BW`` 20.6
  GB/s of a link's nominal 25, ``SM100_NVLINK_BW`` 40.1 of 50: 82.4% and 80.2% of the line
  rate), the GPU's nominal NVLink bandwidth scaled by that ratio. Sylvain Jeaugey (NCCL
  maintainer, NVIDIA/nccl-tests issue #212, 2024-05-06): "450GB/s is the line rate. With the
  protocol overhead (~20%) NCCL can get an effective NVLink bandwidth of 370GB/s, which you
  can observe as BusBw when running non-allreduce operations" (H100: 450 x 20.6 / 25 = 370.8).
- ``nic_rate``: the network speed NCCL's topology search settles on for one NIC
  (``collectives.nccl.SPEEDS_INTER``: 48 GB/s for a 400 Gb/s NIC on Hopper and Blackwell);
  an All-to-All "cannot aggregate the bandwidth of multiple NICs" (Jeaugey, nccl-tests issue
  #267), a 400 Gb/s ConnectX-7 "should achieve up to 48-49 GB/s per NIC" (NVIDIA, ibid.).
- ``latency``: one Simple-protocol step on the slowest link kind in use plus the ring's Simple
  base latency (tuning.cc ``baseLat`` 8.4 us, ``hwLat`` NVLink 3.4 us, network 14 us, the
  network post overhead x 3 for Simple); NCCL's tuner has no point-to-point model, so the
  ring's one-step constants stand for a round of concurrent sends (an assumption).
"""

from __future__ import annotations

from dlsched.collectives.nccl import (
    BASE_LATENCY_US,
    HW_LATENCY_US,
    NET_OVERHEAD_US,
    NVLINK_CREDIT,
    SPEEDS_INTER,
    NcclNode,
)

SIMPLE = 2  # index of the Simple protocol in the tuner's (LL, LL128, Simple) tables


def nvlink_rate(node: NcclNode) -> float:
    """Bytes/s NCCL moves out of one GPU over its NVLinks (module docstring)."""
    credit, nominal = NVLINK_CREDIT[node.arch]
    return node.nvlink_bandwidth * credit / nominal


def nic_rate(node: NcclNode) -> float:
    """Bytes/s NCCL moves through one GPU's NIC (module docstring)."""
    speeds = SPEEDS_INTER[node.arch]
    nic = node.nic_bandwidth / 1e9
    return next((s for s in speeds if s <= nic), speeds[-1]) * 1e9


def alltoall_latency(node: NcclNode, nodes: int) -> float:
    """Seconds of one round of concurrent sends (module docstring)."""
    base = BASE_LATENCY_US["ring"][SIMPLE]
    if nodes > 1:
        step = max(HW_LATENCY_US["net"]["ring"][SIMPLE], 3 * NET_OVERHEAD_US[node.cpu])
    else:
        step = HW_LATENCY_US["nvlink"]["ring"][SIMPLE]
    return (base + step) * 1e-6


def nccl_alltoall_seconds(node: NcclNode, num_bytes: float, ranks_per_node: int,
                          nodes: int) -> float:
    """Seconds of an All-to-All of a ``num_bytes`` buffer per rank over ``ranks_per_node``
    GPUs in each of ``nodes`` NVLink domains, as NCCL runs it (module docstring); 0 for one
    rank or an empty buffer."""
    ranks = ranks_per_node * nodes
    if ranks < 2 or num_bytes <= 0:
        return 0.0
    intra = num_bytes * (ranks_per_node - 1) / ranks
    inter = num_bytes * (ranks - ranks_per_node) / ranks
    transfer = max(intra / nvlink_rate(node), inter / nic_rate(node) if inter else 0.0)
    return alltoall_latency(node, nodes) + transfer
