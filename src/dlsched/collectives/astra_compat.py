"""ASTRA-sim 2.x compatibility: four behaviours of its analytical runs that dlsched does not
model by default, found in its source (astra-sim/astra-sim, ``system/``), emulated on demand.

* **R** — every reduction step is followed by a local-memory pass: reading two operands and
  writing the result, ``3 x bytes / local-mem-bw`` (``PacketBundle::call``), serial with the
  step. A Reduce-Scatter stage (and the reduce half of an All-Reduce) therefore costs
  ``3 x bytes sent / local-mem-bw`` more. ``local-mem-bw`` is read in GB/s with GB = 1e9 B
  (``Sys.cc``: ``local_mem_bw * 1e9``), unlike the network's GiB.
* **F** — the congestion-unaware backend charges every message ``hops x latency + size /
  link bandwidth`` independently, so on a FullyConnected dimension the ``direct`` algorithm
  sends to its P-1 peers at once with (P-1) x the file's per-link bandwidth.
* **Z** — Themis' load tracker (``OfflineGreedy``) starts every collective at zero load
  (the paper and dlsched start it at each dimension's latency).
* **H** — for an All-Reduce the tracker charges only the Reduce-Scatter half of each chunk,
  so its threshold (the time of a chunk/16 RS on the least-loaded dimension) is twice as large
  relative to the load as dlsched's.

Also emulated: the tracker's dimension list is kept sorted in place across the chunks of a
collective (a stable sort, so ties keep the previous order) and reset to dimension order for a
new collective or after a chunk that took the baseline order; All-to-All ignores Themis (ASTRA
only schedules other collectives with it); the baseline All-Reduce runs its last dimension as
one All-Reduce phase (``collective-optimization: localBWAware``), which holds the dimension
for the chunk's reduce and gather halves together; every algorithm step pays
``endpoint-delay`` once (``MemBus``).
"""

from __future__ import annotations

from dataclasses import dataclass

from dlsched.collectives.algorithms import Phase, stage_bytes, stage_data, stage_steps
from dlsched.collectives.network import FlowStage
from dlsched.collectives.plan import (
    ChunkRoute,
    CollectiveOp,
    CollectivePlan,
    initial_data,
    route_stage_data,
)
from dlsched.collectives.policies.baseline import baseline_order
from dlsched.hardware.topology import DimAlgorithm, Dimension, DimKind, Topology

GB = 1e9
NS = 1e-9
BEHAVIOURS = {
    "R": "reduction steps cost 3 x bytes / local-mem-bw",
    "F": "FullyConnected with direct gets (P-1) x the per-link bandwidth",
    "Z": "Themis' load tracker starts at 0",
    "H": "Themis' tracker charges only an All-Reduce's Reduce-Scatter half",
}


