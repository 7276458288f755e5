"""Checkpoint size, save and load times of a plan (bytes, seconds, bytes/s).

**What is saved** (Megatron-Core distributed checkpoints, ``megatron/core/dist_checkpointing``):
the 16-bit weights and the optimizer state (FP32 master weights and Adam's two moments under
mixed precision: 2 + 12 B per parameter; ``job.memory``'s ``weights`` and ``optimizer`` parts),
not the gradients (recomputed by the next step). Every state element is written **once**, by
all ranks in parallel, each its shard: a replicated tensor's copies split the write between the
replicas (Megatron-Core's fully parallel save, ``FullyParallelSaveStrategyWrapper``, the default
``--ckpt-fully-parallel-save``). Replication: the weights over the data-parallel ranks (CP x DP)
unless ZeRO 3 shards them; the optimizer state likewise unless ZeRO 1-3 shards it. TP and PP
ranks hold disjoint shards. The plan's memory parts are those of its peak stage; taken for
every stage, the size errs high by the embedding and head's share.

**Saving** at the storage's write bandwidth: each node writes its GPUs' shares through its own
link (``per_node``) and all nodes share the file system's aggregate (``aggregate``); the save
lasts as long as the slower of the two. **Synchronous**: training waits for the whole save.
**Asynchronous** (Megatron-Core ``--async-save``, PyTorch DCP ``async_save``): training waits
only for the snapshot of the GPU's share to pinned host memory over PCIe, then the write runs in
the background; the node needs host memory for its GPUs' shares. **Loading** on restart: every
rank reads its whole state (weights and optimizer part it holds), replicas included.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlsched.errors import ConfigError
from dlsched.units import parse_bandwidth

MODES = ("sync", "async")


@dataclass(frozen=True)
class Storage:
    """Write and read bandwidth (bytes/s) per node and in aggregate (None: not a limit)."""

    name: str
    per_node: float | None
    aggregate: float | None
    source: str


STORAGE = {
    "tectonic": Storage(
        "tectonic", None, 2e12,
        "The Llama 3 Herd of Models (Meta, 2024), Sec. 3.3.1: Tectonic, 240 PB on 7,500 SSD "
        "servers, 2 TB/s sustained throughput (7 TB/s peak); the sustained figure, for writes "
        "and reads alike."),
}
DEFAULT_STORAGE = "tectonic"
PCIE_HOST_BANDWIDTH = {
    "v100": 16e9,  # PCIe Gen3 x16 one direction: 32 GB/s both ways (V100 SXM2 datasheet)
    "a100": 32e9,  # PCIe Gen4 x16 one direction: 64 GB/s both ways (A100 SXM datasheet)
    "h100": 64e9,  # PCIe Gen5 x16 one direction: 128 GB/s both ways (H100 SXM datasheet)
    "h200": 64e9,  # PCIe Gen5 x16 (H200 datasheet)
    "b200": 64e9,  # PCIe Gen5 x16 (DGX B200 datasheet)
    "h800": 64e9,  # PCIe Gen5 x16: the H100 SXM5 board (NVLink cut, PCIe unchanged)
    "h100-hbm2e-96gb": 64e9,  # PCIe Gen5 x16: an H100 SXM5 on Grand Teton's HGX baseboard
    # PCIe Gen5 x16: the B300 links Gen6, but the DGX B300's Xeon 6776P hosts are Gen5
    "b300": 64e9,
    # NVLink-C2C, 900 GB/s both ways per Grace, shared by its two GPUs (NVIDIA GB200 NVL72
    # specifications; each GB200 tray: 2 Grace, 4 GPUs): 225 GB/s per GPU one direction
    "gb200": 225e9,
    "gb300": 225e9,  # the same NVLink-C2C, 2 Grace per 4-GPU tray (GB300 NVL72 specifications)
    # PCIe Gen5 x16 (AMD's MLPerf Inference v4.1 system description 8xMI300X_2xEPYC-9374F:
    # accelerator_host_interconnect "PCIe Gen5 x16")
    "mi300x": 64e9,
}
"""Device-to-host copy bandwidth of the snapshot (bytes/s), the datasheets' PCIe link rate per
direction; a bound the copy does not exceed."""


def load_storage(value: str | float | Storage) -> Storage:
    """A preset name (``STORAGE``), a bandwidth per node ("25 GB/s", or bytes/s) or the file
    system's in all ("200 GB/s total"), for writes and reads alike."""
    if isinstance(value, Storage):
        return value
    if isinstance(value, str) and value in STORAGE:
        return STORAGE[value]
    text = str(value).strip()
    aggregate = text.endswith(" total")
    try:
        bandwidth = parse_bandwidth(text.removesuffix(" total"))
    except ConfigError as error:
        raise ConfigError(f"storage: {value!r} is not accepted; accepted: "
                          f"{', '.join(STORAGE)}, a bandwidth per node such as '25 GB/s' or "
                          f"in all such as '200 GB/s total' ({error})") from None
    if not bandwidth > 0:
        raise ConfigError(f"storage: {value!r} is not accepted; accepted: a bandwidth > 0")
    if aggregate:
        return Storage(text, None, bandwidth, "given")
    return Storage(text, bandwidth, None, "given")


