"""The network of a pipeline simulation: links inside servers, per-GPU NICs between them.

A transfer from GPU ``a`` to GPU ``b`` first waits the link latency, then moves its bytes:

* inside a server (same ``Device.server``) over the directed link ``a -> b`` (capacity
  ``bandwidth[a, b]``);
* across servers through ``a``'s NIC egress and ``b``'s NIC ingress, each a resource of the
  GPU's NIC rate (its fastest link to another server), shared by every transfer that crosses
  servers from or to that GPU: pipeline activations and gradients, and all-reduce traffic.

Transfers in flight share resources max-min fairly (progressive filling), each also capped at
its pair's ``bandwidth[a, b]``, so a transfer alone takes exactly
``latency + bytes / bandwidth`` (``DeviceGraph.transfer_time``). Rates are recomputed once per
instant at which transfers start (a ring all-reduce step starts hundreds at once), not once
per transfer. Two modes:

* ``fifo`` (default, as NCCL runs communication): each stream (a GPU's point-to-point sends;
  a GPU's all-reduce traffic) moves one transfer at a time, in the order they were issued;
  different streams share the resources;
* ``ps``: every transfer moves as soon as its latency has passed (processor sharing).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import numpy as np

from dlsched.errors import ConfigError
from dlsched.hardware.device_graph import DeviceGraph
from dlsched.sim import Engine

NETWORK_MODES = ("fifo", "ps")
_RELATIVE_TOLERANCE = 1e-9


def check_network(mode: str, field: str = "network") -> str:
    """``mode`` when it is a network mode; ConfigError naming ``field`` and listing them
    otherwise."""
    if mode not in NETWORK_MODES:
        raise ConfigError(f"{field}: unknown {mode!r}; accepted: " + ", ".join(NETWORK_MODES))
    return mode


@dataclass(eq=False)
class _Flow:
    size: float
    cap: float
    resources: tuple[Hashable, ...]
    stream: Hashable
    on_done: Callable[[], None]
    left: float = field(init=False)
    rate: float = 0.0

    def __post_init__(self) -> None:
        self.left = self.size


def nic_rates(graph: DeviceGraph) -> tuple[list[float], list[float]]:
    """Per GPU, (egress, ingress) NIC rate in B/s: its fastest link to / from another
    server (0 for a GPU with no other server)."""
    servers = np.array([d.server for d in graph.devices])
    across = np.where(servers[:, None] != servers[None, :], graph.bandwidth, 0.0)
    return across.max(axis=1).tolist(), across.max(axis=0).tolist()


class PipelineNetwork:
    """Transfers between the GPUs of ``graph`` driven by ``engine`` (see the module docstring)."""

    def __init__(self, engine: Engine, graph: DeviceGraph, mode: str = "fifo") -> None:
        self.engine, self.graph, self.fifo = engine, graph, check_network(mode) == "fifo"
        self.servers = [d.server for d in graph.devices]
        egress, ingress = nic_rates(graph)
        self.capacity: dict[Hashable, float] = {}
        for device in range(graph.num_devices):
            self.capacity[("out", device)] = egress[device]
            self.capacity[("in", device)] = ingress[device]
        self.active: list[_Flow] = []
        self.waiting: dict[Hashable, deque[_Flow]] = {}
        self.busy_streams: set[Hashable] = set()
        self.last = 0.0
        self.version = 0
        self.settling = False

    def resources(self, src: int, dst: int) -> tuple[Hashable, ...]:
        """The resources a transfer ``src -> dst`` holds."""
        if self.servers[src] == self.servers[dst]:
            key = ("link", src, dst)
            self.capacity.setdefault(key, float(self.graph.bandwidth[src, dst]))
            return (key,)
        return (("out", src), ("in", dst))

    def send(self, src: int, dst: int, num_bytes: float, stream: Hashable,
             on_done: Callable[[], None]) -> None:
        """Move ``num_bytes`` from ``src`` to ``dst`` on ``stream``; call ``on_done()`` when
        the last byte arrives. A transfer from a GPU to itself costs nothing: ``on_done`` runs
        at the current instant, with no latency and no link (the diagonal of the bandwidth
        matrix is unused)."""
        if src == dst:
            self.engine.after(0.0, on_done)
            return
        flow = _Flow(float(num_bytes), float(self.graph.bandwidth[src, dst]),
                     self.resources(src, dst), stream, on_done)
        self.engine.after(float(self.graph.latency[src, dst]), self._arrive, flow)

    def _arrive(self, flow: _Flow) -> None:
        if self.fifo and flow.stream in self.busy_streams:
            self.waiting.setdefault(flow.stream, deque()).append(flow)
            return
        self._advance()
        self._admit(flow)
        self.version += 1  # the pending completion event no longer holds
        if not self.settling:
            self.settling = True
            self.engine.after(0.0, self._settle)

    def _settle(self) -> None:
        """Recompute the rates once for every transfer that started at this instant."""
        self.settling = False
        self._reschedule()

    def _admit(self, flow: _Flow) -> None:
        self.busy_streams.add(flow.stream)
        self.active.append(flow)

    def _advance(self) -> None:
        now = self.engine.now
        if now > self.last:
            for flow in self.active:
                flow.left -= flow.rate * (now - self.last)
        self.last = now

    def _rates(self) -> None:
        """Max-min fair rates with per-flow caps (progressive filling): each round raises
        every unfrozen flow to the lowest cap or fair share of a resource, and freezes the
        flows that reached it. ``rising[key]`` counts a resource's unfrozen flows."""
        users: dict[Hashable, list[_Flow]] = {}
        for flow in self.active:
            flow.rate = -1.0
            for key in flow.resources:
                users.setdefault(key, []).append(flow)
        if all(len(flows) == 1 for flows in users.values()):
            for flow in self.active:  # no resource shared: each flow runs at its own limit
                flow.rate = min(flow.cap, *(self.capacity[key] for key in flow.resources))
            return
        left = {key: self.capacity[key] for key in users}
        rising = {key: len(flows) for key, flows in users.items()}
        unfrozen = list(self.active)
        while unfrozen:
            level = min(min(flow.cap for flow in unfrozen),
                        min(left[key] / count for key, count in rising.items()))
            limit = level * (1 + _RELATIVE_TOLERANCE)
            frozen = [f for f in unfrozen if f.cap <= limit]
            for key in [key for key, count in rising.items() if left[key] / count <= limit]:
                frozen.extend(f for f in users[key] if f.rate < 0)
            for flow in frozen:
                if flow.rate < 0:
                    flow.rate = level
                    for key in flow.resources:
                        left[key] -= level
                        rising[key] -= 1
                        if not rising[key]:
                            del rising[key]
            unfrozen = [f for f in unfrozen if f.rate < 0]

    def _reschedule(self) -> None:
        self.version += 1
        if not self.active:
            return
        self._rates()
        delay = min(max(f.left, 0.0) / f.rate for f in self.active)
        self.engine.after(delay, self._complete, self.version)

    def _complete(self, version: int) -> None:
        if version != self.version:
            return
        self._advance()
        done = [f for f in self.active
                if f.left <= _RELATIVE_TOLERANCE * max(1.0, f.size) + f.rate * 1e-15]
        if not done:
            # This event was set for the flow that finishes first; when its delay is below
            # the clock's resolution the clock cannot advance, so it is complete now.
            first = min(self.active, key=lambda f: f.left / f.rate)
            done = [first]
        finished = set(done)
        self.active = [f for f in self.active if f not in finished]
        for flow in done:
            self.busy_streams.discard(flow.stream)
            queue = self.waiting.get(flow.stream)
            if queue:
                self._admit(queue.popleft())
        self._reschedule()
        for flow in done:
            flow.on_done()
