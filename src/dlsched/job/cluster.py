"""What the job runs on: GPUs on a multi-dimensional network (the job planner's third input).

A ``System`` (the one type) is its GPU, the full GPU document
(``hardware.gpu.GpuSpec``: compute constants, ``memory`` in bytes, sources and provenance; a
preset name, a GPU file or the document itself), its node (``hardware.nodes.Node``) and its
network: a ``Topology`` (dimension 1 innermost). It is loadable from one YAML/JSON file, the
system file (``dlsched plan --cluster my-system.yaml``): ``gpu`` (a preset name, a GPU file or
an inline GPU document), ``node`` (a node preset name or an inline node document, as
presets/nodes.yaml writes one), ``gpus``, optionally ``domain``; or ``gpu`` and ``network`` (a
topology preset, file or inline ``{name, dims}``) instead of a node. It comes from a node
preset scaled to ``gpus`` GPUs (``hardware.nodes``: ``dgx-a100``,
``dgx-h100``, ``dgx-b200``, ``gb200-nvl72``, ``dgx-b300``, ``gb300-nvl72``, ``mi300x-8``,
...: a dimension of the node's GPUs,
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
as the group has there. On a node preset a group some of whose copies straddle an NVLink
domain unevenly (a DP group of 16 on two 72-GPU racks: ranks 64-79) is priced as its worst
copy (``job.group_placement``) and the plan says so; a topology file refuses it.
"""

from __future__ import annotations

import math
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dlsched.config import config_error, load_document, own_error, validate_document
from dlsched.errors import ConfigError
from dlsched.hardware.gpu import GpuSpec, get_gpu
from dlsched.hardware.nodes import Node, node_presets
from dlsched.hardware.topology import DimAlgorithm, Dimension, Topology
from dlsched.job.communication.nccl_costs import NcclGroup, NcclNode, nccl_node
from dlsched.job.group_placement import Placement, placement

GIB = 2**30

# The node presets (presets/nodes.yaml, with their sources; each a ``hardware.nodes.Node``).
NODE_PRESETS = node_presets()
# The node preset of a plan that names neither a cluster nor a GPU with a node preset of its own
# (``node_of_gpu``).
DEFAULT_CLUSTER = "dgx-a100"
# The GPU of a topology system that names none (the default of ``--gpu``; ``job.refusals``
# prints it with the plan).
TOPOLOGY_GPU = "a100"


def node_of_gpu(gpu: str | None) -> str:
    """The node preset a plan runs on when it names no cluster: the first node preset
    (presets/nodes.yaml's order) built of ``gpu``, so that ``--gpu h200`` alone plans DGX H200
    nodes rather than H200s in DGX A100 nodes; ``DEFAULT_CLUSTER`` when ``gpu`` is None, a GPU
    file or a preset no node carries."""
    return next((name for name, node in NODE_PRESETS.items() if gpu is not None
                 and node.gpu == gpu), DEFAULT_CLUSTER)


def _gpu_document(value: Any) -> Any:
    """A system's ``gpu`` as its full document: a preset name or a GPU file read and validated
    (ConfigError of field ``gpu`` naming the presets otherwise); a document passes as it is."""
    if isinstance(value, str | Path):
        try:
            return get_gpu(value).spec
        except ConfigError as error:
            raise error.renamed("gpu") from None
    return value