@dataclass(frozen=True)
class AstraCompat:
    """ASTRA-sim 2.x behaviours R, F, Z, H (module docstring). ``local_mem_bw``: bytes/s of
    the local-memory pass after a reduction (None: no pass); ``endpoint_delay``: seconds per
    algorithm step."""

    local_mem_bw: float | None = None
    endpoint_delay: float = 0.0

    def network(self, topology: Topology) -> Topology:
        """``topology`` as ASTRA's congestion-unaware backend sees it (F): a FullyConnected
        dimension running ``direct`` has (P-1) x its per-link bandwidth."""
        dims = tuple(Dimension(d.kind, d.size, d.bandwidth * (d.size - 1), d.latency,
                               d.algorithm)
                     if d.kind is DimKind.FULLY_CONNECTED and d.algorithm is DimAlgorithm.DIRECT
                     else d for d in topology.dims)
        return Topology(topology.name, dims)

    def stage_extra(self, dim: Dimension, phase: Phase, data: float, sent: float) -> float:
        """Seconds a stage of ``data`` input bytes sending ``sent`` costs beyond steps x
        latency + bytes / bandwidth: the endpoint delay of every step and, for a reduction
        (R), 3 x the bytes reduced / local-mem-bw. Halving-doubling does not reduce its last
        received message (its packet counter restarts one message early), so it reduces
        data/4 + ... + data/P = sent - data/2; ring and direct reduce everything received."""
        extra = stage_steps(dim, phase) * self.endpoint_delay
        if phase is Phase.REDUCE_SCATTER and self.local_mem_bw:
            reduced = sent - data / 2 if dim.algorithm is DimAlgorithm.HALVING_DOUBLING \
                else sent
            extra += 3 * reduced / self.local_mem_bw
        return extra

    def flows(self, plan: CollectivePlan,
              dim_map: tuple[int, ...] | None = None) -> list[list[FlowStage]]:
        """Each chunk's stages with ASTRA's costs; a baseline All-Reduce's reduce and gather
        stages on its last dimension become one stage (one All-Reduce phase)."""
        merge = plan.policy == "baseline" and plan.op is CollectiveOp.ALL_REDUCE
        return [self._route_flow(plan.topology, plan.op, route, merge, dim_map)
                for route in plan.routes]

    def _route_flow(self, topology: Topology, op: CollectiveOp, route: ChunkRoute,
                    merge: bool, dim_map: tuple[int, ...] | None) -> list[FlowStage]:
        flow: list[FlowStage] = []
        for stage, data, sent in route_stage_data(topology, op, route):
            dim = topology.dims[stage.dim]
            physical = stage.dim if dim_map is None else dim_map[stage.dim]
            latency = stage_steps(dim, stage.phase) * dim.latency \
                + self.stage_extra(dim, stage.phase, data, sent)
            if merge and flow and flow[-1].dim == physical and flow[-1].phase == "RS":
                last = flow.pop()
                flow.append(FlowStage(physical, last.latency + latency, last.sent + sent, "AR"))
            else:
                flow.append(FlowStage(physical, latency, sent, stage.phase.value))
        return flow

    def themis_orders(self, topology: Topology, op: CollectiveOp,
                      chunk_sizes: list[int]) -> list[tuple[int, ...]]:
        """The dimension order ASTRA-sim's ``OfflineGreedy`` gives each chunk (Z, H, its
        stable in-place sort); All-to-All takes the baseline order."""
        num = len(topology.dims)
        if op is CollectiveOp.ALL_TO_ALL:
            return [baseline_order(num, op)] * len(chunk_sizes)
        phase = Phase.ALL_GATHER if op is CollectiveOp.ALL_GATHER else Phase.REDUCE_SCATTER
        gather = phase is Phase.ALL_GATHER
        load = [0.0] * num
        ranked = list(range(num))
        orders = []
        for size in chunk_sizes:
            ranked.sort(key=load.__getitem__)
            if gather:
                ranked.reverse()
            if self._balanced(topology, phase, ranked, load, size):
                # The baseline order; the list returns to dimension order (reversed for an
                # All-Gather) and position i of it is charged with dimension i's cost.
                order = tuple(range(num))
                ranked = list(order[::-1] if gather else order)
                charged = tuple(ranked)
            else:
                order = charged = tuple(ranked)
            data = initial_data(topology, op, size)
            for position, index in enumerate(order):
                dim = topology.dims[index]
                sent = stage_bytes(dim, phase, stage_data(dim, phase, data))
                load[charged[position]] += sent / dim.bandwidth
                data = data * dim.size if gather else data / dim.size
            orders.append(order)
        return orders

    @staticmethod
    def _balanced(topology: Topology, phase: Phase, ranked: list[int], load: list[float],
                  size: int) -> bool:
        """ASTRA's threshold: the load gap, as bytes of the first stage on the dimension it
        compares, is below a sixteenth of the chunk."""
        first, last = ranked[0], ranked[-1]
        gap = abs(load[last] - load[first])
        if phase is Phase.REDUCE_SCATTER:
            dim = topology.dims[first]
            return gap * dim.bandwidth / ((dim.size - 1) / dim.size) < size / 16
        dim = topology.dims[last]
        gap_bytes = gap * dim.bandwidth / (dim.size - 1)
        for index in ranked[:-1]:
            gap_bytes /= topology.dims[index].size
        return gap_bytes < size / 16


def compat_notes(topology: Topology, op: CollectiveOp, policy: str,
                 local_mem_bw: float | None) -> list[str]:
    """One sentence per ASTRA-sim behaviour that would change this run (for users running
    without ``--astra-compat``)."""
    notes = []
    reduces = op in (CollectiveOp.ALL_REDUCE, CollectiveOp.REDUCE_SCATTER)
    if reduces and local_mem_bw:
        notes.append(f"R: {BEHAVIOURS['R']}")
    if any(d.kind is DimKind.FULLY_CONNECTED and d.algorithm is DimAlgorithm.DIRECT
           for d in topology.dims):
        notes.append(f"F: {BEHAVIOURS['F']}")
    if policy == "themis" and op is not CollectiveOp.ALL_TO_ALL:
        notes.append(f"Z: {BEHAVIOURS['Z']}")
        if op is CollectiveOp.ALL_REDUCE:
            notes.append(f"H: {BEHAVIOURS['H']}")
    return [f"ASTRA-sim 2.x would differ here (--astra-compat emulates it): {n}"
            for n in notes]
