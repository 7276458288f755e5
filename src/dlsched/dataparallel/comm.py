"""What one gradient all-reduce costs: alpha-beta, size-dependent piecewise, ring/tree
formulas with per-step latency, a fitted network file, or a Topology.

Every model maps a message of ``num_bytes`` bytes to seconds (``cost``), splits that time into
a latency part, which concurrent messages overlap, and a transfer part, which they share the
bandwidth for (``split``), and gives ``lower(total, n, in_flight)``, a lower bound on the time
of any n or more messages that together carry ``total`` bytes when at most ``in_flight`` of
them run at once — what the scheduling lower bound needs.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from dlsched.collectives import CollectiveOp, ideal_time, run_collective
from dlsched.errors import ConfigError
from dlsched.hardware import Topology
from dlsched.sim.collective_cost import RING, TREE, allreduce_alpha_beta
from dlsched.validation import BANDWIDTH, LATENCY

FP32 = 4  # bytes per element of the reference's per-element constants


@dataclass(frozen=True)
class AlphaBeta:
    """``alpha + beta x bytes`` seconds per all-reduce (alpha: startup s, beta: s/byte)."""

    alpha: float
    beta: float
    name: str = "alpha-beta"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.alpha) and math.isfinite(self.beta)) or self.alpha < 0 \
                or self.beta < 0 or self.alpha + self.beta <= 0:
            raise ConfigError(f"network: alpha and beta must be finite, >= 0 and not both 0 (got "
                              f"alpha={self.alpha!r} s, beta={self.beta!r} s/B)")

    def cost(self, num_bytes: float) -> float:
        """Seconds to all-reduce one message of ``num_bytes`` bytes."""
        return self.alpha + self.beta * num_bytes

    def split(self, num_bytes: float) -> tuple[float, float]:
        """(latency s, transfer s at the full bandwidth) of one message; they sum to cost."""
        return self.alpha, self.beta * num_bytes

    def lower(self, total_bytes: float, messages: int = 1, in_flight: int = 1) -> float:
        """Fewest seconds ``messages`` or more messages carrying ``total_bytes`` can take when
        at most ``in_flight`` run at once (their latencies may then overlap)."""
        return _lower_lines([(self.alpha, self.beta)], total_bytes, messages, in_flight)


def _lower_lines(lines: list[tuple[float, float]], total: float, messages: int,
                 in_flight: int) -> float:
    """Bound for costs that are >= each ``alpha + beta x`` line given (alpha >= 0).

    Serial: each message costs >= alpha + beta x_i, summing to messages x alpha + beta x total.
    Concurrent: all transfer happens after the first latency ends, at no more than the full
    bandwidth, and each of k slots holds a message for at least its latency."""
    if in_flight <= 1:
        return max(messages * alpha + beta * total for alpha, beta in lines)
    alpha = min(a for a, _ in lines)
    beta = min(b for _, b in lines)
    return max(alpha + beta * total, math.ceil(messages / in_flight) * alpha)


def _supporting(curve: AlphaBeta | Piecewise) -> list[tuple[float, float]]:
    """Lines ``(alpha, beta)`` at or below the curve for every size (alpha >= 0)."""
    return [(curve.alpha, curve.beta)] if isinstance(curve, AlphaBeta) \
        else curve.supporting_lines()


@dataclass(frozen=True)
class Segment:
    """One size range of a piecewise model: messages of at most ``up_to`` bytes (the last
    segment: any size) cost ``alpha + bytes / bandwidth`` seconds."""

    up_to: float
    alpha: float
    beta: float


@dataclass(frozen=True)
class Piecewise:
    """Size-dependent all-reduce cost: alpha-beta segments ordered by ``up_to`` (bytes); a
    message uses the first segment whose ``up_to`` it does not exceed (the last is unbounded).
    Models the small-message latency regime and the bandwidth regime of real all-reduces, e.g.
    NCCL's choice between tree and ring, or a fit of timed all-reduces."""

    segments: tuple[Segment, ...]
    name: str = "piecewise"

    def __post_init__(self) -> None:
        if not self.segments or self.segments[-1].up_to != math.inf:
            raise ConfigError("network: a piecewise model needs >= 1 segment and its last "
                              "segment must be unbounded (no up_to)")
        bounds = [s.up_to for s in self.segments]
        if any(b >= c for b, c in itertools.pairwise(bounds)) or bounds[0] <= 0:
            raise ConfigError(f"network: piecewise up_to values must be > 0 and strictly "
                              f"ascending (got {bounds[:-1]})")
        for segment in self.segments:
            AlphaBeta(segment.alpha, segment.beta)

    def _segment(self, num_bytes: float) -> Segment:
        return next(s for s in self.segments if num_bytes <= s.up_to)

    def cost(self, num_bytes: float) -> float:
        """Seconds to all-reduce one message of ``num_bytes`` bytes."""
        segment = self._segment(num_bytes)
        return segment.alpha + segment.beta * num_bytes

    def split(self, num_bytes: float) -> tuple[float, float]:
        """(latency s, transfer s) of one message: its segment's alpha and beta x bytes."""
        segment = self._segment(num_bytes)
        return segment.alpha, segment.beta * num_bytes

    def lower(self, total_bytes: float, messages: int = 1, in_flight: int = 1) -> float:
        """A valid lower bound: the best of the supporting lines ``c + s x`` below the cost
        curve with c >= 0 (one per segment slope), serial or concurrent as in AlphaBeta."""
        return _lower_lines(self.supporting_lines(), total_bytes, messages, in_flight)

    def supporting_lines(self) -> list[tuple[float, float]]:
        """Lines ``(c, s)`` with ``c + s x <= cost(x)`` for all x >= 0 and c >= 0: for each
        segment slope s, c is the least of ``alpha_i + (beta_i - s) x`` over every segment's
        size range (its ends suffice, the terms being linear), plus min alpha / min beta."""
        lines = [(min(s.alpha for s in self.segments), min(s.beta for s in self.segments))]
        last = self.segments[-1].beta
        for slope in sorted({s.beta for s in self.segments if s.beta <= last}):
            low, lowest = 0.0, math.inf
            for segment in self.segments:
                ends = [low] + ([segment.up_to] if segment.up_to != math.inf else [])
                lowest = min(lowest, *(segment.alpha + (segment.beta - slope) * x for x in ends))
                low = segment.up_to
            if lowest >= 0:
                lines.append((lowest, slope))
        return lines


