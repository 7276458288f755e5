"""Themis (Rashidi et al., ISCA 2022): per-chunk dimension orders from a dimension load tracker.

The tracker starts each collective with every dimension's fixed latency cost (steps x step
latency of one stage). For each chunk, if the spread between the most and least loaded
dimension is below the threshold — the latency-model time of a chunkSize/16 stage on the least
loaded dimension — the chunk takes the baseline order; otherwise its RS goes least-loaded
dimension first (that dimension gets the largest data), a standalone AG most-loaded first, and
an All-Reduce's AG retraces the RS order in reverse. The chunk's predicted transfer time on
each dimension (bytes sent / bandwidth) is then added to the tracker.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from dlsched.collectives.algorithms import stage_bytes, stage_data, stage_latency
from dlsched.collectives.plan import (
    ChunkRoute,
    CollectiveOp,
    CollectivePlan,
    equal_chunks,
    initial_data,
    route_from_order,
    route_stage_data,
)
from dlsched.collectives.policies.baseline import baseline_order
from dlsched.collectives.request import CollectiveRequest
from dlsched.hardware.topology import Topology


def themis_orders(topology: Topology, op: CollectiveOp, chunk_sizes: list[int],
                  offset: Sequence[float] | None = None) -> list[tuple[int, ...]]:
    """The dimension order Themis gives each chunk, in chunk order. ``offset`` (seconds per
    dimension, default none) is load already on the dimensions when the collective is planned:
    the published tracker starts from zero for every collective; the training layer's
    in-flight-aware variant passes the work other collectives still have queued."""
    dims = topology.dims
    first_phase = route_from_order(op, (0,))[0].phase
    load = [stage_latency(d, first_phase) for d in dims]
    if offset is not None:
        load = [own + other for own, other in zip(load, offset, strict=True)]
    fallback = baseline_order(len(dims), op)
    orders = []
    thresholds: dict[tuple[int, int], float] = {}
    chunk_loads: dict[tuple[int, tuple[int, ...]], tuple[tuple[int, float], ...]] = {}
    for size in chunk_sizes:
        least = min(range(len(dims)), key=lambda d: (load[d], d))
        if (size, least) not in thresholds:
            piece = initial_data(topology, op, size / 16)
            data = stage_data(dims[least], first_phase, piece)
            thresholds[size, least] = (stage_bytes(dims[least], first_phase, data)
                                       / dims[least].bandwidth)
        if max(load) - min(load) < thresholds[size, least]:
            order = fallback
        else:
            descending = op is CollectiveOp.ALL_GATHER
            order = tuple(sorted(range(len(dims)), key=lambda d: (load[d], d),
                                 reverse=descending))
        if (size, order) not in chunk_loads:
            chunk_loads[size, order] = _chunk_load(topology, op, size, order)
        for dim, seconds in chunk_loads[size, order]:
            load[dim] += seconds
        orders.append(order)
    return orders


@lru_cache(maxsize=1 << 14)
def _chunk_load(topology: Topology, op: CollectiveOp, size: int,
                order: tuple[int, ...]) -> tuple[tuple[int, float], ...]:
    """(dimension, predicted transfer seconds) of each stage of a chunk of ``size`` bytes."""
    route = ChunkRoute(0, size, route_from_order(op, order))
    return tuple((stage.dim, sent / topology.dims[stage.dim].bandwidth)
                 for stage, _, sent in route_stage_data(topology, op, route))


def themis_plan(request: CollectiveRequest) -> CollectivePlan:
    """Equal chunks with Themis's per-chunk orders."""
    sizes = equal_chunks(request.size, request.num_chunks)
    return request.plan("themis", sizes, themis_orders(request.topology, request.op, sizes))
