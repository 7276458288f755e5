"""Device graphs: arbitrary GPUs and the links between every pair, for pipeline mapping.

Units: ``flops`` is a GPU's sustained FLOP/s, ``memory`` bytes, ``bandwidth[i][j]`` bytes/s
from GPU ``i`` to GPU ``j``, ``latency[i][j]`` seconds per transfer, a GPU's ``overhead``
seconds per compute action and its ``transfer_overhead`` seconds per activation or gradient it
sends to or receives from another GPU. A graph is built from
per-server groups (NVLink/PCIe inside, a NIC between servers), from a full matrix, or from a
multi-dimensional ``Topology`` of the Themis issue; all three load from YAML/JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from dlsched.errors import ConfigError
from dlsched.hardware.topology import Topology
from dlsched.validation import BANDWIDTH, DATA_SIZE, DEVICES, FLOP_RATE, LATENCY


@dataclass(frozen=True)
class Device:
    """One GPU: sustained compute ``flops`` (FLOP/s), ``memory`` (bytes), its ``server`` index,
    and ``overhead``: fixed seconds its runtime adds to every compute action (pipeline F, B,
    I, W) beside the FLOP (framework dispatch; calibrated for CPU torch ranks, 0 for GPUs
    whose launches overlap the compute); ``peak``: the datasheet's dense FLOP/s of the
    training precision (what MFU divides by; None when not given); ``transfer_overhead``:
    seconds of its host's time per activation or gradient it sends to or receives from
    another GPU (posting and completing the operation; calibrated for CPU torch ranks, whose
    transport shares their cores; 0 where a copy engine moves the bytes)."""

    name: str
    flops: float
    memory: int
    server: int = 0
    overhead: float = 0.0
    peak: float | None = None
    transfer_overhead: float = 0.0


@dataclass(frozen=True, eq=False)
class DeviceGraph:
    """GPUs and a full pairwise link matrix (bandwidth B/s, latency s; the diagonal is unused)."""

    name: str
    devices: tuple[Device, ...]
    bandwidth: np.ndarray
    latency: np.ndarray

    def with_overheads(self, overheads: list[float],
                       transfer_overheads: list[float] | None = None) -> DeviceGraph:
        """This graph with ``overheads[k]`` seconds per compute action on GPU ``k`` and
        ``transfer_overheads[k]`` seconds per send or receive to or from another GPU (each
        GPU's own kept when None)."""
        transfers = (transfer_overheads if transfer_overheads is not None
                     else [d.transfer_overhead for d in self.devices])
        devices = tuple(replace(d, overhead=float(o), transfer_overhead=float(t))
                        for d, o, t in zip(self.devices, overheads, transfers, strict=True))
        return DeviceGraph(self.name, devices, self.bandwidth, self.latency)

    def __post_init__(self) -> None:
        n = len(self.devices)
        if n == 0:
            raise ConfigError("devices: a device graph needs at least one GPU")
        for field, matrix in (("bandwidth", self.bandwidth), ("latency", self.latency)):
            if matrix.shape != (n, n):
                raise ConfigError(f"{field}: expected a {n}x{n} matrix, got shape {matrix.shape}")
        DEVICES.check(n, "devices")
        off = ~np.eye(n, dtype=bool)
        if n > 1 and not (self.bandwidth[off] > 0).all():
            raise ConfigError("bandwidth: every pair of distinct GPUs needs bandwidth > 0")
        BANDWIDTH.check_array(np.where(off, self.bandwidth, BANDWIDTH.high), "bandwidth")
        LATENCY.check_array(np.where(off, self.latency, 0.0), "latency")
        for device in self.devices:
            FLOP_RATE.check(device.flops, f"devices: {device.name}: flops")
            if device.memory <= 0:
                raise ConfigError(f"devices: {device.name} needs memory > 0")
            DATA_SIZE.check(device.memory, f"devices: {device.name}: memory")

    @property
    def num_devices(self) -> int:
        """Number of GPUs."""
        return len(self.devices)

    def server_gpus(self) -> dict[int, list[int]]:
        """The GPU indices of each server, in index order (servers in order of first GPU)."""
        servers: dict[int, list[int]] = {}
        for index, device in enumerate(self.devices):
            servers.setdefault(device.server, []).append(index)
        return servers

    @property
    def flops(self) -> np.ndarray:
        """Per-GPU sustained FLOP/s as an array."""
        return np.array([d.flops for d in self.devices])

    def transfer_time(self, src: int, dst: int, num_bytes: float) -> float:
        """Seconds to move ``num_bytes`` alone on the link ``src -> dst`` (0 on the same GPU)."""
        if src == dst:
            return 0.0
        return float(self.latency[src, dst] + num_bytes / self.bandwidth[src, dst])

    def describe(self) -> str:
        """One line: GPU count, servers, FLOP/s and link bandwidth range."""
        n = self.num_devices
        servers = len({d.server for d in self.devices})
        off = self.bandwidth[~np.eye(n, dtype=bool)] if n > 1 else np.array([0.0])
        return (f"{self.name}: {n} GPUs in {servers} server(s), "
                f"{min(self.flops) / 1e12:.4g}-{max(self.flops) / 1e12:.4g} TFLOP/s, "
                f"links {off.min() / 1e9:.4g}-{off.max() / 1e9:.4g} GB/s")


def server_graph(name: str, servers: list[tuple[int, float, int, float, float]],
                 inter_bandwidth: float, inter_latency: float,
                 peaks: list[float | None] | None = None) -> DeviceGraph:
    """GPUs grouped in servers: ``servers`` lists (count, flops, memory, intra bandwidth B/s,
    intra latency s); GPUs of different servers talk over ``inter_bandwidth``/``inter_latency``;
    ``peaks`` the datasheet peak FLOP/s of each server's GPUs (for MFU; None: unknown)."""
    DEVICES.check(sum(server[0] for server in servers), "devices: GPUs of all servers")
    devices, owner = [], []
    peaks = peaks or [None] * len(servers)
    for index, (count, flops, memory, _, _) in enumerate(servers):
        for local in range(count):
            devices.append(Device(f"s{index}g{local}", flops, memory, index,
                                  peak=peaks[index]))
            owner.append(index)
    server_of = np.array(owner)
    same = server_of[:, None] == server_of[None, :]
    intra_bw = np.array([s[3] for s in servers])[server_of]
    intra_lat = np.array([s[4] for s in servers])[server_of]
    bandwidth = np.where(same, intra_bw[:, None], inter_bandwidth).astype(float)
    latency = np.where(same, intra_lat[:, None], inter_latency).astype(float)
    return DeviceGraph(name, tuple(devices), bandwidth, latency)


def cluster_graph(num_servers: int, gpus_per_server: int, flops: float = 125e12,
                  memory: int = 80 * 2**30, intra: tuple[float, float] = (300e9, 5e-6),
                  inter: tuple[float, float] = (12.5e9, 10e-6),
                  peak: float | None = None) -> DeviceGraph:
    """A homogeneous cluster of ``num_servers`` x ``gpus_per_server`` GPUs (B/s, s per link;
    ``peak`` FLOP/s for MFU)."""
    spec = (gpus_per_server, flops, memory, *intra)
    return server_graph(f"{num_servers}x{gpus_per_server}", [spec] * num_servers, *inter,
                        peaks=[peak] * num_servers)


def graph_from_topology(topology: Topology, count: int | None = None, flops: float = 400e12,
                        memory: int = 80 * 2**30, peak: float | None = None) -> DeviceGraph:
    """The first ``count`` NPUs of a multi-dimensional topology: two NPUs talk over the
    outermost dimension in which their coordinates differ (its per-NPU bandwidth and latency)."""
    total = topology.num_npus
    n = total if count is None else count
    if not 1 <= n <= total:
        raise ConfigError(f"count: {n} is outside 1..{total} NPUs of {topology.name}")
    DEVICES.check(n, "count" if count is not None else f"devices: NPUs of {topology.name}")
    coords = np.array([_coordinates(rank, [d.size for d in topology.dims]) for rank in range(n)])
    differs = coords[:, None, :] != coords[None, :, :]
    outer = np.where(differs.any(axis=2),
                     len(topology.dims) - 1 - np.argmax(differs[:, :, ::-1], axis=2), 0)
    bandwidth = np.array([d.bandwidth for d in topology.dims])[outer]
    latency = np.array([d.latency for d in topology.dims])[outer]
    first = topology.dims[0].size
    devices = tuple(Device(f"npu{rank}", flops, memory, rank // first, peak=peak)
                    for rank in range(n))
    return DeviceGraph(f"{topology.name}[{n}]", devices, bandwidth, latency)


def _coordinates(rank: int, sizes: list[int]) -> list[int]:
    coords = []
    for size in sizes:
        coords.append(rank % size)
        rank //= size
    return coords
