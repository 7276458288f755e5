"""Lower bounds on the time of a collective (seconds).

* ``ideal_time`` — the Themis paper's "100% bandwidth utilised" time: per-NPU bytes sent by the
  hierarchical collective divided by the sum of the dimension bandwidths. The bytes do not
  depend on the dimension order (2S(1-1/P) for an All-Reduce), so no plan can beat it.
* ``order_mix_bound`` — tighter and still provable: the bytes one chunk puts on each dimension
  depend on its dimension order, and any plan's per-dimension load is a size-weighted mix of
  the per-order loads. Every dimension must carry its load at no more than its bandwidth, so
  the plan takes at least min over mixes of max over dimensions of load/bandwidth: a small LP
  over the D! orders (solved exactly by HiGHS). Latency only adds time, so it is left out.
"""

from __future__ import annotations

import itertools
from functools import cache

import numpy as np

from dlsched.collectives.order_mix import min_max_mix
from dlsched.collectives.plan import (
    ChunkRoute,
    CollectiveOp,
    route_from_order,
    route_stage_data,
)
from dlsched.hardware.topology import Topology


def order_loads(topology: Topology, op: CollectiveOp, order: tuple[int, ...],
                ag_order: tuple[int, ...] | None = None) -> np.ndarray:
    """Transfer time (s) each dimension spends on one byte of buffer sent with this order."""
    route = ChunkRoute(0, 1, route_from_order(op, order, ag_order))
    loads = np.zeros(len(topology.dims))
    for stage, _, sent in route_stage_data(topology, op, route):
        loads[stage.dim] += sent / topology.dims[stage.dim].bandwidth
    return loads


def bytes_per_npu(topology: Topology, op: CollectiveOp, size: int) -> float:
    """Bytes one NPU sends in the hierarchical collective (independent of dimension order)."""
    route = ChunkRoute(0, size, route_from_order(op, tuple(range(len(topology.dims)))))
    return sum(sent for _, _, sent in route_stage_data(topology, op, route))


def ideal_time(topology: Topology, op: CollectiveOp, size: int) -> float:
    """Per-NPU bytes / sum of dimension bandwidths, seconds (the paper's ideal)."""
    return bytes_per_npu(topology, op, size) / topology.total_bandwidth


@cache
def _mix_bound_per_byte(topology: Topology, op: CollectiveOp) -> float:
    orders = list(itertools.permutations(range(len(topology.dims))))
    if op is CollectiveOp.ALL_REDUCE:
        rs = [order_loads(topology, CollectiveOp.REDUCE_SCATTER, o) for o in orders]
        # The AG half of an All-Reduce chunk is a standalone All-Gather of the same size.
        ag = [order_loads(topology, CollectiveOp.ALL_GATHER, o) for o in orders]
        columns = rs + ag
        groups = [range(len(rs)), range(len(rs), len(columns))]
    else:
        columns = [order_loads(topology, op, o) for o in orders]
        groups = [range(len(columns))]
    return min_max_mix(columns, groups)[1]


def order_mix_bound(topology: Topology, op: CollectiveOp, size: int) -> float:
    """The LP bound above for a buffer of ``size`` bytes, seconds (>= ideal_time)."""
    return max(_mix_bound_per_byte(topology, op) * size, ideal_time(topology, op, size))
