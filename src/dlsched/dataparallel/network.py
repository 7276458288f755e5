"""A network that holds up to k all-reduces in flight, sharing its bandwidth.

Messages are admitted in submission order (FIFO), each no earlier than its launch time and only
while fewer than ``slots`` are running and, with a ``credit`` (bytes), while the running
messages hold fewer than ``credit`` bytes (ByteScheduler's rule: a block starts while credit is
left, and its size is taken from the credit; a credit of 1 byte lets exactly one run). A running
message first spends its latency (startup, per-step latencies: concurrent messages overlap
these), then its transfer: ``transfer`` seconds of the full bandwidth, which the messages
transferring at the same moment share equally (processor sharing, ``sim.links.SharedLinks``
with one resource moving one second of transfer per second). With one slot this is the
serial network of the reference model: each message starts when the previous one ends and its
launch time has come, and lasts its cost.

Each message may carry a ``slowdown`` (>= 1): while the network is ``loaded`` (the ranks
compute, ``set_loaded``) its latency and its share of the transfer progress that many times
slower. A message entirely under load thus lasts slowdown x its cost, one half under load
(by its idle progress) half of each. Without loading, slowdowns never act. A message admitted
after waiting behind earlier ones (its launch time already past) uses its ``queued``
slowdown instead when it has one: messages queued back to back keep the communication
threads busy and cost less under load than one on a quiet network; and while not loaded it
costs its ``queued_idle`` times its idle cost (its latency and transfer stretched by it, its
loaded slowdown divided by it, so that under load it still costs ``queued`` times the idle
cost).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from dlsched.sim.engine import Engine
from dlsched.sim.links import SharedLinks

_NETWORK = "network"


@dataclass
class _Running:
    index: int
    start: float
    latency_end: float  # inf once the transfer has begun
    transfer: float  # seconds of transfer at the full bandwidth
    size: float = 0.0  # bytes it holds of the credit
    slowdown: float = 1.0  # how many times slower it progresses while the network is loaded
    compute: float = 1.0  # how many times slower the rank computes while it is in flight
    version: int = 0  # of its pending latency-end event


class SharedNetwork:
    """Event-driven k-slot network; ``submit`` messages, ``advance`` time, read completions."""

    def __init__(self, slots: int, credit: float = math.inf) -> None:
        if slots < 1:
            raise ValueError(f"in_flight: the network needs >= 1 slot (got {slots})")
        if not credit > 0:
            raise ValueError(f"credit: must be > 0 bytes (got {credit})")
        self.slots = slots
        self.credit = credit
        self.engine = Engine()
        self.links = SharedLinks(self.engine, {_NETWORK: 1.0}, processor_sharing=True,
                                 residue=0.0)
        self.waiting: deque[tuple[int, float, float, float, float, float, float, float,
                                  float]] = deque()
        self.running: dict[int, _Running] = {}
        self.held = 0.0  # bytes the running messages hold of the credit
        self.loaded = False
        self.done: list[tuple[int, float, float]] = []
        self.wake = math.inf  # when an admission is scheduled

    @property
    def now(self) -> float:
        """The network's clock, seconds."""
        return self.engine.now

    def submit(self, index: int, launch: float, latency: float, transfer: float,
               slowdown: float = 1.0, compute: float = 1.0, queued: float | None = None,
               size: float = 0.0, queued_idle: float = 1.0) -> None:
        """Queue message ``index``: launch (s), latency (s) and transfer (s at full rate) when
        not loaded, its ``slowdown`` (>= 1) while loaded (``queued`` instead, when given, if
        it is admitted after its launch time, behind earlier messages, and then
        ``queued_idle`` times its latency and transfer while not loaded), the ``compute``
        slowdown it causes while in flight (see ``compute_slowdown``) and its ``size`` (bytes
        taken from the credit while it runs)."""
        self.waiting.append((index, launch, latency, transfer, slowdown, compute,
                             slowdown if queued is None else queued, size, queued_idle))

    def compute_slowdown(self) -> float:
        """How many times slower the rank computes now: the largest ``compute`` factor of the
        messages in flight (1 when none is)."""
        return max((r.compute for r in self.running.values()), default=1.0)

    def _factor(self, running: _Running) -> float:
        return running.slowdown if self.loaded else 1.0

    def set_loaded(self, loaded: bool) -> None:
        """From the current time on, run messages at their loaded (slowed) or idle rate; a
        latency in progress keeps its idle-rate progress."""
        if loaded == self.loaded:
            return
        now = self.now
        for running in self.running.values():
            if running.latency_end < math.inf:
                left = (running.latency_end - now) / self._factor(running)
                running.latency_end = now + left * (running.slowdown if loaded else 1.0)
                self._latency_event(running)
        self.loaded = loaded
        self.links.set_slowed(loaded)

    @property
    def busy(self) -> bool:
        """Whether any message is waiting or running."""
        return bool(self.waiting or self.running)

    def _admits(self) -> bool:
        """Whether the next waiting message may start once its launch time has come: a slot
        is free and the running messages hold less than the credit."""
        return bool(self.waiting) and len(self.running) < self.slots and self.held < self.credit

    def next_event(self) -> float:
        """Time of the next admission, latency end or completion (inf when idle)."""
        admission = max(self.now, self.waiting[0][1]) if self._admits() else math.inf
        return min(admission, self.links.due, *(r.latency_end for r in self.running.values()))

    def advance(self, until: float) -> list[tuple[int, float, float]]:
        """Run events up to time ``until`` (s); ``(index, start, end)`` of messages that ended.
        Messages submitted since the last call are admitted from now on."""
        if self._admits() and self.waiting[0][1] <= min(until, self.now):
            self.links.touch()
        self._admit()
        self.engine.run(until)
        if math.isfinite(until):
            self.links.touch(end=False)  # progress only: no event happens at ``until``
        done, self.done = self.done, []
        return done

    def _admit(self) -> None:
        """Start waiting messages in order while a slot and credit are free and the next one's
        launch time has come; wake up at its launch time otherwise."""
        now = self.now
        while self._admits():
            (index, launch, latency, transfer, slowdown, compute, queued, size,
             queued_idle) = self.waiting[0]
            if launch > now:
                if launch < self.wake:
                    self.wake = launch
                    self.engine.at(launch, self._wake)
                return
            self.waiting.popleft()
            if launch < now:  # it waited behind earlier messages
                latency, transfer = latency * queued_idle, transfer * queued_idle
                slowdown = queued / queued_idle
            running = _Running(index, now, 0.0, transfer, size, slowdown, compute)
            running.latency_end = now + latency * self._factor(running)
            self.running[index] = running
            self.held += size
            if running.latency_end > now:
                self._latency_event(running)
            else:
                self._transfer(running)

    def _wake(self) -> None:
        self.wake = math.inf
        self.links.touch()
        self._admit()

    def _latency_event(self, running: _Running) -> None:
        running.version += 1
        self.engine.at(running.latency_end, self._latency_done, running, running.version)

    def _latency_done(self, running: _Running, version: int) -> None:
        if version == running.version and running.latency_end < math.inf:
            # Transfers that end now end before this one joins them; its send plans the
            # next completion.
            self.links.touch(replan=False)
            self._transfer(running)

    def _transfer(self, running: _Running) -> None:
        running.latency_end = math.inf
        self.links.send(running.transfer, (_NETWORK,), lambda: self._finish(running),
                        slowdown=running.slowdown)

    def _finish(self, running: _Running) -> None:
        del self.running[running.index]
        self.held = self.held - running.size if self.running else 0.0
        self.done.append((running.index, running.start, self.now))
        self._admit()


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
