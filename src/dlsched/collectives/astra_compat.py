"""ASTRA-sim 2.x compatibility: the behaviours of its analytical runs that dlsched does not
model by default, found in its source (astra-sim/astra-sim ``astra-sim/system/``, and the
congestion-unaware backend astra-sim/astra-network-analytical), emulated on demand.

* **R** — every received message of a reduction is followed by a local-memory pass: two reads
  and a write, ``3 x message / local-mem-bw`` (``PacketBundle::call``), serial with the
  algorithm's next step. ``local-mem-bw`` is read in GB/s with GB = 1e9 B (``Sys.cc``:
  ``local_mem_bw * 1e9``), unlike the network's GiB.
* **F** — the congestion-unaware backend charges every message ``hops x latency + size /
  link bandwidth`` on its own (``BasicTopology::send``), with no link shared. ``direct``
  (``AllToAll.cc``: a Ring subclass whose ``parallel_reduce`` is P-1 without a window) sends a
  message of data/P to each of its P-1 peers at once, so a direct phase takes one message's
  time: (P-1) x the file's per-link bandwidth; on a Ring dimension its farthest peer is P/2
  hops away (``Ring::compute_hops_count``, bidirectional). Its P-1 received messages are
  reduced at once too (one ``PacketBundle`` each, scheduled independently), so a direct
  Reduce-Scatter's pass costs one message, 3 x (data/P) / local-mem-bw, not P-1 of them.
* **G** — Themis' load tracker (``OfflineGreedy``) weighs every dimension with
  ``comm_NI->get_BW_at_dimension``, the network file's per-link bandwidth, also on a direct
  dimension that uses P-1 links at once: it sees a direct dimension's load (P-1) x too large.
* **Z** — the tracker starts every collective at zero load (the paper and dlsched start it at
  each dimension's latency).
* **H** — for an All-Reduce the tracker charges only the Reduce-Scatter half of each chunk,
  so its threshold (the time of a chunk/16 RS on the least-loaded dimension) is twice as large
  relative to the load as dlsched's.

Also emulated: the tracker's dimension list is kept sorted in place across the chunks of a
collective (a stable sort, so ties keep the previous order) and reset to dimension order for a
new collective or after a chunk that took the baseline order; All-to-All ignores Themis (ASTRA
only schedules other collectives with it); the baseline All-Reduce runs its last dimension as
one All-Reduce phase (``collective-optimization: localBWAware``), which holds the dimension
for the chunk's reduce and gather halves together; ``endpoint-delay`` (``MemBus``, one per
``PacketBundle``) is paid when a phase starts (its first packets go to memory) and after
every received step, so a phase of S steps pays S + 1, an All-Reduce phase 2S + 1; ASTRA's
clock counts whole nanoseconds, so every message's delay and each term of a memory pass is
rounded down (``rounding``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dlsched.collectives.algorithms import Phase, stage_data, stage_steps
from dlsched.collectives.network import FlowStage
from dlsched.collectives.plan import (
    ChunkRoute,
    CollectiveOp,
    CollectivePlan,
    route_stage_data,
)
from dlsched.collectives.policies.baseline import baseline_order
from dlsched.hardware.topology import DimAlgorithm, Dimension, DimKind, Topology

GB = 1e9
NS = 1e-9
BEHAVIOURS = {
    "R": "reduction steps cost 3 x bytes / local-mem-bw",
    "F": "direct sends to its P-1 peers at once: (P-1) x the per-link bandwidth, one "
         "message's reduction pass",
    "G": "Themis' tracker weighs a direct dimension by one link's bandwidth",
    "Z": "Themis' load tracker starts at 0",
    "H": "Themis' tracker charges only an All-Reduce's Reduce-Scatter half",
}


def direct_peers(dim: Dimension) -> int:
    """Messages a phase on ``dim`` has in flight at once in ASTRA-sim (F): P-1 for ``direct``
    (``AllToAll`` constructor: ``parallel_reduce = nodes_in_ring - 1``), 1 otherwise."""
    return dim.size - 1 if dim.algorithm is DimAlgorithm.DIRECT else 1


def farthest_hops(dim: Dimension) -> int:
    """Hops, in units of the dimension's per-step latency, to the farthest peer of a direct
    phase: P // 2 on a (bidirectional) Ring (``Ring::compute_hops_count`` takes the shorter
    way), 1 on FullyConnected and Switch (the reader's Switch latency holds its 2 hops)."""
    return dim.size // 2 if dim.kind is DimKind.RING else 1


def reduced_bytes(dim: Dimension, data: float, sent: float) -> float:
    """Bytes whose local-memory pass (R) a Reduce-Scatter of ``data`` input bytes sending
    ``sent`` waits for, per NPU. Ring reduces each of its P-1 received messages in turn
    (``sent``); halving-doubling does not reduce its last received message (its packet counter
    restarts one message early, ``HalvingDoubling.cc``), so data/4 + ... + data/P = sent -
    data/2; direct reduces its P-1 messages of data/P at once (F), so one message waits."""
    if dim.algorithm is DimAlgorithm.HALVING_DOUBLING:
        return sent - data / 2
    if dim.algorithm is DimAlgorithm.DIRECT:
        return data / dim.size
    return sent


@dataclass(frozen=True)
class AstraCompat:
    """ASTRA-sim 2.x behaviours R, F, G, Z, H (module docstring). ``local_mem_bw``: bytes/s
    of the local-memory pass after a reduction (None: no pass); ``endpoint_delay``: seconds
    per memory-bus transfer (``endpoint-delay``)."""

    local_mem_bw: float | None = None
    endpoint_delay: float = 0.0

    def network(self, topology: Topology) -> Topology:
        """``topology`` as ASTRA's congestion-unaware backend sees it (F): a ``direct``
        dimension has (P-1) x its per-link bandwidth and, on a Ring, the latency of its
        farthest peer. ``themis_orders`` and ``flows`` take this view."""
        dims = tuple(Dimension(d.kind, d.size, d.bandwidth * direct_peers(d),
                               d.latency * farthest_hops(d), d.algorithm)
                     if d.algorithm is DimAlgorithm.DIRECT else d for d in topology.dims)
        return Topology(topology.name, dims)

    @staticmethod
    def tracker_bandwidth(dim: Dimension) -> float:
        """Bytes/s Themis' tracker weighs ``dim`` (a dimension of ``network``'s view) with
        (G): ``OfflineGreedy`` reads ``get_BW_at_dimension``, the file's per-link bandwidth,
        which is the view's bandwidth / (P-1) on a direct dimension."""
        return dim.bandwidth / direct_peers(dim)

    def stage_extra(self, dim: Dimension, phase: Phase, data: float, sent: float) -> float:
        """Seconds a stage of ``data`` input bytes sending ``sent`` costs beyond steps x
        latency + bytes / bandwidth: the endpoint delay when it starts and after each of its
        steps, for a reduction (R) 3 x ``reduced_bytes`` / local-mem-bw, less ``rounding``."""
        extra = (stage_steps(dim, phase) + 1) * self.endpoint_delay
        if phase is Phase.REDUCE_SCATTER and self.local_mem_bw:
            extra += 3 * reduced_bytes(dim, data, sent) / self.local_mem_bw
        return extra + self.rounding(dim, phase, data)

    def rounding(self, dim: Dimension, phase: Phase, data: float) -> float:
        """Seconds (<= 0) ASTRA saves by rounding every delay down to whole nanoseconds
        (``static_cast<EventTime>`` in ``BasicTopology::compute_communication_delay``, the
        three ``uint64_t`` terms of ``PacketBundle::call``), summed over the messages on the
        phase's critical path and the reductions it waits for: ring P-1 messages of data/P,
        halving-doubling data/2 ... data/P (its passes sized as the next message: all but the
        first), direct one message of data/P (its peers' in parallel), where data is the
        larger of the stage's input and output; latency and bandwidth are converted back to
        ASTRA's ns and B/ns."""
        if phase is Phase.ALL_TO_ALL:
            return 0.0
        size = dim.size
        whole = stage_data(dim, phase, data)
        if dim.algorithm is DimAlgorithm.HALVING_DOUBLING:
            messages = [whole / 2**k for k in range(1, size.bit_length())]
            reduced = messages[1:]
        elif dim.algorithm is DimAlgorithm.DIRECT:
            messages = reduced = [whole / size]
        else:
            messages = reduced = [whole / size] * (size - 1)
        latency_ns = round(dim.latency * 1e9, 6)
        per_ns = dim.bandwidth / direct_peers(dim) / 1e9
        saved = sum(math.floor(latency_ns + m / per_ns) - (latency_ns + m / per_ns)
                    for m in messages)
        if phase is Phase.REDUCE_SCATTER and self.local_mem_bw:
            saved += 3 * sum(math.floor(m / self.local_mem_bw * 1e9) - m / self.local_mem_bw
                             * 1e9 for m in reduced)
        return saved * 1e-9

    def flows(self, plan: CollectivePlan,
              dim_map: tuple[int, ...] | None = None) -> list[list[FlowStage]]:
        """Each chunk's stages with ASTRA's costs (``plan`` on ``network``'s view); a baseline
        All-Reduce's reduce and gather stages on its last dimension become one stage (one
        All-Reduce phase, which starts once: one endpoint delay less than two phases)."""
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
                flow.append(FlowStage(physical, last.latency + latency - self.endpoint_delay,
                                      last.sent + sent, "AR"))
            else:
                flow.append(FlowStage(physical, latency, sent, stage.phase.value))
        return flow

    def themis_orders(self, topology: Topology, op: CollectiveOp,
                      chunk_sizes: list[int]) -> list[tuple[int, ...]]:
        """The dimension order ASTRA-sim's ``OfflineGreedy::get_chunk_scheduling`` gives each
        chunk of a collective on ``topology`` (``network``'s view): G, Z, H, its stable in-place
        sort; All-to-All takes the baseline order. Loads and thresholds are computed in ASTRA's
        own units and order of operations (MiB over the bandwidth relative to dimension 1,
        integer chunk sizes), so that near-ties break as in ASTRA."""
        num = len(topology.dims)
        if op is CollectiveOp.ALL_TO_ALL:
            return [baseline_order(num, op)] * len(chunk_sizes)
        gather = op is CollectiveOp.ALL_GATHER
        first_bw = self.tracker_bandwidth(topology.dims[0])
        relative = [self.tracker_bandwidth(d) / first_bw for d in topology.dims]
        load = [0.0] * num
        ranked = list(range(num))
        orders = []
        for size in chunk_sizes:
            # ASTRA sizes an All-Gather by its input (``Ring``: final = data x nodes).
            chunk = size // topology.num_npus if gather else size
            ranked.sort(key=load.__getitem__)
            if gather:
                ranked.reverse()
            if _balanced(topology, gather, relative, ranked, load, chunk):
                # The baseline order; the list returns to dimension order (reversed for an
                # All-Gather) and position i of it is charged with dimension i's cost.
                order = tuple(range(num))
                ranked = list(order[::-1] if gather else order)
                charged = tuple(ranked)
            else:
                order = charged = tuple(ranked)
            for position, index in enumerate(order):
                peers = topology.dims[index].size
                load[charged[position]] += _tracker_load(chunk, peers, relative[index], gather)
                chunk = chunk * peers if gather else chunk // peers
            orders.append(order)
        return orders


MIB = 1048576


def _tracker_load(chunk: int, size: int, relative_bw: float, gather: bool) -> float:
    """``OfflineGreedy``'s load of one stage of a ``chunk``-byte chunk on a dimension of
    ``size`` NPUs: MiB sent / (bandwidth / dimension 1's), RS (P-1)/P x chunk, AG (P-1) x
    chunk, evaluated in ASTRA's order of operations."""
    share = (size - 1) if gather else (size - 1) / size
    return chunk / MIB * share / relative_bw


def _balanced(topology: Topology, gather: bool, relative: list[float], ranked: list[int],
              load: list[float], chunk: int) -> bool:
    """ASTRA's threshold (``get_chunk_size_from_elapsed_time``): the load gap between the
    ends of the ranked list, as whole bytes of the first stage on the dimension it compares
    (for an All-Gather the last, then divided by the sizes before it), is below chunk / 16
    (integer division)."""
    first, last = ranked[0], ranked[-1]
    gap = abs(load[last] - load[first])
    if not gather:
        size = topology.dims[first].size
        return int(gap * relative[first] / ((size - 1) / size) * MIB) < chunk // 16
    gap_bytes = int(gap * relative[last] / (topology.dims[last].size - 1) * MIB)
    for index in reversed(ranked[:-1]):
        gap_bytes //= topology.dims[index].size
    return gap_bytes < chunk // 16


def compat_notes(topology: Topology, op: CollectiveOp, policy: str,
                 local_mem_bw: float | None) -> list[str]:
    """One sentence per ASTRA-sim behaviour that would change this run (for users running
    without ``--astra-compat``)."""
    notes = []
    reduces = op in (CollectiveOp.ALL_REDUCE, CollectiveOp.REDUCE_SCATTER)
    if reduces and local_mem_bw:
        notes.append(f"R: {BEHAVIOURS['R']}")
    direct = any(d.algorithm is DimAlgorithm.DIRECT for d in topology.dims)
    if direct:
        notes.append(f"F: {BEHAVIOURS['F']}")
    if policy == "themis" and op is not CollectiveOp.ALL_TO_ALL:
        if direct:
            notes.append(f"G: {BEHAVIOURS['G']}")
        notes.append(f"Z: {BEHAVIOURS['Z']}")
        if op is CollectiveOp.ALL_REDUCE:
            notes.append(f"H: {BEHAVIOURS['H']}")
    return [f"ASTRA-sim 2.x would differ here (--astra-compat emulates it): {n}"
            for n in notes]
