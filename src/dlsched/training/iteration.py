"""Simulate whole training iterations: one NPU's compute stream plus the shared network.

Every NPU does the same work (data- and model-parallel groups are symmetric), so one NPU's
compute stream and its share of every network dimension describe the whole machine. Per
iteration the compute stream runs, in order: the forward of every layer, then the backward of
every layer from the last — a layer whose input gradient is communicated computes it first (the
collective then overlaps the weight gradient), otherwise the weight gradient comes first so its
collective starts earlier. A layer's optimizer update runs on the same stream as soon as its
weight-gradient collective is done (before the next static task). Each collective is issued
when the compute that produces its data ends and is planned at that moment by the policy; the
compute task that consumes it (``Comm.consumer``; e.g. the layer's next forward for its
gradient) waits for it.

The run covers ``iterations`` iterations plus the first forward of the next; iteration ``k``
lasts from the start of the first layer's forward in ``k`` to that in ``k + 1``, and the last
one is reported (the first starts with an idle network and no pending updates).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from dlsched.collectives.network import Network
from dlsched.collectives.plan import CollectiveOp
from dlsched.hardware.topology import Topology
from dlsched.sim.engine import Engine
from dlsched.sim.timeline import Span, Timeline
from dlsched.training.groups import SubTopology, subtopology
from dlsched.training.policies import TrainingPolicy
from dlsched.training.workload import Comm, Workload

COMPUTE = "compute"
COLLECTIVES = "collectives"
_PHASE_TASK = {"forward": "F", "input_grad": "IG", "weight_grad": "WG", "update": "U"}
RECOMPUTE = "RF"  # a forward recomputed in the backward pass (activation checkpointing)


@dataclass(frozen=True)
class IterationRun:
    """A simulated run: its timeline (empty unless recorded), the start time (s) of every
    iteration's first forward (``iterations + 1`` values), engine events, the (start, end) of
    every collective and the (dimension, start, end, bytes) of every stage on the network (s, B),
    the latter two kept also when the timeline is not recorded."""

    timeline: Timeline
    starts: tuple[float, ...]
    events: int
    collectives: tuple[tuple[float, float], ...] = ()
    transfers: tuple[tuple[int, float, float, float], ...] = ()

    @property
    def periods(self) -> list[float]:
        """Length of each iteration, seconds."""
        return [b - a for a, b in zip(self.starts, self.starts[1:], strict=False)]


@dataclass(frozen=True)
class _CommSite:
    """A collective of the workload: who owns it, after which task it is issued and which
    task (iteration offset, kind, layer) waits for it."""

    comm: Comm
    owner: int
    phase: str
    sub: SubTopology
    consumer: tuple[int, str, int] | None


def _ig_issuers(workload: Workload) -> set[int]:
    """Layers after whose input-gradient compute some collective is issued."""
    return {workload.index(comm.issuer) if comm.issuer else owner
            for owner, layer in enumerate(workload.layers)
            if (comm := layer.input_grad_comm) is not None}


def _first_backward(issuers: set[int], layer: int) -> str:
    return "IG" if layer in issuers else "WG"


def _consumer(workload: Workload, issuers: set[int], owner: int, phase: str,
              comm: Comm) -> tuple[int, str, int] | None:
    last = len(workload.layers) - 1
    target = None if comm.consumer is None else workload.index(comm.consumer)
    if phase == "forward":
        if target is None and owner == last:
            again = workload.recomputed(last)
            return (0, RECOMPUTE, again.start) if again else \
                (0, _first_backward(issuers, last), last)
        return 0, "F", owner + 1 if target is None else target
    if phase == "input_grad":
        target = owner - 1 if target is None else target
        return None if target < 0 else (0, _first_backward(issuers, target), target)
    if phase == "weight_grad":
        return 0, "U", owner if target is None else target
    return 1, "F", owner if target is None else target


def comm_sites(workload: Workload, topology: Topology,
               op_topologies: Mapping[CollectiveOp, Topology] | None = None,
               ) -> dict[tuple[str, int], list[_CommSite]]:
    """Collectives of the workload keyed by the compute task ``(kind, layer)`` after which
    they are issued; single-NPU groups need no communication and are left out. A recomputed
    forward reissues the layer's forward collective, awaited by the next recomputed forward
    (or the initiator's backward). ``op_topologies``: the network (its per-dimension
    algorithms) a collective op runs on, when it differs from ``topology``'s."""
    sites: dict[tuple[str, int], list[_CommSite]] = {}
    issuers = _ig_issuers(workload)
    again = {j: (initiator, j + 1 < initiator) for _, initiator in workload.recompute
             for j in workload.recomputed(initiator)}
    for owner, layer in enumerate(workload.layers):
        for phase, comm in layer.comms().items():
            net = (op_topologies or {}).get(comm.op, topology)
            sub = subtopology(net, comm.group, workload.model_parallel, comm.dims)
            if sub.num_npus == 1:
                continue
            issuer = owner if comm.issuer is None else workload.index(comm.issuer)
            site = _CommSite(comm, owner, phase, sub,
                             _consumer(workload, issuers, owner, phase, comm))
            sites.setdefault((_PHASE_TASK[phase], issuer), []).append(site)
            if phase == "forward" and owner in again:
                initiator, more = again[owner]
                consumer = (0, RECOMPUTE, owner + 1) if more else \
                    (0, _first_backward(issuers, initiator), initiator)
                sites.setdefault((RECOMPUTE, owner), []).append(
                    _CommSite(comm, owner, phase, sub, consumer))
    return sites


