"""The network of a pipeline simulation: links inside servers, per-GPU NICs between them.

A transfer from GPU ``a`` to GPU ``b`` first waits the link latency, then moves its bytes:

* inside a server (same ``Device.server``) over the directed link ``a -> b`` (capacity
  ``bandwidth[a, b]``);
* across servers through ``a``'s NIC egress and ``b``'s NIC ingress, each a resource of the
  GPU's NIC rate (its fastest link to another server), shared by every transfer that crosses
  servers from or to that GPU: pipeline activations and gradients, and all-reduce traffic.

Transfers in flight share the resources max-min fairly, each also capped at its pair's
``bandwidth[a, b]``, so a transfer alone takes exactly ``latency + bytes / bandwidth``
(``DeviceGraph.transfer_time``); the sharing is ``sim.links.SharedLinks``. Two modes:

* ``fifo`` (default, as NCCL runs communication): each stream (a GPU's point-to-point sends;
  a GPU's all-reduce traffic) moves one transfer at a time, in the order they were issued;
  different streams share the resources;
* ``ps``: every transfer moves as soon as its latency has passed (processor sharing).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from weakref import WeakKeyDictionary

import numpy as np

from dlsched.errors import ConfigError
from dlsched.hardware.device_graph import DeviceGraph
from dlsched.sim import Engine
from dlsched.sim.links import SharedLinks

NETWORK_MODES = ("fifo", "ps")


def check_network(mode: str, field: str = "network") -> str:
    """``mode`` when it is a network mode; ConfigError naming ``field`` and listing them
    otherwise."""
    if mode not in NETWORK_MODES:
        raise ConfigError(f"{field}: unknown link sharing mode {mode!r}; accepted: "
                          + ", ".join(NETWORK_MODES))
    return mode


def nic_rates(graph: DeviceGraph) -> tuple[list[float], list[float]]:
    """Per GPU, (egress, ingress) NIC rate in B/s: its fastest link to / from another
    server (0 for a GPU with no other server)."""
    servers = np.array([d.server for d in graph.devices])
    across = np.where(servers[:, None] != servers[None, :], graph.bandwidth, 0.0)
    return across.max(axis=1).tolist(), across.max(axis=0).tolist()


class _Routes:
    """Per device graph, what every network on it starts from: each resource's capacity
    (B/s: NIC egress and ingress per GPU, every directed link inside a server) and, found
    once per pair, (resources, bandwidth B/s, latency s) of a transfer ``src -> dst``."""

    def __init__(self, graph: DeviceGraph) -> None:
        self.graph = graph
        self.servers = [d.server for d in graph.devices]
        egress, ingress = nic_rates(graph)
        self.capacity: dict[Hashable, float] = {}
        for device in range(graph.num_devices):
            self.capacity[("out", device)] = egress[device]
            self.capacity[("in", device)] = ingress[device]
        for src, server in enumerate(self.servers):
            for dst, other in enumerate(self.servers):
                if src != dst and server == other:
                    self.capacity[("link", src, dst)] = float(graph.bandwidth[src, dst])
        self.pairs: dict[tuple[int, int], tuple[tuple[Hashable, ...], float, float]] = {}

    def pair(self, src: int, dst: int) -> tuple[tuple[Hashable, ...], float, float]:
        """(resources, bandwidth B/s, latency s) of a transfer ``src -> dst``."""
        pair = self.pairs.get((src, dst))
        if pair is None:
            resources = ((("link", src, dst),) if self.servers[src] == self.servers[dst]
                         else (("out", src), ("in", dst)))
            pair = self.pairs[(src, dst)] = (resources, float(self.graph.bandwidth[src, dst]),
                                             float(self.graph.latency[src, dst]))
        return pair


_ROUTES: WeakKeyDictionary[DeviceGraph, _Routes] = WeakKeyDictionary()


class PipelineNetwork:
    """Transfers between the GPUs of ``graph`` driven by ``engine`` (see the module docstring)."""

    def __init__(self, engine: Engine, graph: DeviceGraph, mode: str = "fifo") -> None:
        self.engine, self.graph = engine, graph
        fifo = check_network(mode) == "fifo"
        routes = _ROUTES.get(graph)
        if routes is None:
            routes = _ROUTES[graph] = _Routes(graph)
        self.links = SharedLinks(engine, routes.capacity, 1 if fifo else None)
        self.routes = routes

    def resources(self, src: int, dst: int) -> tuple[Hashable, ...]:
        """The resources a transfer ``src -> dst`` holds."""
        return self.routes.pair(src, dst)[0]

    def send(self, src: int, dst: int, num_bytes: float, stream: Hashable,
             on_done: Callable[[], None]) -> None:
        """Move ``num_bytes`` from ``src`` to ``dst`` on ``stream``; call ``on_done()`` when
        the last byte arrives. A transfer from a GPU to itself costs nothing: ``on_done`` runs
        at the current instant, with no latency and no link (the diagonal of the bandwidth
        matrix is unused)."""
        if src == dst:
            self.engine.after(0.0, on_done)
            return
        resources, bandwidth, latency = self.routes.pair(src, dst)
        self.engine.after(latency, self.links.send, float(num_bytes), resources, on_done,
                          bandwidth, stream)

    def send_each(self, sends: list[tuple[int, int, float, Hashable, Callable[[], None]]]
                  ) -> None:
        """``send(src, dst, num_bytes, stream, on_done)`` for each of ``sends``, in order:
        the transfers whose latency ends at the same instant start there in that order, in
        one event (``SharedLinks.send_each``), as one event each would."""
        starts: dict[float, list[tuple]] = {}
        now, pair = self.engine.now, self.routes.pair
        for src, dst, num_bytes, stream, on_done in sends:
            if src == dst:
                starts.setdefault(now + 0.0, []).append((0.0, None, on_done, 0.0, stream))
                continue
            resources, bandwidth, latency = pair(src, dst)
            starts.setdefault(now + latency, []).append(
                (float(num_bytes), resources, on_done, bandwidth, stream))
        for time, entries in starts.items():
            self.engine.at(time, self._start, entries)

    def _start(self, entries: list[tuple]) -> None:
        """Start ``entries`` (num_bytes, resources, on_done, cap B/s, stream) in order; one
        with no resources is a GPU sending to itself: ``on_done()`` now."""
        batch = []
        for entry in entries:
            if entry[1] is None:
                self.links.send_each(batch)
                batch = []
                entry[2]()
            else:
                batch.append(entry)
        self.links.send_each(batch)
