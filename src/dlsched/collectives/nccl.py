"""All-reduce, all-gather and reduce-scatter priced as NCCL prices them for its own choice.

One model for every layer that prices NVIDIA collectives: the job evaluator (through
``job.communication.nccl_costs``, its adapter to node presets and groups) and the pipeline
domain's tensor-parallel all-reduces (``pipeline.chains.problem``, which ``reproduce megatron``
and the a100 preset's GEMM fit run through), so that the fit and the evaluator price TP alike.

NCCL picks, per call, the algorithm (ring, tree, NVLS) and protocol (LL, LL128, Simple) with the
least predicted time ``latency + bytes / bandwidth`` (``ncclTopoGetAlgoTime``); this module
evaluates the same model with NCCL's constants and returns that minimum. Sources, all in
NVIDIA/nccl (read, not copied):

- ``src/graph/tuning.cc`` at b6475625fbcaa2c3c0e50eed2fa1255d7514d4a2 (NCCL 2.20.3):
  ``baseLat`` and ``hwLat`` (us per algorithm x protocol, NVLink or network), the per-channel
  bandwidth caps (``llMaxBws``, ``perChMaxRingLL128Bws``, ``perChMaxTreeLL128Bws``,
  ``perChMaxTreeBws``), the protocol fractions (LL 1/4 of the ring's bus bandwidth, 1/3 on
  all-gather and reduce-scatter in one node, 1/3.8 on trees; LL128 0.92, 0.7 at one GPU per
  node; trees 0.92, x 0.85 on Hopper's tree pattern, LL128 trees 7/9 in a node, 120/128
  across), bus to algorithm bandwidth (ring n / steps, tree 1/2, NVLS 5/6), the latency sums
  (ring: per step; tree: 2 x (GPUs per node - 1) intra + 2 log2(nodes) network hops; NVLS one
  NVLink latency, NVLS-tree plus 2 log2(nodes) network hops), the network post overhead
  (``getNetOverhead``: 1 us on Intel, 2 us on AMD hosts, x 3 for Simple), the ring's plateau
  (x 1.4 latency for a multi-node Simple all-reduce from Ampere on) and
  ``treeCorrectionFactor`` (per power of two from 64 B to 256 MiB);
- ``src/graph/topo.h`` at 069a3d4f95ca488dc63ba7ae659a2db77942a62e: the bandwidth NCCL
  credits one NVLink (``SM80_NVLINK_BW`` 20.0 GB/s, ``SM90_NVLINK_BW`` 20.6,
  ``SM100_NVLINK_BW`` 40.1; a link is nominally 25 GB/s per direction on NVLink 3 and 4,
  50 GB/s on NVLink 5);
- ``src/graph/search.cc``: ``speedArrayIntra``/``Inter`` and their sm90 / sm100 versions
  (NCCL 2.2x; read in copies of the file, not at a stored NVIDIA/nccl commit), the per-channel
  speeds the topology search tries, highest first; channels of 25 GB/s or more are split in
  two (``ncclTopoCompute``'s duplication, at 2dfd83752cc17e7962fb2842c44bfcc0216c8b40).

Simplified, each said where it applies: the search is taken to find the first speed of its
array that the GPU's NVLinks (or, across nodes, its NIC) can carry, and as many channels of it
as fit (at most 16 before the split); across nodes each GPU of the group drives its own NIC (one
NIC per GPU, as every node preset has) and a network plugin latency of 0 (InfiniBand's); the
NVLS channels carry the ring's NVLink bandwidth; CollNet (SHARP) is not modelled (it needs the
switch plugin). Times are for one call of a buffer of ``num_bytes`` (the whole buffer: for
all-gather the gathered output, for reduce-scatter its input, as NCCL sizes them), seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

OPS = ("all-reduce", "all-gather", "reduce-scatter")
PROTOCOLS = ("LL", "LL128", "Simple")
ARCHS = ("volta", "ampere", "hopper", "blackwell")

# tuning.cc baseLat, us: algorithm -> (LL, LL128, Simple)
BASE_LATENCY_US = {"tree": (6.8, 14.0, 0.0), "ring": (6.6, 14.0, 8.4),
                   "nvls": (0.0, 0.0, 0.0), "nvls-tree": (0.0, 0.0, 0.0)}
# tuning.cc hwLat, us: link -> algorithm -> (LL, LL128, Simple)
HW_LATENCY_US = {
    "nvlink": {"tree": (0.6, 1.25, 28.0), "ring": (0.6, 1.9, 3.4), "nvls": (0.0, 0.0, 23.0),
               "nvls-tree": (0.0, 0.0, 23.0)},
    "net": {"tree": (5.0, 8.5, 28.0), "ring": (2.7, 4.0, 14.0), "nvls": (0.0, 0.0, 18.0),
            "nvls-tree": (0.0, 0.0, 14.0)},
}
# tuning.cc per-channel caps, GB/s: [compute-capability row][nodes: 1, 2, >2]
_ARCH_ROW = {"volta": 0, "ampere": 1, "hopper": 2, "blackwell": 2}  # >= sm90 uses Hopper's row
LL_MAX_BW = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (87.7, 22.5, 19.0))
RING_LL128_PER_CHANNEL = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7))
TREE_LL128_PER_CHANNEL = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0))
TREE_PER_CHANNEL = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0))
# tuning.cc treeCorrectionFactor: protocol -> factor per log2(bytes / 64), 64 B to 256 MiB
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0,
     1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9,
     1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9,
     .9),
)
# topo.h: GB/s NCCL credits one NVLink, and the link's nominal GB/s per direction
NVLINK_CREDIT = {"volta": (20.0, 25.0), "ampere": (20.0, 25.0), "hopper": (20.6, 25.0),
                 "blackwell": (40.1, 50.0)}
# search.cc: per-channel speeds tried, GB/s, highest first
SPEEDS_INTRA = {"volta": (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0,
                          3.0),
                "hopper": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
                "blackwell": (90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0)}
SPEEDS_INTRA["ampere"] = SPEEDS_INTRA["volta"]
SPEEDS_INTER = {"volta": (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0,
                          5.0, 4.0, 3.0, 2.4, 1.2),
                "hopper": (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0,
                           6.0, 3.0, 2.4, 1.2),
                "blackwell": (96.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0,
                              12.0, 6.0, 3.0, 2.4, 1.2)}
SPEEDS_INTER["ampere"] = SPEEDS_INTER["volta"]
MAX_SEARCH_CHANNELS = 16  # MAXCHANNELS / 2: the search's channels before the split
NET_OVERHEAD_US = {"intel": 1.0, "amd": 2.0, "arm": 1.0}  # tuning.cc getNetOverhead


@dataclass(frozen=True)
class NcclNode:
    """What NCCL sees of a server: the GPUs' ``arch`` (one of ``ARCHS``), the NVLink bandwidth
    per GPU per direction ``nvlink_bandwidth`` (B/s) through an NVSwitch (``nvswitch``), one
    NIC per GPU of ``nic_bandwidth`` (B/s) and the host CPU's vendor ``cpu``."""

    arch: str
    nvlink_bandwidth: float
    nic_bandwidth: float
    nvswitch: bool = True
    cpu: str = "intel"


