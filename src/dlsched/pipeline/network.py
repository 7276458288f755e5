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
        raise ConfigError(f"{field}: unknown {mode!r}; accepted: " + ", ".join(NETWORK_MODES))
    return mode


def nic_rates(graph: DeviceGraph) -> tuple[list[float], list[float]]:
    """Per GPU, (egress, ingress) NIC rate in B/s: its fastest link to / from another
    server (0 for a GPU with no other server)."""
    servers = np.array([d.server for d in graph.devices])
    across = np.where(servers[:, None] != servers[None, :], graph.bandwidth, 0.0)
    return across.max(axis=1).tolist(), across.max(axis=0).tolist()


class PipelineNetwork:
    """Transfers between the GPUs of ``graph`` driven by ``engine`` (see the module docstring)."""

    def __init__(self, engine: Engine, graph: DeviceGraph, mode: str = "fifo") -> None:
        self.engine, self.graph = engine, graph
        fifo = check_network(mode) == "fifo"
        self.servers = [d.server for d in graph.devices]
        egress, ingress = nic_rates(graph)
        capacity: dict[Hashable, float] = {}
        for device in range(graph.num_devices):
            capacity[("out", device)] = egress[device]
            capacity[("in", device)] = ingress[device]
        self.links = SharedLinks(engine, capacity, 1 if fifo else None)
        self.pairs: dict[tuple[int, int], tuple[tuple[Hashable, ...], float, float]] = {}

    def resources(self, src: int, dst: int) -> tuple[Hashable, ...]:
        """The resources a transfer ``src -> dst`` holds."""
        return self._pair(src, dst)[0]

    def _pair(self, src: int, dst: int) -> tuple[tuple[Hashable, ...], float, float]:
        """(resources, bandwidth B/s, latency s) of the pair, found once."""
        pair = self.pairs.get((src, dst))
        if pair is None:
            bandwidth = float(self.graph.bandwidth[src, dst])
            resources = ((self.links.add(("link", src, dst), bandwidth),)
                         if self.servers[src] == self.servers[dst]
                         else (("out", src), ("in", dst)))
            pair = self.pairs[(src, dst)] = (resources, bandwidth,
                                             float(self.graph.latency[src, dst]))
        return pair

    def send(self, src: int, dst: int, num_bytes: float, stream: Hashable,
             on_done: Callable[[], None]) -> None:
        """Move ``num_bytes`` from ``src`` to ``dst`` on ``stream``; call ``on_done()`` when
        the last byte arrives. A transfer from a GPU to itself costs nothing: ``on_done`` runs
        at the current instant, with no latency and no link (the diagonal of the bandwidth
        matrix is unused)."""
        if src == dst:
            self.engine.after(0.0, on_done)
            return
        resources, bandwidth, latency = self._pair(src, dst)
        self.engine.after(latency, self.links.send, float(num_bytes), resources, on_done,
                          bandwidth, stream)