def ring_allreduce(workers: int, link_bandwidth: float, link_latency: float) -> AlphaBeta:
    """Ring all-reduce over ``workers`` (``sim.collective_cost``): 2(N-1) steps of latency,
    2(N-1)/N x bytes per link."""
    if workers < 2:
        raise ConfigError(f"workers: a ring all-reduce needs >= 2 workers (got {workers})")
    _check_link(link_bandwidth, link_latency)
    return AlphaBeta(*allreduce_alpha_beta(RING, workers, link_bandwidth, link_latency),
                     f"ring-{workers}")


def tree_allreduce(workers: int, link_bandwidth: float, link_latency: float) -> AlphaBeta:
    """Pipelined (double binary) tree all-reduce: reduce up and broadcast down a tree of depth
    ceil(log2 N), 2 ceil(log2 N) steps of latency; every byte crosses a link twice
    (``sim.collective_cost``)."""
    if workers < 2:
        raise ConfigError(f"workers: a tree all-reduce needs >= 2 workers (got {workers})")
    _check_link(link_bandwidth, link_latency)
    return AlphaBeta(*allreduce_alpha_beta(TREE, workers, link_bandwidth, link_latency),
                     f"tree-{workers}")


def nccl_allreduce(workers: int, link_bandwidth: float,
                   link_latency: float) -> Piecewise | AlphaBeta:
    """The faster of tree and ring for each size, as NCCL chooses: tree for small messages
    (fewer latency steps), ring above the size where the two meet (less traffic per byte)."""
    ring = ring_allreduce(workers, link_bandwidth, link_latency)
    tree = tree_allreduce(workers, link_bandwidth, link_latency)
    name = f"nccl-{workers}"
    if tree.alpha >= ring.alpha or tree.beta <= ring.beta:
        best = ring if ring.cost(2**30) <= tree.cost(2**30) else tree
        return AlphaBeta(best.alpha, best.beta, name)
    crossover = (ring.alpha - tree.alpha) / (tree.beta - ring.beta)
    return Piecewise((Segment(crossover, tree.alpha, tree.beta),
                      Segment(math.inf, ring.alpha, ring.beta)), name)


def _check_link(bandwidth: float, latency: float) -> None:
    BANDWIDTH.check(bandwidth, "network: link bandwidth")
    LATENCY.check(latency, "network: link latency")


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

    def split(self, num_bytes: float) -> tuple[float, float]:
        """All of the simulated time is transfer (concurrent messages share it)."""
        return 0.0, self.cost(num_bytes)

    def lower(self, total_bytes: float, messages: int = 1, in_flight: int = 1) -> float:
        """The collective's ideal time (bytes / sum of bandwidths) is a bound for any split
        into any number of messages, serial or concurrent."""
        return ideal_time(self.topology, CollectiveOp.ALL_REDUCE, max(1, round(total_bytes)))


@lru_cache(maxsize=65536)
def _priced(topology: Topology, policy: str, num_chunks: int, num_bytes: int) -> float:
    chunks = max(1, min(num_chunks, num_bytes))
    return run_collective(topology, "all-reduce", num_bytes, chunks, policy, "scf").time_s


