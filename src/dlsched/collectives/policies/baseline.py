"""The hierarchical baseline: every chunk goes RS over dim 1..D, then AG over dim D..1.

A standalone All-Gather runs dim D..1 (the AG half of the hierarchical All-Reduce); RS and
All-to-All run dim 1..D.
"""

from __future__ import annotations

from dlsched.collectives.plan import CollectiveOp, CollectivePlan, equal_chunks
from dlsched.collectives.request import CollectiveRequest


def baseline_order(num_dims: int, op: CollectiveOp) -> tuple[int, ...]:
    """The fixed dimension order of the hierarchical baseline."""
    order = tuple(range(num_dims))
    return order[::-1] if op is CollectiveOp.ALL_GATHER else order


def baseline_plan(request: CollectiveRequest) -> CollectivePlan:
    """Equal chunks, all in the baseline order."""
    order = baseline_order(len(request.topology.dims), request.op)
    sizes = equal_chunks(request.size, request.num_chunks)
    return request.plan("baseline", sizes, [order] * len(sizes))
