"""Shared network dimensions on which chunks of one or many collectives run concurrently.

Every dimension has ``concurrency`` slots and a queue of waiting chunk-stages. A stage holds a
slot for its fixed latency (steps x step latency, no bandwidth used) and then for its transfer,
which shares the dimension's bandwidth equally with the other transfers in flight (processor
sharing, ``sim.SharedChannel``). A free slot takes the waiting stage with the smallest key
``(priority, size key, arrival)``: the priority its collective was given (lower runs first; 0
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
from dlsched.sim.shared_bandwidth import SharedChannel
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
    priority: float
    on_done: Callable[[], None] | None
    args: Mapping[str, Any]
    label: str
    position: int = 0


def dim_resource(topology: Topology, dim: int) -> str:
    """Resource name of a dimension in timelines, e.g. ``dim1 Ring``."""
    return f"dim{dim + 1} {topology.dims[dim].short_name}"


class Network:
    """The dimensions of ``topology`` as shared resources driven by ``engine``."""

    def __init__(self, engine: Engine, topology: Topology, concurrency: int = 1,
                 intra: IntraPolicy = IntraPolicy.FIFO, record: bool = True) -> None:
        self.engine = engine
        self.topology = topology
        self.record = record
        self.scf = intra is IntraPolicy.SCF
        self.channels = [SharedChannel(engine, d.bandwidth) for d in topology.dims]
        self.free = [concurrency] * len(topology.dims)
        self.queues: list[list[tuple[float, float, int, _Flow]]] = [[] for _ in topology.dims]
        self.resources = [dim_resource(topology, d) for d in range(len(topology.dims))]
        self.load = np.zeros(len(topology.dims))
        self.spans: list[Span] = []
        self._arrivals = 0

    def submit(self, flows: Sequence[Sequence[FlowStage]], priority: float = 0.0,
               on_done: Sequence[Callable[[], None] | None] | None = None,
               args: Sequence[Mapping[str, Any]] | None = None,
               labels: Sequence[str] | None = None) -> None:
        """Queue every flow (a chunk's stages, in order) now; ``on_done[i]()`` runs when flow
        ``i`` finishes its last stage. ``args``/``labels`` annotate the recorded spans."""
        touched = set()
        for index, stages in enumerate(flows):
            flow = _Flow(stages, priority, on_done[index] if on_done else None,
                         args[index] if args else {}, labels[index] if labels else "")
            for stage in stages:
                self.load[stage.dim] += self._cost(stage)
            touched.add(self._enqueue(flow))
        for dim in sorted(touched):
            self._dispatch(dim)

    def pending_load(self) -> np.ndarray:
        """Predicted seconds of work (latency + bytes / bandwidth) each dimension still has to
        do for every queued or running stage and every later stage of unfinished chunks."""
        return self.load.copy()

    def _cost(self, stage: FlowStage) -> float:
        return stage.latency + stage.sent / self.channels[stage.dim].bandwidth

    def _enqueue(self, flow: _Flow) -> int:
        stage = flow.stages[flow.position]
        self._arrivals += 1
        heapq.heappush(self.queues[stage.dim], (flow.priority, stage.sent if self.scf else 0.0,
                                                self._arrivals, flow))
        return stage.dim

    def _dispatch(self, dim: int) -> None:
        queue = self.queues[dim]
        while self.free[dim] and queue:
            flow = heapq.heappop(queue)[3]
            self.free[dim] -= 1
            stage = flow.stages[flow.position]
            self.engine.after(stage.latency, self._transfer, flow, self.engine.now)

    def _transfer(self, flow: _Flow, start: float) -> None:
        stage = flow.stages[flow.position]
        self.channels[stage.dim].start(stage.sent, lambda: self._finish(flow, start))

    def _finish(self, flow: _Flow, start: float) -> None:
        stage = flow.stages[flow.position]
        self.load[stage.dim] -= self._cost(stage)
        if self.record:
            self.spans.append(Span(
                resource=self.resources[stage.dim], start=start, end=self.engine.now,
                kind=stage.phase, label=f"{flow.label}{stage.phase}", num_bytes=round(stage.sent),
                group="network", args={**flow.args, "stage": flow.position, "phase": stage.phase},
            ))
        self.free[stage.dim] += 1
        flow.position += 1
        if flow.position < len(flow.stages):
            self._dispatch(self._enqueue(flow))
        elif flow.on_done is not None:
            flow.on_done()
        self._dispatch(stage.dim)