@dataclass(frozen=True)
class CheckpointPlan:
    """One plan's checkpoint (bytes, seconds): ``total_bytes`` written once per checkpoint,
    ``node_bytes`` each node writes, ``save_s`` the write, ``blocking_s`` what training waits
    per checkpoint, ``durable_s`` the background write after it (0 when synchronous),
    ``load_s`` the restart's read, ``host_bytes`` pinned host memory per node (async)."""

    mode: str
    total_bytes: int
    node_bytes: int
    save_s: float
    blocking_s: float
    durable_s: float
    load_s: float
    host_bytes: int


def shard_bytes(weights: float, optimizer: float, zero: int, replicas: int) -> float:
    """Bytes one GPU writes (module docstring): its weights and optimizer bytes, each divided by
    the ranks holding the same copy (``replicas`` = CP x DP unless ZeRO shards that part)."""
    if replicas < 1 or zero not in (0, 1, 2, 3):
        raise ConfigError(f"replicas {replicas}, zero {zero}: accepted: replicas >= 1, zero 0-3")
    weight_copies = 1 if zero >= 3 else replicas
    optimizer_copies = 1 if zero >= 1 else replicas
    return weights / weight_copies + optimizer / optimizer_copies


def _transfer_s(node_bytes: float, total_bytes: float, storage: Storage) -> float:
    times = [0.0]
    if storage.per_node is not None:
        times.append(node_bytes / storage.per_node)
    if storage.aggregate is not None:
        times.append(total_bytes / storage.aggregate)
    return max(times)


def checkpoint_plan(weights: float, optimizer: float, zero: int, replicas: int, gpus: int,
                    gpus_per_node: int, storage: Storage, mode: str = "sync",
                    gpu: str = "h100") -> CheckpointPlan:
    """The checkpoint of a plan whose GPUs hold ``weights`` and ``optimizer`` bytes each."""
    if mode not in MODES:
        raise ConfigError(f"{mode!r} is not accepted; accepted: " + ", ".join(MODES),
                          "checkpoint")
    share = shard_bytes(weights, optimizer, zero, replicas)
    per_node = min(gpus_per_node, gpus)
    node_bytes, total = share * per_node, share * gpus
    save = _transfer_s(node_bytes, total, storage)
    load = _transfer_s((weights + optimizer) * per_node, (weights + optimizer) * gpus, storage)
    if mode == "sync":
        return CheckpointPlan(mode, round(total), round(node_bytes), save, save, 0.0, load, 0)
    snapshot = share / PCIE_HOST_BANDWIDTH.get(gpu, min(PCIE_HOST_BANDWIDTH.values()))
    return CheckpointPlan(mode, round(total), round(node_bytes), save, snapshot, save, load,
                          round(node_bytes))
