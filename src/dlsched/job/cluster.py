"""What the job runs on: GPUs on a multi-dimensional network (the job planner's third input).

A ``Cluster`` is a ``Topology`` (dimension 1 innermost), the compute preset of its GPUs
(``hardware.gpu``: ``a100``, ``h100``, a GPU file), each GPU's memory and the training
precision. It comes from a node preset scaled to ``gpus`` GPUs (``hardware.nodes``: ``dgx-a100``,
``dgx-h100``, ``dgx-b200``, ``gb200-nvl72``, ``mi300x-8``, ...: a dimension of the node's GPUs,
an NVSwitch, a 72-GPU NVLink domain or AMD's fully connected Infinity Fabric, a ring over a
domain that is not a power of two, then a non-blocking fabric of one NIC per GPU,
modelled as a switch dimension over the nodes: halving-doubling when the nodes are a power of
two, logarithmic in steps as NCCL's trees are, a ring otherwise) or from a multi-dimensional
topology preset or file (``3D-FC_Ring_SW``; its NPUs are the GPUs). A group that uses part of
a ring dimension is priced as a ring of its members (the wrap-around link assumed).

Ranks are laid out as Megatron-Core lays them out (``--order`` default tp-cp-ep-dp-pp,
``megatron/core/parallel_state.py``): tensor-parallel ranks innermost, then context-parallel,
then data-parallel (the expert-parallel ranks of the MoE layers carved out of the CP x DP ones
next to TP), pipeline outermost: the TP group is ranks ``1`` apart, CP ``tp`` apart, DP
``tp x cp`` apart, PP ``tp x cp x dp`` apart. ``group_topology`` gives the sub-network a
group of ranks spans: one dimension per network dimension the group crosses, with as many NPUs
as the group has there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dlsched.errors import ConfigError
from dlsched.hardware.gpu import get_gpu
from dlsched.hardware.nodes import node_presets
from dlsched.hardware.topology import Dimension, Topology
from dlsched.job.communication.nccl_costs import NcclGroup, NcclNode, nccl_node

GIB = 2**30


# The node presets (presets/nodes.yaml, with their sources) and each GPU's memory
# (presets/gpus.yaml ``memory``).
NODE_PRESETS = node_presets()


@dataclass(frozen=True)
class Cluster:
    """GPUs on a network (see the module docstring): ``memory`` bytes per GPU."""

    name: str
    topology: Topology
    gpu: str
    memory: int
    source: str = ""
    nccl: NcclNode | None = None

    @property
    def num_gpus(self) -> int:
        """GPUs in the cluster."""
        return self.topology.num_npus

    def group_topology(self, stride: int, size: int) -> Topology | None:
        """The network a group of ``size`` ranks ``stride`` apart spans (ranks laid out
        innermost dimension first; None for a group of one); ConfigError when the group is
        not a product of whole sub-blocks of the dimensions (it would need links the topology
        does not name)."""
        if size == 1:  # a group of one: no links (its collectives cost nothing)
            return None
        dims, reach = [], 1
        for dim in self.topology.dims:
            low, high = reach, reach * dim.size
            reach = high
            covered_low, covered_high = max(low, stride), min(high, stride * size)
            if covered_high <= covered_low:
                continue
            count = covered_high // covered_low
            if covered_high % covered_low or covered_low % low:
                raise ConfigError(f"layout: a group of {size} ranks {stride} apart does not "
                                  f"align with the dimensions {self.topology.shape}")
            dims.append(Dimension(dim.kind, count, dim.bandwidth, dim.latency, dim.algorithm))
        if math.prod(d.size for d in dims) != size:
            raise ConfigError(f"layout: a group of {size} ranks {stride} apart does not align "
                              f"with the dimensions {self.topology.shape}")
        name = f"{self.name}[{stride}x{size}]"
        if self.nccl is None:
            return Topology(name, tuple(dims))
        return NcclGroup(name, tuple(dims), self.nccl, *self._per_node(stride, size))

    def _per_node(self, stride: int, size: int) -> tuple[int, int]:
        """(ranks per node, nodes) of a group of ``size`` ranks ``stride`` apart on a node
        preset's cluster (dimension 1 the node)."""
        per_node = self.topology.dims[0].size
        inside = max(1, min(size, per_node // stride)) if stride < per_node else 1
        return inside, size // inside


def node_cluster(preset: str, gpus: int, gpu: str | None = None,
                 domain: int | None = None) -> Cluster:
    """``gpus`` GPUs of the node preset ``preset`` (a multiple of its node size, or fewer
    GPUs than one node). ``domain``: GPUs the job uses of each node (its NVLink domain), at
    most the node's; None: all of them. A scheduler can place a job on part of each domain
    (Slurm's ``--segment``: Megatron-Bridge's GB200 scripts run 256 GPUs as four segments of
    64 in NVL72 racks), then the domains hold ``domain`` GPUs each and the rest of the job's
    traffic crosses the NICs."""
    node = NODE_PRESETS[preset]
    size = node.gpus if domain is None else domain
    if not 1 <= size <= node.gpus:
        raise ConfigError(f"domain: {domain} GPUs per {preset} node; accepted: 1 to "
                          f"{node.gpus}")
    if gpus < 1 or (gpus > size and gpus % size):
        raise ConfigError(f"--gpus: {gpus} must be a multiple of {size} (GPUs per "
                          f"{preset} node) or at most {size}")
    inside = min(gpus, size)
    dims = [Dimension(node.kind, inside, *node.nvlink,
                      algorithm="ring" if node.kind == "Switch" and inside & (inside - 1)
                      else None)]
    if gpus > size:
        nodes = gpus // size
        dims.append(Dimension("Switch", nodes, *node.nic, algorithm=None if nodes & (nodes - 1)
                              == 0 else "ring"))
    name = gpu or node.gpu
    nccl = nccl_node(preset, node.gpu, node.nvlink[0], node.nic[0], node.kind == "Switch")
    label = preset if size == node.gpus else f"{preset}/{size}"
    return Cluster(f"{gpus}x{label}", Topology(f"{label}-{gpus}", tuple(dims)), name,
                   gpu_memory_or(name, node.gpu), node.source, nccl)


def gpu_memory_or(gpu: str, fallback: str) -> int:
    """Bytes of memory of GPU preset or file ``gpu`` (``--gpu``), else of preset
    ``fallback``; ConfigError naming the presets when ``gpu`` is neither a preset nor a file."""
    try:
        memory = get_gpu(gpu).spec.memory
    except ConfigError as error:
        raise ConfigError(f"--gpu: {error}".replace("device: ", "")) from None
    return memory if memory is not None else int(get_gpu(fallback).spec.memory or 80 * GIB)


def load_cluster(name: str, gpus: int | None, gpu: str | None) -> Cluster:
    """A node preset scaled to ``gpus``, or a topology preset or file whose NPUs are the GPUs
    (``gpus``, when given, must equal its NPU count)."""
    if name in NODE_PRESETS:
        if gpus is None:
            raise ConfigError(f"--gpus: needed with the node preset {name!r} (a multiple of "
                              f"{NODE_PRESETS[name].gpus})")
        return node_cluster(name, gpus, gpu)
    from dlsched.hardware import load_topology

    try:
        topology = load_topology(name)
    except ConfigError as error:
        raise ConfigError(f"--cluster: {error}; accepted: {', '.join(NODE_PRESETS)}, a "
                          "topology preset (dlsched topologies) or a topology file") from None
    if gpus is not None and gpus != topology.num_npus:
        raise ConfigError(f"--gpus: {gpus} differs from the {topology.num_npus} NPUs of "
                          f"{name!r}")
    chosen = gpu or "a100"
    return Cluster(topology.name, topology, chosen, gpu_memory_or(chosen, "a100"),
                   f"topology {topology.name} ({topology.shape})")
