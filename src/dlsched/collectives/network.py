"""Shared network dimensions on which chunks of one or many collectives run concurrently.

Every dimension has ``concurrency`` slots and a queue of waiting chunk-stages. A stage holds a
slot for its fixed latency (steps x step latency, no bandwidth used) and then for its transfer,
which shares the dimension's bandwidth equally with the other transfers in flight (processor
sharing, ``sim.links.SharedLinks``; with one slot the transfer is alone and the whole stage is one
event). A free slot takes the waiting stage with the smallest key ``(priority, size key,
arrival)``: the priority its collective was given (lower runs first; 0
for all by default), then — under SCF (smallest chunk first) — the bytes the stage sends, else
nothing, then arrival order. A single collective and a whole training iteration's collectives
run on the same model; the training layer issues collectives while the engine runs.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dlsched.collectives.plan import IntraPolicy
from dlsched.hardware.topology import Topology
from dlsched.sim.engine import Engine
from dlsched.sim.links import SharedLinks
from dlsched.sim.timeline import Span


@dataclass(frozen=True, slots=True)
class FlowStage:
    """One stage of a chunk on physical dimension ``dim`` (0-based): ``latency`` seconds of
    fixed cost, then ``sent`` bytes at the dimension's bandwidth; ``phase`` names it (RS, AG,
    A2A)."""

    dim: int
    latency: float
    sent: float
    phase: str


@dataclass(slots=True)
class _Flow:
    stages: Sequence[FlowStage]
    costs: list[float]
    priority: float
    on_done: Callable[[], None] | None
    args: Mapping[str, Any]
    label: str
    position: int = 0


def dim_resource(topology: Topology, dim: int) -> str:
    """Resource name of a dimension in timelines, e.g. ``dim1 Ring``."""
    return f"dim{dim + 1} {topology.dims[dim].short_name}"


class Network:
    """The dimensions of ``topology`` as shared resources driven by ``engine``. ``transfers``
    lists (dimension, start s, end s, bytes sent) of every finished stage, also when ``record``
    is off (``spans`` then stays empty)."""

    def __init__(self, engine: Engine, topology: Topology, concurrency: int = 1,
                 intra: IntraPolicy = IntraPolicy.FIFO, record: bool = True) -> None:
        self.engine = engine
        self.topology = topology
        self.record = record
        self.scf = intra is IntraPolicy.SCF
        self.channels = [SharedLinks(engine, {dim: d.bandwidth}, processor_sharing=True)
                         for dim, d in enumerate(topology.dims)]
        self.bandwidths = [d.bandwidth for d in topology.dims]
        self.exclusive = concurrency == 1
        self.free = [concurrency] * len(topology.dims)
        self.queues: list[list[tuple[float, float, int, _Flow]]] = [[] for _ in topology.dims]
        self.resources = [dim_resource(topology, d) for d in range(len(topology.dims))]
        self.load = [0.0] * len(topology.dims)
        self.spans: list[Span] = []
        self.transfers: list[tuple[int, float, float, float]] = []
        self._arrivals = 0

    def submit(self, flows: Sequence[Sequence[FlowStage]], priority: float = 0.0,
               on_done: Sequence[Callable[[], None] | None] | None = None,
               args: Sequence[Mapping[str, Any]] | None = None,
               labels: Sequence[str] | None = None) -> None:
        """Queue every flow (a chunk's stages, in order) now; ``on_done[i]()`` runs when flow
        ``i`` finishes its last stage. ``args``/``labels`` annotate the recorded spans."""
        touched = set()
        load, bandwidths = self.load, self.bandwidths
        known: dict[int, list[float]] = {}  # flows of one collective share few stage lists
        for index, stages in enumerate(flows):
            costs = known.get(id(stages))
            if costs is None:
                costs = known[id(stages)] = [stage.latency + stage.sent / bandwidths[stage.dim]
                                             for stage in stages]
            flow = _Flow(stages, costs, priority, on_done[index] if on_done else None,
                         args[index] if args else {}, labels[index] if labels else "")
            for stage, cost in zip(stages, costs, strict=True):
                load[stage.dim] += cost
            touched.add(self._enqueue(flow))
        for dim in sorted(touched):
            self._dispatch(dim)

    def pending_load(self) -> np.ndarray:
        """Predicted seconds of work (latency + bytes / bandwidth) each dimension still has to
        do for every queued or running stage and every later stage of unfinished chunks."""
        return np.array(self.load)

    def _enqueue(self, flow: _Flow) -> int:
        stage = flow.stages[flow.position]
        self._arrivals += 1
        heapq.heappush(self.queues[stage.dim], (flow.priority, stage.sent if self.scf else 0.0,
                                                self._arrivals, flow))
        return stage.dim

    def _dispatch(self, dim: int) -> None:
        queue, free = self.queues[dim], self.free
        while free[dim] and queue:
            self._begin(dim, heapq.heappop(queue)[3])

    def _begin(self, dim: int, flow: _Flow) -> None:
        self.free[dim] -= 1
        stage = flow.stages[flow.position]
        now = self.engine.now
        if self.exclusive:
            # One slot: the transfer runs alone, so it ends after its latency and its bytes at
            # the full bandwidth (one event instead of three).
            self.engine.at(now + stage.latency + stage.sent / self.bandwidths[dim],
                           self._finish, flow, now)
        else:
            self.engine.after(stage.latency, self._transfer, flow, now)

    def _transfer(self, flow: _Flow, start: float) -> None:
        stage = flow.stages[flow.position]
        self.channels[stage.dim].send(stage.sent, (stage.dim,), lambda: self._finish(flow, start))

    def _finish(self, flow: _Flow, start: float) -> None:
        stage = flow.stages[flow.position]
        self.load[stage.dim] -= flow.costs[flow.position]
        self.transfers.append((stage.dim, start, self.engine.now, stage.sent))
        if self.record:
            self.spans.append(Span(
                resource=self.resources[stage.dim], start=start, end=self.engine.now,
                kind=stage.phase, label=f"{flow.label}{stage.phase}", num_bytes=round(stage.sent),
                group="network", args={**flow.args, "stage": flow.position, "phase": stage.phase},
            ))
        self.free[stage.dim] += 1
        flow.position += 1
        if flow.position < len(flow.stages):
            following = flow.stages[flow.position].dim
            if self.free[following] and not self.queues[following]:
                self._begin(following, flow)  # what enqueue + dispatch would do, without the heap
            else:
                self._dispatch(self._enqueue(flow))
        elif flow.on_done is not None:
            flow.on_done()
        if self.queues[stage.dim]:
            self._dispatch(stage.dim)
