"""What one gradient all-reduce costs: alpha-beta presets, a ring formula, or a Topology.

Every model maps a message of ``num_bytes`` bytes to seconds and gives ``lower(total, n)``, a
lower bound on the time of any n or more messages that together carry ``total`` bytes — what
the scheduling lower bound needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from dlsched.collectives import CollectiveOp, ideal_time, run_collective
from dlsched.errors import ConfigError
from dlsched.hardware import Topology, load_topology
from dlsched.units import parse_bandwidth, parse_time

FP32 = 4  # bytes per element of the reference's per-element constants


@dataclass(frozen=True)
class AlphaBeta:
    """``alpha + beta x bytes`` seconds per all-reduce (alpha: startup s, beta: s/byte)."""

    alpha: float
    beta: float
    name: str = "alpha-beta"

    def __post_init__(self) -> None:
        if self.alpha < 0 or self.beta < 0 or self.alpha + self.beta <= 0:
            raise ConfigError(f"network: alpha and beta must be >= 0 and not both 0 (got "
                              f"alpha={self.alpha!r} s, beta={self.beta!r} s/B)")

    def cost(self, num_bytes: float) -> float:
        """Seconds to all-reduce one message of ``num_bytes`` bytes."""
        return self.alpha + self.beta * num_bytes

    def lower(self, total_bytes: float, messages: int = 1) -> float:
        """Fewest seconds ``messages`` or more messages carrying ``total_bytes`` can take."""
        return messages * self.alpha + self.beta * total_bytes


def ring_allreduce(workers: int, link_bandwidth: float, link_latency: float) -> AlphaBeta:
    """Ring all-reduce over ``workers``: 2(N-1) steps of latency, 2(N-1)/N x bytes per link."""
    if workers < 2:
        raise ConfigError(f"workers: a ring all-reduce needs >= 2 workers (got {workers})")
    return AlphaBeta(2 * (workers - 1) * link_latency,
                     2 * (workers - 1) / workers / link_bandwidth, f"ring-{workers}")


# The US-Byte reference constants (per fp32 element) and MG-WFBP's 10 GbE cluster (per byte).
PRESETS: dict[str, AlphaBeta] = {
    "usbyte-2": AlphaBeta(556.6e-6, 0.352e-10 / FP32, "usbyte-2"),
    "usbyte-4": AlphaBeta(948.98e-6, 1.541e-10 / FP32, "usbyte-4"),
    "usbyte-8": AlphaBeta(1318.6e-6, 2.406e-10 / FP32, "usbyte-8"),
    "10gbe-8": AlphaBeta(0.523e-3, 8.57e-10, "10gbe-8"),
}


@dataclass(frozen=True)
class TopologyPriced:
    """Each message priced by the collective simulator: an All-Reduce over ``topology`` with
    ``policy`` (Themis+SCF by default) and ``num_chunks`` chunks; results are cached."""

    topology: Topology
    policy: str = "themis"
    num_chunks: int = 16
    name: str = field(default="", compare=False)

    def cost(self, num_bytes: float) -> float:
        """Simulated seconds of an All-Reduce of ``num_bytes`` bytes."""
        return _priced(self.topology, self.policy, self.num_chunks, max(1, round(num_bytes)))

    def lower(self, total_bytes: float, messages: int = 1) -> float:
        """The collective's ideal time (bytes / sum of bandwidths) is a bound for any split
        into any number of messages."""
        return ideal_time(self.topology, CollectiveOp.ALL_REDUCE, max(1, round(total_bytes)))


@lru_cache(maxsize=65536)
def _priced(topology: Topology, policy: str, num_chunks: int, num_bytes: int) -> float:
    chunks = max(1, min(num_chunks, num_bytes))
    return run_collective(topology, "all-reduce", num_bytes, chunks, policy, "scf").time_s


CommModel = AlphaBeta | TopologyPriced


def parse_network(text: str, workers: int) -> CommModel:
    """``--network``: a preset (usbyte-2/4/8, 10gbe-8), ``ALPHA,BETA`` (e.g. ``1.3ms,6e-11``:
    startup and seconds per byte), ``ring:BANDWIDTH,LATENCY`` (e.g. ``ring:100Gb/s,5us``, over
    ``workers``) or ``topology:PRESET`` (a collective topology preset or file)."""
    if text in PRESETS:
        return PRESETS[text]
    if text.startswith("ring:"):
        bandwidth, _, latency = text[5:].partition(",")
        return ring_allreduce(workers, parse_bandwidth(bandwidth), parse_time(latency or 0.0))
    if text.startswith("topology:"):
        return TopologyPriced(load_topology(text[9:]), name=text)
    alpha, comma, beta = text.partition(",")
    if comma:
        try:
            return AlphaBeta(parse_time(alpha), float(beta), text)
        except ValueError as error:
            raise ConfigError(f"network: {error}") from None
    raise ConfigError(f"network: {text!r} is not understood; accepted: "
                      + ", ".join(PRESETS) + ", 'ALPHA,BETA' (e.g. '1.3ms,6e-11'), "
                      "'ring:BANDWIDTH,LATENCY' (e.g. 'ring:100Gb/s,5us'), 'topology:PRESET'")
