"""Sub-topologies: the NPUs a collective spans, as dimensions (or parts of one) of a network.

A model-parallel group of M NPUs takes the first dimensions whole while their product divides
M, and then a part of the next dimension (M / product of the whole ones of its P NPUs, e.g.
8 of the 64 of 2D-SW_SW's second dimension). The data-parallel group is the rest: the other
part of that dimension and every later dimension. A part of a dimension keeps the NPU's
bandwidth and step latency on it and runs the dimension's algorithm over its own size (a
sub-ring for a Ring, a smaller switch group, a smaller fully-connected clique).
"""

from __future__ import annotations

from dataclasses import dataclass

from dlsched.errors import ConfigError
from dlsched.hardware.topology import Dimension, Topology


@dataclass(frozen=True)
class SubTopology:
    """A collective's network: ``topology`` (only its dimensions of size > 1) and, for each of
    its dimensions, the physical dimension of the full network it runs on."""

    topology: Topology | None
    dim_map: tuple[int, ...]

    @property
    def num_npus(self) -> int:
        """NPUs in the group (1 when the group is a single NPU and needs no communication)."""
        return 1 if self.topology is None else self.topology.num_npus


def _part(dim: Dimension, size: int) -> Dimension:
    return Dimension(dim.kind, size, dim.bandwidth, dim.latency, dim.algorithm)


def group_sizes(topology: Topology, model_parallel: int) -> tuple[list[int], list[int]]:
    """Per physical dimension, the NPUs of it in the model-parallel and in the data-parallel
    group (their products are M and num_npus / M)."""
    mp, dp, left = [], [], model_parallel
    for dim in topology.dims:
        take = dim.size if left % dim.size == 0 else left
        if dim.size % take:
            raise ConfigError(
                f"model_parallel: {model_parallel} NPUs cannot be laid over the first dimensions "
                f"of {topology.name} ({topology.shape}); use a product of leading dimension "
                "sizes times a divisor of the next one")
        mp.append(take)
        dp.append(dim.size // take)
        left //= take
    if left != 1:
        raise ConfigError(f"model_parallel: {model_parallel} exceeds the {topology.num_npus} "
                          f"NPUs of {topology.name}")
    return mp, dp


def subtopology(topology: Topology, group: str, model_parallel: int = 1,
                dims: tuple[int, ...] | None = None) -> SubTopology:
    """The sub-network of ``group`` (``all``, ``mp`` or ``dp``) for a workload with
    ``model_parallel`` NPUs per model-parallel group, or of the whole dimensions ``dims``."""
    if dims is not None:
        bad = [d for d in dims if not 0 <= d < len(topology.dims)]
        if bad:
            raise ConfigError(f"dims: {bad} are not dimensions of {topology.name}; accepted: "
                              f"0..{len(topology.dims) - 1}")
        sizes = [d.size if i in dims else 1 for i, d in enumerate(topology.dims)]
    elif group == "all":
        sizes = [d.size for d in topology.dims]
    else:
        mp, dp = group_sizes(topology, model_parallel)
        sizes = mp if group == "mp" else dp
    kept = [(index, size) for index, size in enumerate(sizes) if size > 1]
    if not kept:
        return SubTopology(None, ())
    dims = tuple(_part(topology.dims[index], size) for index, size in kept)
    return SubTopology(Topology(f"{topology.name}[{group}]", dims),
                       tuple(index for index, _ in kept))
