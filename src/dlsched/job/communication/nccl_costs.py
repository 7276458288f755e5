"""The job evaluator's side of NCCL's tuner model (``collectives.nccl``, where the model lives so
that the pipeline domain's TP all-reduces, which the a100 GEMM fit runs through, price alike):
``NcclGroup``, a group's sub-network (``Topology``) that NCCL runs on a node preset's cluster,
and ``nccl_seconds`` on it."""

from __future__ import annotations

from dataclasses import dataclass

from dlsched.collectives.nccl import (
    GPU_ARCH,
    HOST_CPU,
    OPS,
    PROTOCOLS,
    NcclChoice,
    NcclNode,
    nccl_choice,
    nccl_node,
)
from dlsched.hardware import Topology

__all__ = ["GPU_ARCH", "HOST_CPU", "OPS", "PROTOCOLS", "NcclChoice", "NcclGroup", "NcclNode",
           "nccl_choice", "nccl_node", "nccl_seconds"]


@dataclass(frozen=True)
class NcclGroup(Topology):
    """A group's sub-network (``Topology``) that NCCL runs: ``ranks_per_node`` GPUs in each
    of ``nodes`` nodes of ``node``."""

    node: NcclNode | None = None
    ranks_per_node: int = 1
    nodes: int = 1


def nccl_seconds(group: NcclGroup, op: str, num_bytes: float) -> float:
    """Seconds of ``op`` on a ``num_bytes`` buffer over ``group`` as NCCL runs it."""
    return nccl_choice(group.node, op, num_bytes, group.ranks_per_node, group.nodes).seconds
