"""What a collective policy is asked to plan."""

from __future__ import annotations

from dataclasses import dataclass

from dlsched.collectives.plan import (
    ChunkRoute,
    CollectiveOp,
    CollectivePlan,
    IntraPolicy,
    route_from_order,
)
from dlsched.hardware.topology import Topology


@dataclass(frozen=True)
class CollectiveRequest:
    """A collective of ``size`` bytes per NPU, split into ``num_chunks`` chunks, on a topology
    whose dimensions each run ``concurrency`` chunks at once, served in ``intra`` order."""

    topology: Topology
    op: CollectiveOp
    size: int
    num_chunks: int = 64
    intra: IntraPolicy = IntraPolicy.FIFO
    concurrency: int = 1

    def plan(self, policy: str, chunk_sizes: list[int], orders: list[tuple[int, ...]],
             concurrency: int | None = None) -> CollectivePlan:
        """A plan with one route per chunk built from its dimension order."""
        routes = tuple(ChunkRoute(i, size, route_from_order(self.op, order))
                       for i, (size, order) in enumerate(zip(chunk_sizes, orders, strict=True)))
        return CollectivePlan(self.topology, self.op, self.size, routes, self.intra,
                              self.concurrency if concurrency is None else concurrency, policy)