class System(BaseModel):
    """What the job runs on (see the module docstring): ``gpu`` the GPU document (``memory``
    bytes per GPU), ``node`` the server type scaled to ``gpus`` (at most ``domain`` GPUs of
    each node's NVLink domain), or ``network`` a multi-dimensional topology whose NPUs are the
    GPUs; ``name`` and ``source`` for the record."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)
    name: str = ""
    gpu: GpuSpec
    node: Node | None = None
    gpus: int | None = Field(default=None, ge=1)
    domain: int | None = Field(default=None, ge=1)
    network: Topology | None = None
    source: str = ""

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as error:  # a check's own one-line error, else the fields'
            raise (own_error(error) or config_error(error, "system", type(self))) from None

    @model_validator(mode="before")
    @classmethod
    def _resolve(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        node = data.get("node")
        if isinstance(node, str):
            if node not in NODE_PRESETS:
                raise ConfigError(f"node: unknown node preset {node!r}; accepted: "
                                  + ", ".join(NODE_PRESETS) + " or a node document")
            data["node"] = NODE_PRESETS[node]
        elif isinstance(node, dict):
            data["node"] = Node.model_validate(node)
        network = data.get("network")
        if isinstance(network, str | dict):
            from dlsched.hardware import load_topology
            from dlsched.hardware.topology_config import topology_from_data

            data["network"] = (load_topology(network) if isinstance(network, str)
                               else topology_from_data(network, "network"))
        gpu = data.get("gpu")
        if gpu is None and isinstance(data.get("node"), Node):
            gpu = data["node"].gpu
        data["gpu"] = _gpu_document(gpu if gpu is not None else TOPOLOGY_GPU)
        return data

    @model_validator(mode="after")
    def _check(self) -> System:
        if (self.node is None) == (self.network is None):
            raise ConfigError("system: give a node (with gpus) or a network, one of the two")
        if self.node is not None:
            self._check_node(self.node)
        else:
            assert self.network is not None
            if self.gpus is not None and self.gpus != self.network.num_npus:
                raise ConfigError(f"{self.gpus} differs from the {self.network.num_npus} NPUs "
                                  f"of {self.network.name!r}", "gpus")
        if self.gpu.memory is None:  # a GPU file without memory: the node's GPU's, else 80 GiB
            fallback = get_gpu(self.node.gpu if self.node is not None else TOPOLOGY_GPU)
            memory = fallback.spec.memory or 80 * GIB
            object.__setattr__(self, "gpu", self.gpu.model_copy(update={"memory": memory}))
        if not self.name:
            object.__setattr__(self, "name", self._default_name())
        if not self.source:
            object.__setattr__(self, "source", self.node.source if self.node is not None else
                               f"topology {self.topology.name} ({self.topology.shape})")
        return self

    def _check_node(self, node: Node) -> None:
        size = node.gpus if self.domain is None else self.domain
        if not 1 <= size <= node.gpus:
            raise ConfigError(f"domain: {self.domain} GPUs per {node.name} node; accepted: 1 "
                              f"to {node.gpus}")
        gpus = self.gpus
        if gpus is None:
            raise ConfigError(f"needed with the node preset {node.name!r} (a multiple of "
                              f"{node.gpus})", "gpus")
        if gpus > size and gpus % size:
            raise ConfigError(f"{gpus} must be a multiple of {size} (GPUs per {node.name} "
                              f"node) or at most {size}", "gpus")

    @property
    def _label(self) -> str:
        node = self.node
        assert node is not None
        return node.name if self.domain in (None, node.gpus) else f"{node.name}/{self.domain}"

    def _default_name(self) -> str:
        if self.node is None:
            assert self.network is not None
            return self.network.name
        return f"{self.gpus}x{self._label}"

    @cached_property
    def topology(self) -> Topology:
        """The job's network, dimension 1 innermost: the node's dimension of the GPUs it uses
        (a ring over a domain that is not a power of two) and a switch over the nodes
        (halving-doubling over a power of two, a ring otherwise); or ``network``."""
        if self.node is None:
            assert self.network is not None
            return self.network
        node, gpus = self.node, int(self.gpus or 0)
        size = node.gpus if self.domain is None else self.domain
        inside = min(gpus, size)
        dims = [Dimension(node.kind, inside, *node.nvlink,
                          algorithm="ring" if node.kind == "Switch" and inside & (inside - 1)
                          else None)]
        if gpus > size:
            nodes = gpus // size
            dims.append(Dimension("Switch", nodes, float(node.nic.bandwidth),
                                  float(node.nic.latency),
                                  algorithm=None if nodes & (nodes - 1) == 0 else "ring"))
        return Topology(f"{self._label}-{gpus}", tuple(dims))

    @cached_property
    def nccl(self) -> NcclNode | None:
        """NCCL's view of the node (``collectives.nccl``; None on a topology system or GPUs
        NCCL does not run on)."""
        node = self.node
        if node is None:
            return None
        return nccl_node(node.name, node.gpu, node.nvlink[0], float(node.nic.bandwidth),
                         node.kind == "Switch")

    @property
    def memory(self) -> int:
        """Bytes of memory per GPU (the GPU document's)."""
        return int(self.gpu.memory or 0)

    @property
    def num_gpus(self) -> int:
        """GPUs in the system."""
        return self.topology.num_npus

    def with_gpu(self, gpu: str | GpuSpec) -> System:
        """This system with the GPU preset, file or document ``gpu`` instead."""
        return System(**{**dict(self), "gpu": gpu, "name": self.name, "source": self.source})

    @classmethod
    def load(cls, document: Any, source: str, gpus: int | None = None,
             gpu: str | None = None) -> System:
        """A system file's document (``source`` names it in errors); ``gpus`` and ``gpu``
        (the options) replace the file's when given."""
        if not isinstance(document, dict):
            raise ConfigError(f"invalid {source}: a system is a mapping of gpu, node, gpus, "
                              "domain, network, name, source")
        data = {**document, **({"gpus": gpus} if gpus is not None else {}),
                **({"gpu": gpu} if gpu is not None else {})}
        return validate_document(cls, data, source, "system")

    def group_topology(self, stride: int, size: int) -> Topology | None:
        """The network a group of ``size`` ranks ``stride`` apart spans (ranks laid out
        innermost dimension first; None for a group of one). On a node preset's cluster: its
        ranks per NVLink domain and the domains it crosses (``job.group_placement``: a group
        some of whose copies straddle a domain boundary unevenly is priced as its worst
        copy). On a topology: ConfigError when the group is not a product of whole
        sub-blocks of the dimensions (it would need links the topology does not name)."""
        if size == 1:  # a group of one: no links (its collectives cost nothing)
            return None
        name = f"{self.name}[{stride}x{size}]"
        if self.node is None:
            return Topology(name, self._aligned_dims(stride, size))
        shape = self.placement(stride, size)
        assert shape is not None  # a node preset's group of two or more
        domain, *fabric = self.topology.dims
        dims = []
        if shape.per_node > 1:
            dims.append(_part(domain, shape.per_node))
        if shape.nodes > 1:
            dims.append(_part(fabric[0], shape.nodes))
        if self.nccl is None:
            return Topology(name, tuple(dims))
        return NcclGroup(name, tuple(dims), self.nccl, shape.per_node, shape.nodes)

    def placement(self, stride: int, size: int) -> Placement | None:
        """The shape a group of ``size`` ranks ``stride`` apart is priced on: ranks per NVLink
        domain, domains, and whether some copy straddles a domain boundary unevenly
        (``job.group_placement``; None on a topology or for a group of one)."""
        if size == 1 or self.node is None:
            return None
        return placement(self.topology.dims[0].size, self.num_gpus, stride, size)

    def _aligned_dims(self, stride: int, size: int) -> tuple[Dimension, ...]:
        """A topology's dimensions a group of ``size`` ranks ``stride`` apart spans, one per
        dimension it crosses (ConfigError when it is not aligned with them)."""
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
        return tuple(dims)


def _part(dim: Dimension, size: int) -> Dimension:
    """``size`` NPUs of ``dim``: its links, and its algorithm unless that is a switch's
    halving-doubling, which needs a power of two (then a ring, as ``System.topology``
    prices a switch over a count that is not one)."""
    halving = dim.algorithm is DimAlgorithm.HALVING_DOUBLING and size & (size - 1)
    return Dimension(dim.kind, size, dim.bandwidth, dim.latency,
                     algorithm="ring" if halving else dim.algorithm)


# The old name of the type (the same class).


def node_cluster(preset: str, gpus: int, gpu: str | None = None,
                 domain: int | None = None) -> System:
    """``gpus`` GPUs of the node preset ``preset`` (a multiple of its node size, or fewer
    GPUs than one node). ``domain``: GPUs the job uses of each node (its NVLink domain), at
    most the node's; None: all of them. A scheduler can place a job on part of each domain
    (Slurm's ``--segment``: Megatron-Bridge's GB200 scripts run 256 GPUs as four segments of
    64 in NVL72 racks), then the domains hold ``domain`` GPUs each and the rest of the job's
    traffic crosses the NICs."""
    node = NODE_PRESETS[preset]
    if gpus < 1:
        raise ConfigError(f"{gpus} must be a multiple of {domain or node.gpus} (GPUs per "
                          f"{preset} node) or at most {domain or node.gpus}", "gpus")
    return System(gpu=gpu or node.gpu, node=node, gpus=gpus, domain=domain)


def is_system_file(name: str) -> bool:
    """Whether ``name`` is a YAML/JSON file holding a system (not a topology: no ``dims``)."""
    if not name.lower().endswith((".yaml", ".yml", ".json")) or not Path(name).is_file():
        return False
    document = load_document(name)
    return isinstance(document, dict) and "dims" not in document


def load_cluster(name: str, gpus: int | None, gpu: str | None) -> System:
    """A node preset scaled to ``gpus``, a system file, or a topology preset or file whose
    NPUs are the GPUs (``gpus``, when given, must equal its NPU count). A name none of
    these, or a system file's own error: ConfigError of field ``cluster``; ``gpus`` that do
    not fit, or a ``gpu`` no preset or file: of field ``gpus`` / ``gpu`` (the CLI names its
    options)."""
    if name in NODE_PRESETS:
        if gpus is None:
            raise ConfigError(f"needed with the node preset {name!r} (a multiple of "
                              f"{NODE_PRESETS[name].gpus})", "gpus")
        return node_cluster(name, gpus, gpu)
    if is_system_file(name):
        try:
            return System.load(load_document(name), name, gpus, gpu)
        except ConfigError as error:  # the file's own error, field cluster; gpu's, gpus' kept
            raise (error if error.field in ("gpu", "gpus")
                   else ConfigError(str(error), "cluster")) from None
    from dlsched.hardware import load_topology

    try:
        topology = load_topology(name)
    except ConfigError as error:
        raise ConfigError(f"{error}; accepted: {', '.join(NODE_PRESETS)}, a topology preset "
                          "(dlsched topologies), a topology file or a system file",
                          "cluster") from None
    if gpus is not None and gpus != topology.num_npus:
        raise ConfigError(f"{gpus} differs from the {topology.num_npus} NPUs of {name!r}",
                          "gpus")
    return System(gpu=gpu or TOPOLOGY_GPU, network=topology)