@dataclass(frozen=True)
class NcclChoice:
    """NCCL's pick for one call: ``algorithm``, ``protocol`` and its ``seconds``."""

    algorithm: str
    protocol: str
    seconds: float


def _channels(speeds: tuple[float, ...], total_gbps: float) -> tuple[int, float]:
    """(channels, GB/s each) the search finds on ``total_gbps`` (module docstring)."""
    speed = next((s for s in speeds if s <= total_gbps), speeds[-1])
    count = max(1, min(MAX_SEARCH_CHANNELS, int(total_gbps // speed)))
    return (2 * count, speed / 2) if speed >= 25.0 else (count, speed)


def _graph(node: NcclNode, ranks_per_node: int, nodes: int) -> tuple[int, float]:
    """(channels, bus GB/s per channel) of the ring and tree graphs: in one node as many
    channels as the NVLinks carry; across nodes the speed one NIC carries, on as many channels
    as the group's NICs (one per GPU) and the NVLinks carry."""
    credit, nominal = NVLINK_CREDIT[node.arch]
    nvlink = node.nvlink_bandwidth / (nominal * 1e9) * credit
    if nodes == 1:
        return _channels(SPEEDS_INTRA[node.arch], nvlink)
    nic = node.nic_bandwidth / 1e9
    speeds = SPEEDS_INTER[node.arch]
    speed = next((s for s in speeds if s <= nic), speeds[-1])
    count = max(1, min(MAX_SEARCH_CHANNELS, ranks_per_node * int(nic // speed),
                       int(nvlink // speed)))
    return (2 * count, speed / 2) if speed >= 25.0 else (count, speed)


def _bus_bandwidth(node: NcclNode, op: str, algorithm: str, protocol: int, ranks: int,
                   ranks_per_node: int, nodes: int) -> float:
    """Algorithm bandwidth, GB/s, of ``algorithm`` x ``PROTOCOLS[protocol]`` (tuning.cc)."""
    channels, per_channel = _graph(node, ranks_per_node, nodes)
    row, column = _ARCH_ROW[node.arch], min(nodes, 3) - 1
    ll_max = LL_MAX_BW[row if nodes == 1 else (1 if node.cpu == "amd" else 0)][column]
    bus = channels * per_channel
    if algorithm == "ring":
        if protocol == 0:
            bus = min(ll_max, bus * (0.25 if nodes > 1 or op == "all-reduce" else 1 / 3))
        elif protocol == 1:
            bus = min(bus * (0.7 if ranks_per_node < 2 else 0.92),
                      channels * RING_LL128_PER_CHANNEL[row][column])
        steps = 2 * (ranks - 1) if op == "all-reduce" else ranks - 1
        return bus * ranks / steps
    if algorithm == "tree":
        bus = min(bus * 0.92, channels * TREE_PER_CHANNEL[row][column])
        if protocol == 0:
            bus = min(bus / 3.8, ll_max)
        elif protocol == 1:
            bus = min(bus * (7 / 9 if nodes == 1 else 120 / 128),
                      channels * TREE_LL128_PER_CHANNEL[row][column])
        if row == 2:  # Hopper on: the tree pattern, not the balanced tree
            bus *= 0.85
        return bus * 0.5
    return bus * 5 / 6  # NVLS and NVLS-tree (the ring's NVLink bandwidth, module docstring)


def _latency_us(node: NcclNode, op: str, algorithm: str, protocol: int, ranks: int,
                ranks_per_node: int, nodes: int) -> float:
    """Latency, us, of ``algorithm`` x ``PROTOCOLS[protocol]`` (tuning.cc)."""
    intra = HW_LATENCY_US["nvlink"][algorithm][protocol]
    inter = HW_LATENCY_US["net"][algorithm][protocol]
    base = BASE_LATENCY_US[algorithm][protocol]
    hops = int(math.log2(nodes))
    if algorithm == "ring":
        steps = 2 * (ranks - 1) if op == "all-reduce" else ranks - 1
        inter_steps = (2 * nodes if op == "all-reduce" else nodes - 1) if nodes > 1 else 0
        if nodes > 1:
            overhead = NET_OVERHEAD_US[node.cpu] * (3 if protocol == 2 else 1)
            intra = max(intra, overhead)
        return base + (steps - inter_steps) * intra + inter_steps * inter
    if algorithm == "tree":
        return base + 2 * ((ranks_per_node - 1) * intra + hops * inter)
    if algorithm == "nvls":
        return intra + (inter if nodes > 1 else 0.0)
    return base + intra + 2 * hops * inter  # nvls-tree


def _candidates(node: NcclNode, op: str, ranks_per_node: int, nodes: int):
    """The (algorithm, protocol index) pairs NCCL enables for ``op`` on this group."""
    nvls = node.nvswitch and node.arch in ("hopper", "blackwell") and ranks_per_node > 1
    for protocol in range(3):
        yield "ring", protocol
        if op == "all-reduce":
            yield "tree", protocol
    if nvls and nodes == 1:
        yield "nvls", 2
    if nvls and nodes > 1 and op == "all-reduce":
        yield "nvls-tree", 2


def nccl_choice(node: NcclNode, op: str, num_bytes: float, ranks_per_node: int,
                nodes: int) -> NcclChoice:
    """NCCL's fastest algorithm x protocol for ``op`` on a ``num_bytes`` buffer over
    ``ranks_per_node`` GPUs in each of ``nodes`` nodes, and its time (seconds)."""
    ranks = ranks_per_node * nodes
    if ranks < 2 or num_bytes <= 0:
        return NcclChoice("none", "none", 0.0)
    best = None
    for algorithm, protocol in _candidates(node, op, ranks_per_node, nodes):
        bandwidth = _bus_bandwidth(node, op, algorithm, protocol, ranks, ranks_per_node, nodes)
        latency = _latency_us(node, op, algorithm, protocol, ranks, ranks_per_node, nodes)
        if algorithm == "tree":
            log_size = max(0, int(math.log2(max(1, int(num_bytes) >> 6))))
            if log_size < len(TREE_CORRECTION[protocol]):
                bandwidth *= TREE_CORRECTION[protocol][log_size]
        if algorithm == "ring" and protocol == 2 and nodes > 1 and op == "all-reduce":
            latency *= 1.9 if node.arch == "volta" else 1.4  # the ring's plateau
        seconds = latency * 1e-6 + num_bytes / (bandwidth * 1e9)
        if best is None or seconds < best.seconds:
            best = NcclChoice(algorithm, PROTOCOLS[protocol], seconds)
    return best


# The GPU generation of each node preset's GPU, and the host CPU where it is not Intel's
# (NVIDIA DGX A100 datasheet: 2x AMD EPYC 7742; GB200 NVL72: Grace, Arm).
GPU_ARCH = {"a100": "ampere", "h100": "hopper", "h100-hbm2e-96gb": "hopper", "h200": "hopper",
            "h800": "hopper", "b200": "blackwell", "gb200": "blackwell",
            "b300": "blackwell", "gb300": "blackwell"}
# GB300 NVL72: Grace, Arm, as GB200 NVL72 (Blackwell Ultra is NCCL's Blackwell: compute
# capability 10.x).
HOST_CPU = {"dgx-a100": "amd", "gb200-nvl72": "arm", "gb300-nvl72": "arm"}


def nccl_node(preset: str, gpu: str, nvlink_bandwidth: float, nic_bandwidth: float,
              nvswitch: bool) -> NcclNode | None:
    """The ``NcclNode`` of node preset ``preset`` with GPUs ``gpu`` (None for GPUs NCCL does
    not run on, such as AMD's: RCCL has its own tuner)."""
    arch = GPU_ARCH.get(gpu)
    if arch is None:
        return None
    return NcclNode(arch, nvlink_bandwidth, nic_bandwidth, nvswitch, HOST_CPU.get(preset, "intel"))