class _Run:
    """State of one simulation; ``run()`` executes it."""

    def __init__(self, workload: Workload, topology: Topology, policy: TrainingPolicy,
                 iterations: int, chunks: int, concurrency: int, record: bool,
                 op_topologies: Mapping[CollectiveOp, Topology] | None) -> None:
        self.workload, self.policy, self.chunks, self.record = workload, policy, chunks, record
        self.engine = Engine()
        self.network = Network(self.engine, topology, concurrency, policy.intra, record)
        self.sites = comm_sites(workload, topology, op_topologies)
        self.iterations = iterations
        self.static = self._static_order(iterations)
        per_iteration = self.static[:(len(self.static) - 1) // iterations]
        self.position = {task[1:]: index for index, task in enumerate(per_iteration)}
        self.waiting = self._waiting(iterations)
        self.next_static = 0
        self.updates: deque[tuple[int, str, int]] = deque()
        self.busy = False
        self.starts: list[float] = []
        self.spans: list[Span] = []
        self.collectives: list[tuple[float, float]] = []

    def _static_order(self, iterations: int) -> list[tuple[int, str, int]]:
        layers = range(len(self.workload.layers))
        issuers = _ig_issuers(self.workload)
        order: list[tuple[int, str, int]] = []
        for k in range(iterations):
            order += [(k, "F", layer) for layer in layers]
            for layer in reversed(layers):
                order += [(k, RECOMPUTE, j) for j in self.workload.recomputed(layer)]
                first = _first_backward(issuers, layer)
                order += [(k, first, layer), (k, "WG" if first == "IG" else "IG", layer)]
        order.append((iterations, "F", 0))
        return order

    def _waiting(self, iterations: int) -> dict[tuple[int, str, int], int]:
        waiting = {task: 0 for task in self.static}
        for k in range(iterations):
            for layer in range(len(self.workload.layers)):
                waiting[(k, "U", layer)] = 1  # its weight gradient
                if (k + 1, "F", layer) in waiting:
                    waiting[(k + 1, "F", layer)] += 1  # its update
        for k in range(iterations):
            for sites in self.sites.values():
                for site in sites:
                    if site.consumer is not None:
                        offset, kind, layer = site.consumer
                        key = (k + offset, kind, layer)
                        if key in waiting:
                            waiting[key] += 1
        return waiting

    def run(self) -> IterationRun:
        self._try_compute()
        self.engine.run()
        spans = self.spans + self.network.spans
        return IterationRun(Timeline(spans), tuple(self.starts), self.engine.events_processed,
                            tuple(self.collectives), tuple(self.network.transfers))

    def _try_compute(self) -> None:
        if self.busy:
            return
        if self.updates:
            self._start(self.updates.popleft())
            return
        if self.next_static < len(self.static):
            task = self.static[self.next_static]
            if self.waiting[task] == 0:
                self.next_static += 1
                self._start(task)

    def _start(self, task: tuple[int, str, int]) -> None:
        k, kind, layer = task
        if kind == "F" and layer == 0:
            self.starts.append(self.engine.now)
            if k == self.iterations:
                return  # the marker: next iteration's first forward
        spec = self.workload.layers[layer]
        duration = {"F": spec.forward_s, "IG": spec.input_grad_s, "WG": spec.weight_grad_s,
                    "U": spec.update_s, RECOMPUTE: spec.forward_s}[kind]
        self.busy = True
        self.engine.after(duration, self._done, task, self.engine.now)

    def _done(self, task: tuple[int, str, int], start: float) -> None:
        k, kind, layer = task
        self.busy = False
        if self.record and self.engine.now > start:
            self.spans.append(Span(COMPUTE, start, self.engine.now, kind,
                                   f"{kind} {self.workload.layers[layer].name}", group="npu",
                                   args={"iteration": k, "layer": layer}))
        for site in self.sites.get((kind, layer), ()):
            self._issue(site, k)
        if kind == "WG":
            self._release((k, "U", layer))
        elif kind == "U":
            self._release((k + 1, "F", layer))
        self._try_compute()

    def _release(self, task: tuple[int, str, int]) -> None:
        if task not in self.waiting:
            return
        self.waiting[task] -= 1
        if self.waiting[task] == 0 and task[1] == "U":
            self.updates.append(task)

    def _issue(self, site: _CommSite, k: int) -> None:
        consumer = None
        if site.consumer is not None:
            offset, kind, layer = site.consumer
            consumer = (k + offset, kind, layer)
        need = self._need(consumer)
        flows = self.policy.flows(site.sub, site.comm.op, site.comm.num_bytes, self.chunks,
                                  self.network.pending_load())
        left = [len(flows)]
        start = self.engine.now

        def chunk_done() -> None:
            left[0] -= 1
            if left[0] == 0:
                self._collective_done(site, k, consumer, start)

        if not self.record:
            self.network.submit(flows, self.policy.priority(need), [chunk_done] * len(flows))
            return
        label = f"{site.comm.op.value} {site.phase} {self.workload.layers[site.owner].name} "
        self.network.submit(flows, self.policy.priority(need), [chunk_done] * len(flows),
                            [{"iteration": k, "layer": site.owner, "chunk": c}
                             for c in range(len(flows))], [label] * len(flows))

    def _need(self, consumer: tuple[int, str, int] | None) -> float:
        """Position in the compute order of the first task that waits for a collective (its
        update enables the layer's next forward, so an update's need is that forward's)."""
        if consumer is None:
            return float(len(self.static))
        k, kind, layer = consumer
        if kind == "U":
            k, kind = k + 1, "F"
        return float(k * len(self.position) + self.position[(kind, layer)])

    def _collective_done(self, site: _CommSite, k: int, consumer: tuple[int, str, int] | None,
                         start: float) -> None:
        self.collectives.append((start, self.engine.now))
        if self.record:
            comm = site.comm
            self.spans.append(Span(
                COLLECTIVES, start, self.engine.now, comm.op.value,
                f"{comm.op.value} {site.phase} {self.workload.layers[site.owner].name}",
                num_bytes=comm.num_bytes, group="npu",
                args={"iteration": k, "layer": site.owner, "phase": site.phase,
                      "group": comm.group}))
        if consumer is not None:
            self._release(consumer)
        self._try_compute()


def simulate_iterations(workload: Workload, topology: Topology, policy: TrainingPolicy,
                        iterations: int = 2, chunks: int = 64, concurrency: int = 1,
                        record: bool = True,
                        op_topologies: Mapping[CollectiveOp, Topology] | None = None,
                        ) -> IterationRun:
    """Run ``iterations`` iterations of ``workload`` on ``topology`` under ``policy``;
    ``chunks`` per collective, ``concurrency`` chunks per dimension at once;
    ``op_topologies``: per collective op, the same network with other per-dimension
    algorithms (e.g. direct All-to-All)."""
    return _Run(workload, topology, policy, iterations, chunks, concurrency, record,
                op_topologies).run()
