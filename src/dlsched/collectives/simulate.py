"""Event-driven execution of a collective plan.

Every dimension has ``concurrency`` slots and a queue of waiting chunk-stages. A stage holds a
slot for its fixed latency (steps x step latency, no bandwidth used) and then for its transfer,
which shares the dimension's bandwidth equally with the other transfers in flight. When a slot
is free the dimension takes the next waiting stage: FIFO by arrival, or SCF (smallest chunk
first: the stage with the fewest bytes to send on this dimension, i.e. the smallest of the
stage's larger side, input or output; ties by arrival). All chunks are ready at time 0, in
chunk order.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from dlsched.collectives.algorithms import stage_latency
from dlsched.collectives.plan import CollectivePlan, IntraPolicy, route_stage_data
from dlsched.sim.engine import Engine
from dlsched.sim.shared_bandwidth import SharedChannel
from dlsched.sim.timeline import Span, Timeline


@dataclass(frozen=True)
class Execution:
    """What the simulator returns: the timeline, its end time (s) and engine events."""

    timeline: Timeline
    time: float
    events: int


def dim_resource(plan: CollectivePlan, dim: int) -> str:
    """Resource name of a dimension in timelines, e.g. ``dim1 Ring``."""
    return f"dim{dim + 1} {plan.topology.dims[dim].short_name}"


class _Dimension:
    __slots__ = ("channel", "free", "latencies", "queue", "resource")

    def __init__(self, engine: Engine, plan: CollectivePlan, index: int) -> None:
        dim = plan.topology.dims[index]
        self.channel = SharedChannel(engine, dim.bandwidth)
        self.free = plan.concurrency
        self.queue: list[tuple[float, int, int]] = []
        self.resource = dim_resource(plan, index)
        self.latencies = {phase: stage_latency(dim, phase) for phase in
                          {s.phase for r in plan.routes for s in r.stages}}


class _Run:
    """State of one simulation; ``run()`` executes the plan."""

    def __init__(self, plan: CollectivePlan, record: bool) -> None:
        self.plan = plan
        self.record = record
        self.engine = Engine()
        self.dims = [_Dimension(self.engine, plan, d) for d in range(len(plan.topology.dims))]
        self.stage_data = [route_stage_data(plan.topology, plan.op, r) for r in plan.routes]
        self.position = [0] * len(plan.routes)
        self.arrivals = 0
        self.spans: list[Span] = []
        self.scf = plan.intra is IntraPolicy.SCF

    def run(self) -> Execution:
        for chunk in range(len(self.plan.routes)):
            self._enqueue(chunk)
        for index in range(len(self.dims)):
            self._dispatch(index)
        end = self.engine.run()
        return Execution(Timeline(self.spans), end, self.engine.events_processed)

    def _enqueue(self, chunk: int) -> None:
        stage, _, sent = self.stage_data[chunk][self.position[chunk]]
        self.arrivals += 1
        key = sent if self.scf else 0.0
        heapq.heappush(self.dims[stage.dim].queue, (key, self.arrivals, chunk))

    def _dispatch(self, index: int) -> None:
        dim = self.dims[index]
        while dim.free and dim.queue:
            _, _, chunk = heapq.heappop(dim.queue)
            dim.free -= 1
            stage, _, _ = self.stage_data[chunk][self.position[chunk]]
            self.engine.after(dim.latencies[stage.phase], self._transfer, chunk, self.engine.now)

    def _transfer(self, chunk: int, start: float) -> None:
        stage, _, sent = self.stage_data[chunk][self.position[chunk]]
        self.dims[stage.dim].channel.start(sent, lambda: self._finish(chunk, start))

    def _finish(self, chunk: int, start: float) -> None:
        stage, _, sent = self.stage_data[chunk][self.position[chunk]]
        dim = self.dims[stage.dim]
        if self.record:
            self.spans.append(Span(
                resource=dim.resource, start=start, end=self.engine.now, kind=stage.phase.value,
                label=f"c{chunk} {stage.phase.value}", num_bytes=round(sent), group="network",
                args={"chunk": chunk, "stage": self.position[chunk], "phase": stage.phase.value},
            ))
        dim.free += 1
        self.position[chunk] += 1
        if self.position[chunk] < len(self.stage_data[chunk]):
            next_dim = self.stage_data[chunk][self.position[chunk]][0].dim
            self._enqueue(chunk)
            self._dispatch(next_dim)
        self._dispatch(stage.dim)


def execute_plan(plan: CollectivePlan, record: bool = True) -> Execution:
    """Simulate ``plan`` (assumed valid) and return its timeline and completion time (s);
    ``record=False`` skips building the timeline (for searches that only need the time)."""
    return _Run(plan, record).run()