@dataclass(frozen=True)
class TwoState:
    """An all-reduce whose cost depends on what the ranks do meanwhile: ``idle`` while they
    do not compute, ``loaded`` while they do (on CPU ranks the communication threads and the
    kernel's network processing then wait for the cores that compute takes; ``dlsched
    calibrate --load both`` measures both). ``cost``, ``split`` and ``lower`` are the idle
    curve's: what policies plan with and what the bound uses. The simulator runs a message
    ``slowdown(bytes)`` times slower for the part of it that overlaps compute, and the rank's
    compute ``compute_slowdown(bytes)`` times slower while a message of that size is in flight
    (``contention.py``). ``compute``: measured (bytes, factor) pairs, factor = compute time
    beside an all-reduce of that size / compute time alone; none: compute is never slowed.
    ``stream``: the loaded cost per message of all-reduces queued back to back (a message
    that waited behind another is charged ``queued_slowdown`` while the ranks compute);
    ``idle_stream``: the same while no rank computes (``idle_queued_slowdown``); none: as an
    isolated one."""

    idle: AlphaBeta | Piecewise
    loaded: AlphaBeta | Piecewise
    name: str = "two-state"
    compute: tuple[tuple[float, float], ...] = ()
    stream: AlphaBeta | Piecewise | None = None
    idle_stream: AlphaBeta | Piecewise | None = None

    def __post_init__(self) -> None:
        sizes = [b for b, _ in self.compute]
        if any(not (math.isfinite(b) and b >= 0 and math.isfinite(f) and f > 0)
               for b, f in self.compute) or sizes != sorted(set(sizes)):
            raise ConfigError(f"under_load.compute_slowdown: sizes must be finite, >= 0 and "
                              f"strictly ascending, factors finite and > 0 (got "
                              f"{list(self.compute)})")

    def cost(self, num_bytes: float) -> float:
        """Seconds of one message of ``num_bytes`` bytes while no rank computes."""
        return self.idle.cost(num_bytes)

    def split(self, num_bytes: float) -> tuple[float, float]:
        """(latency s, transfer s) of one message while no rank computes."""
        return self.idle.split(num_bytes)

    def lower(self, total_bytes: float, messages: int = 1, in_flight: int = 1) -> float:
        """The idle curve's bound: an isolated message under load is never faster
        (``slowdown`` >= 1). With stream curves, a queued message may cost less than an idle
        one (the queued slowdowns are not clamped), so the bound is that of the lowest of the
        curves at every size: per combination of their supporting lines, the least alpha and
        the least beta."""
        streams = [curve for curve in (self.stream, self.idle_stream) if curve is not None]
        if not streams:
            return self.idle.lower(total_bytes, messages, in_flight)
        lines = [(min(a for a, _ in combo), min(b for _, b in combo))
                 for combo in itertools.product(*map(_supporting, (self.idle, *streams)))]
        return _lower_lines(lines, total_bytes, messages, in_flight)

    def slowdown(self, num_bytes: float) -> float:
        """loaded / idle seconds of one message, at least 1: compute beside a message never
        speeds it up, so a loaded fit below the idle one (measurement noise) counts as idle."""
        return self._over_idle(self.loaded, num_bytes)

    def queued_slowdown(self, num_bytes: float) -> float:
        """``slowdown`` of a message that waited behind another: the stream curve over the
        idle one as measured, not clamped to 1 (``slowdown`` without a stream curve). A
        queue's messages, timed from issue to the last completion, can cost less each than
        an idle one timed alone (no skew between the ranks at its start); ``dlsched
        calibrate`` refuses a stream below half the idle cost (an impossible value, which a
        clamp here used to hide)."""
        if self.stream is None:
            return self.slowdown(num_bytes)
        return self._ratio(self.stream, num_bytes)

    def idle_queued_slowdown(self, num_bytes: float) -> float:
        """How many times its idle cost a message that waited behind another costs while no
        rank computes: the idle stream curve over the idle one as measured (1 without one).
        Measured on 8 loopback ranks of a 16-core machine, a queue of 52 all-reduces cost
        1.47x (64 KiB), 1.55x (512 KiB) and 1.13x (2 MiB) the isolated one per message."""
        if self.idle_stream is None:
            return 1.0
        return self._ratio(self.idle_stream, num_bytes)

    def _ratio(self, curve: AlphaBeta | Piecewise, num_bytes: float) -> float:
        idle = self.idle.cost(num_bytes)
        return curve.cost(num_bytes) / idle if idle > 0 else 1.0

    def _over_idle(self, curve: AlphaBeta | Piecewise, num_bytes: float) -> float:
        idle = self.idle.cost(num_bytes)
        return max(1.0, curve.cost(num_bytes) / idle) if idle > 0 else 1.0

    def compute_slowdown(self, num_bytes: float) -> float:
        """How many times slower the rank computes while a message of ``num_bytes`` bytes is
        in flight: the measured factors interpolated linearly in log(bytes), the end values
        beyond the measured sizes, at least 1 (1 with no measurement)."""
        if not self.compute:
            return 1.0
        sizes = [math.log(max(b, 1.0)) for b, _ in self.compute]
        factors = [f for _, f in self.compute]
        return max(1.0, float(np.interp(math.log(max(num_bytes, 1.0)), sizes, factors)))


CommModel = AlphaBeta | Piecewise | TopologyPriced | TwoState
