"""A network that holds up to k all-reduces in flight, sharing its bandwidth.

Messages are admitted in submission order (FIFO), each no earlier than its launch time and only
while fewer than ``slots`` are running and, with a ``credit`` (bytes), while the running
messages hold fewer than ``credit`` bytes (ByteScheduler's rule: a block starts while credit is
left, and its size is taken from the credit; a credit of 1 byte lets exactly one run). A running
message first spends its latency (startup, per-step latencies: concurrent messages overlap
these), then its transfer: ``transfer`` seconds of the full bandwidth, which the messages
transferring at the same moment share equally (processor sharing). With one slot this is the
serial network of the reference model: each message starts when the previous one ends and its
launch time has come, and lasts its cost.

Each message may carry a ``slowdown`` (>= 1): while the network is ``loaded`` (the ranks
compute, ``set_loaded``) its latency and its share of the transfer progress that many times
slower. A message entirely under load thus lasts slowdown x its cost, one half under load
(by its idle progress) half of each. Without loading, slowdowns never act. A message admitted
after waiting behind earlier ones (its launch time already past) uses its ``queued``
slowdown instead when it has one: messages queued back to back keep the communication
threads busy and cost less under load than one on a quiet network.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

EPSILON = 1e-15  # seconds of transfer below which a message counts as done


@dataclass
class _Running:
    index: int
    start: float
    latency_end: float
    remaining: float  # seconds of transfer at the full bandwidth still to do
    size: float = 0.0  # bytes it holds of the credit
    slowdown: float = 1.0  # how many times slower it progresses while the network is loaded
    compute: float = 1.0  # how many times slower the rank computes while it is in flight


class SharedNetwork:
    """Event-driven k-slot network; ``submit`` messages, ``advance`` time, read completions."""

    def __init__(self, slots: int, credit: float = math.inf) -> None:
        if slots < 1:
            raise ValueError(f"in_flight: the network needs >= 1 slot (got {slots})")
        if not credit > 0:
            raise ValueError(f"credit: must be > 0 bytes (got {credit})")
        self.slots = slots
        self.credit = credit
        self.now = 0.0
        self.waiting: deque[tuple[int, float, float, float, float, float, float, float]] = \
            deque()
        self.running: list[_Running] = []
        self.held = 0.0  # bytes the running messages hold of the credit
        self.loaded = False

    def submit(self, index: int, launch: float, latency: float, transfer: float,
               slowdown: float = 1.0, compute: float = 1.0, queued: float | None = None,
               size: float = 0.0) -> None:
        """Queue message ``index``: launch (s), latency (s) and transfer (s at full rate) when
        not loaded, its ``slowdown`` (>= 1) while loaded (``queued`` instead, when given, if
        it is admitted after its launch time, behind earlier messages), the ``compute``
        slowdown it causes while in flight (see ``compute_slowdown``) and its ``size`` (bytes
        taken from the credit while it runs)."""
        self.waiting.append((index, launch, latency, transfer, slowdown, compute,
                             slowdown if queued is None else queued, size))

    def _admits(self) -> bool:
        """Whether the next waiting message may start once its launch time has come: a slot
        is free and the running messages hold less than the credit."""
        return bool(self.waiting) and len(self.running) < self.slots and self.held < self.credit

    def compute_slowdown(self) -> float:
        """How many times slower the rank computes now: the largest ``compute`` factor of the
        messages in flight (1 when none is)."""
        return max((r.compute for r in self.running), default=1.0)

    def _factor(self, running: _Running) -> float:
        return running.slowdown if self.loaded else 1.0

    def set_loaded(self, loaded: bool) -> None:
        """From the current time on, run messages at their loaded (slowed) or idle rate; a
        latency in progress keeps its idle-rate progress (``advance`` to the moment first)."""
        if loaded == self.loaded:
            return
        for running in self.running:
            if running.latency_end > self.now:
                left = (running.latency_end - self.now) / self._factor(running)
                running.latency_end = self.now + left * (running.slowdown if loaded else 1.0)
        self.loaded = loaded

    @property
    def busy(self) -> bool:
        """Whether any message is waiting or running."""
        return bool(self.waiting or self.running)

    def next_event(self) -> float:
        """Time of the next admission, latency end or completion (inf when idle)."""
        events = [math.inf]
        if self._admits():
            events.append(max(self.now, self.waiting[0][1]))
        transferring = [r for r in self.running if r.latency_end <= self.now]
        events.extend(r.latency_end for r in self.running if r.latency_end > self.now)
        if transferring:
            events.append(self.now + min(r.remaining * self._factor(r) for r in transferring)
                          * len(transferring))
        return min(events)

    def advance(self, until: float) -> list[tuple[int, float, float]]:
        """Run events up to time ``until`` (s); ``(index, start, end)`` of messages that ended."""
        done: list[tuple[int, float, float]] = []
        while True:
            event = self.next_event()
            if event > until or event == math.inf:
                if math.isfinite(until):
                    self._progress(until)
                return done
            self._progress(event)
            sharing = sum(1 for r in self.running if r.latency_end <= self.now)
            for running in [r for r in self.running if r.latency_end <= self.now and (
                    r.remaining <= EPSILON
                    or self.now + r.remaining * self._factor(r) * sharing <= self.now)]:
                self.running.remove(running)
                self.held = self.held - running.size if self.running else 0.0
                done.append((running.index, running.start, self.now))
            while self._admits() and self.waiting[0][1] <= self.now:
                index, launch, latency, transfer, slowdown, compute, queued, size = \
                    self.waiting.popleft()
                if launch < self.now:
                    slowdown = queued
                running = _Running(index, self.now, 0.0, transfer, size, slowdown, compute)
                running.latency_end = self.now + latency * self._factor(running)
                self.running.append(running)
                self.held += size

    def _progress(self, time: float) -> None:
        """Move the clock to ``time``, sharing the bandwidth among transferring messages."""
        if time <= self.now:
            return
        transferring = [r for r in self.running if r.latency_end <= self.now]
        for running in transferring:
            running.remaining -= (time - self.now) / (len(transferring) * self._factor(running))
        self.now = time


def shared_times(messages: list[tuple[float, float, float]], slots: int,
                 credit: float = math.inf,
                 sizes: Sequence[float] = ()) -> tuple[list[float], list[float]]:
    """Start and end seconds of messages ``(launch, latency, transfer)`` (seconds) in order on
    a ``slots``-message network (FIFO admission, shared bandwidth) with ``credit`` bytes, each
    message holding its entry of ``sizes`` (bytes; none given: 0) while it runs."""
    network = SharedNetwork(slots, credit)
    for index, (launch, latency, transfer) in enumerate(messages):
        network.submit(index, launch, latency, transfer,
                       size=sizes[index] if sizes else 0.0)
    starts, ends = [0.0] * len(messages), [0.0] * len(messages)
    for index, start, end in network.advance(math.inf):
        starts[index], ends[index] = start, end
    return starts, ends
