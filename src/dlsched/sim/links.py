"""Shared links: transfers that hold one or more resources and share their bandwidth.

The one bandwidth-sharing model of dlsched (collectives, training, data parallel and the
pipeline all move their bytes through it). A resource is a link, a NIC direction or a whole
network dimension, of ``capacity`` bytes/s. A transfer moves ``num_bytes`` bytes over its
resources, at most at its own ``cap`` bytes/s; the transfers in flight share every resource
max-min fairly (progressive filling): with ``n`` transfers on one resource and nothing else
binding, each moves at ``capacity / n`` bytes/s (processor sharing), and a transfer that joins
or leaves changes the others' rates from that moment on. A transfer alone thus takes exactly
``num_bytes / min(cap, capacities)`` seconds.

Streams: a transfer may name a ``stream``; with ``in_flight = k`` a stream moves at most ``k``
of its transfers at once, the others waiting in the order they were sent (``k = 1``: a FIFO
stream, as NCCL runs one communicator's operations; ``in_flight = None``: no limit, every
transfer moves at once). Rates are recomputed once per instant at which transfers start (a
ring all-reduce step starts hundreds at once).

``processor_sharing``: every transfer holds one resource and no cap, so its rate is exactly
``capacity / n`` (the max-min rate); it is then computed as such, and rates are recomputed at
every start and at every ``touch`` (a model that steps its own clock, such as data parallel's
k-slot network, progresses the transfers at each of its events).

Twins: transfers sent together (``send_each``) that move alike (same size, cap, rate alone and
slowdown, from the same instant) are kept as one in flight, the first carrying the others as
``twins``, while no resource any of them holds is shared: they then have the same rate (a
transfer that shares nothing moves at the level of the first round of progressive filling that
reaches its rate alone, whatever else shares), hence the same bytes left, float for float, and
they end at the same event, in the order they were sent. Once one of their resources is shared
they are split into single transfers with the bytes they have left. The arithmetic per
transfer is unchanged: every time, rate and order is what single sends give.

Slowed links: a transfer may carry a ``slowdown`` (>= 1); while the links are ``slowed``
(``set_slowed``: e.g. the ranks compute and the communication threads wait for cores) it
moves that many times slower than its fair share, the share it leaves unused going to no one.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Hashable, Sequence

from dlsched.sim.engine import Engine

# A transfer within this fraction of its size (at least 1 byte), plus what it moves in 1e-15 s
# (alone, under processor sharing), of its end when another completes finishes with it: float
# residue must not leave a few bytes behind (the default ``residue``).
_RELATIVE_TOLERANCE = 1e-9


class Transfer:
    """``size`` bytes over ``resources`` at most at ``cap`` bytes/s (``solo``: its rate when
    it shares nothing, bytes/s; ``slowdown``: how many times slower it moves while the links
    are slowed); ``left`` bytes still to move at ``rate`` bytes/s; ``floor``: the bytes it
    may have left and still end with one that completes (``residue`` x its size, at least
    ``residue``); ``twins``: (resources, stream, on_done) of the transfers moving exactly as
    this one (see the module docstring)."""

    __slots__ = ("cap", "count", "factor", "floor", "left", "on_done", "rate", "resources",
                 "size", "slowdown", "solo", "stream", "twins")

    def __init__(self, size: float, cap: float, resources: tuple[Hashable, ...],
                 stream: Hashable, on_done: Callable[[], None], solo: float,
                 slowdown: float, residue: float) -> None:
        self.size = self.left = size
        self.floor = residue * max(1.0, size)
        self.cap, self.resources, self.stream, self.on_done = cap, resources, stream, on_done
        self.solo, self.slowdown, self.rate = solo, slowdown, 0.0
        self.count, self.factor = 1, 1.0  # under processor sharing: rate = solo / (count x factor)
        self.twins: list[tuple[tuple[Hashable, ...], Hashable, Callable[[], None]]] = []

    def parts(self) -> list[tuple[tuple[Hashable, ...], Hashable, Callable[[], None]]]:
        """(resources, stream, on_done) of this transfer and of each of its twins, in the
        order they were sent."""
        return [(self.resources, self.stream, self.on_done), *self.twins]


class SharedLinks:
    """Transfers over shared resources, driven by ``engine`` (see the module docstring).
    ``capacity`` maps each resource to its bytes/s (``add`` more later); ``residue``: the
    fraction of its size (at least 1 byte) a transfer may have left and still end with one
    that completes (a model that counts seconds of transfer at a capacity of 1 passes 0: only
    what moves in 1e-15 s is then left)."""

    def __init__(self, engine: Engine, capacity: dict[Hashable, float] | None = None,
                 in_flight: int | None = None, processor_sharing: bool = False,
                 residue: float = _RELATIVE_TOLERANCE) -> None:
        if in_flight is not None and in_flight < 1:
            raise ValueError(f"in_flight: a stream needs >= 1 transfer in flight (got "
                             f"{in_flight})")
        self.engine, self.in_flight, self.equal = engine, in_flight, processor_sharing
        self.residue = residue
        self.due = math.inf  # when the next transfer completes
        self.slowed = False
        self.capacity: dict[Hashable, float] = dict(capacity or {})
        self.active: list[Transfer] = []
        self.users: dict[Hashable, int] = {}  # transfers in flight on each resource
        self.shared = 0  # resources with more than one transfer in flight
        self.moving: dict[Hashable, int] = {}  # transfers in flight per stream
        self.waiting: dict[Hashable, deque[Transfer]] = {}
        self.last = 0.0
        self.version = 0
        self.planned = -1  # engine.scheduled just after queuing the pending completion event
        self.settling = False

    def add(self, resource: Hashable, capacity: float) -> Hashable:
        """Declare ``resource`` of ``capacity`` bytes/s (kept if already declared); return it."""
        self.capacity.setdefault(resource, capacity)
        return resource

    def send(self, num_bytes: float, resources: Sequence[Hashable], on_done: Callable[[], None],
             cap: float = float("inf"), stream: Hashable = None, slowdown: float = 1.0) -> None:
        """Move ``num_bytes`` bytes over ``resources`` (declared), at most ``cap`` bytes/s and
        ``slowdown`` times slower while slowed, from now (or once ``stream`` has room);
        ``on_done()`` runs when the last byte arrives."""
        transfer = self._queued(num_bytes, resources, on_done, cap, stream, slowdown)
        if transfer is None:
            return
        self._advance()
        self._admit(transfer)
        if self.equal:
            self._reschedule()
            return
        self._started()

    def send_each(self, sends: Sequence[tuple[float, Sequence[Hashable], Callable[[], None],
                                              float, Hashable]]) -> None:
        """``send(num_bytes, resources, on_done, cap, stream)`` for each of ``sends`` in
        order, now: the same transfers, times and order as one call each; consecutive ones
        that move alike are kept as twins (see the module docstring)."""
        if self.equal:
            for num_bytes, resources, on_done, cap, stream in sends:
                self.send(num_bytes, resources, on_done, cap, stream)
            return
        head: Transfer | None = None
        for num_bytes, resources, on_done, cap, stream in sends:
            size, solo = float(num_bytes), self._solo(resources, cap)
            if (head is not None and size == head.size and cap == head.cap
                    and solo == head.solo and self._room(stream)):
                resources = tuple(resources)
                self._hold(resources, stream)
                head.twins.append((resources, stream, on_done))
                continue
            transfer = self._queued(size, resources, on_done, cap, stream, 1.0)
            if transfer is None:
                continue
            if head is None:
                self._advance()
            self._admit(transfer)
            head = transfer
        if head is not None:
            self._started()

    def _queued(self, num_bytes: float, resources: Sequence[Hashable],
                on_done: Callable[[], None], cap: float, stream: Hashable,
                slowdown: float) -> Transfer | None:
        """A new transfer (see ``send``), or None when it waits for room on its stream."""
        if self.equal and (len(resources) != 1 or cap != math.inf):
            raise ValueError("processor sharing: a transfer holds one resource and no cap")
        transfer = Transfer(float(num_bytes), cap, tuple(resources), stream, on_done,
                            self._solo(resources, cap), slowdown, self.residue)
        if not self._room(stream):
            self.waiting.setdefault(stream, deque()).append(transfer)
            return None
        return transfer

    def _solo(self, resources: Sequence[Hashable], cap: float) -> float:
        """The rate (bytes/s) of a transfer over ``resources`` capped at ``cap`` alone."""
        capacity, solo = self.capacity, cap
        for key in resources:
            if capacity[key] < solo:
                solo = capacity[key]
        return solo

    def _room(self, stream: Hashable) -> bool:
        """Whether ``stream`` may start another transfer now."""
        return self.in_flight is None or self.moving.get(stream, 0) < self.in_flight

    def _started(self) -> None:
        """Transfers started now (not under processor sharing): recompute the rates once at
        this instant."""
        self.version += 1  # the pending completion event no longer holds
        self.planned = -1
        if not self.settling:
            self.settling = True
            self.engine.after(0.0, self._settle)

    def set_slowed(self, slowed: bool) -> None:
        """From now on, move every transfer ``slowdown`` times slower (or at its share)."""
        if slowed != self.slowed:
            self._advance()
            self.slowed = slowed
            self._reschedule()

    def touch(self, end: bool = True, replan: bool = True) -> None:
        """Progress every transfer to now, end those that are done (with ``end``) and plan
        the next completion again (``replan=False``: not when none ended, for a caller that
        sends a transfer right away, which plans it)."""
        if end:
            self._advance()
            self._end_done(False, replan)
        elif self.engine.now > self.last:  # else nothing moved since the last plan
            self._advance()
            self._reschedule()

    def clear(self) -> None:
        """Drop every transfer in flight or waiting (with ``Engine.clear``, for a simulation
        stopped early: their ``on_done`` callbacks refer back to it)."""
        self.active.clear()
        self.waiting.clear()

    @property
    def count(self) -> int:
        """Transfers in flight (not waiting on their stream)."""
        return sum(1 + len(transfer.twins) for transfer in self.active)

    def _settle(self) -> None:
        """Recompute the rates once for every transfer that started at this instant."""
        self.settling = False
        self._reschedule()

    def _admit(self, transfer: Transfer) -> None:
        self.active.append(transfer)
        self._hold(transfer.resources, transfer.stream)

    def _hold(self, resources: tuple[Hashable, ...], stream: Hashable) -> None:
        """Count a transfer in flight on ``resources`` and ``stream``."""
        self.moving[stream] = self.moving.get(stream, 0) + 1
        users = self.users
        for key in resources:
            count = users.get(key, 0) + 1
            users[key] = count
            if count == 2:
                self.shared += 1

    def _release(self, resources: tuple[Hashable, ...], stream: Hashable) -> None:
        """Count a transfer on ``resources`` and ``stream`` ended; admit the next waiting on
        ``stream``."""
        users = self.users
        for key in resources:
            count = users[key] - 1
            users[key] = count
            if count == 1:
                self.shared -= 1
        self.moving[stream] -= 1
        queue = self.waiting.get(stream)
        if queue:
            self._admit(queue.popleft())

    def _split(self, transfer: Transfer) -> list[Transfer]:
        """``transfer`` and its twins as single transfers with its bytes left and rate."""
        singles = [transfer]
        for resources, stream, on_done in transfer.twins:
            twin = Transfer(transfer.size, transfer.cap, resources, stream, on_done,
                            transfer.solo, transfer.slowdown, self.residue)
            twin.left, twin.rate = transfer.left, transfer.rate
            singles.append(twin)
        transfer.twins = []
        return singles

    def _split_shared(self) -> None:
        """Split every transfer with twins of which one holds a shared resource."""
        users, active = self.users, []
        for transfer in self.active:
            if transfer.twins and any(users[key] > 1 for resources, _, _ in transfer.parts()
                                      for key in resources):
                active.extend(self._split(transfer))
            else:
                active.append(transfer)
        self.active = active

    def _advance(self) -> None:
        now = self.engine.now
        if now > self.last:
            elapsed = now - self.last
            if self.equal:
                for transfer in self.active:
                    transfer.left -= elapsed * transfer.solo / (transfer.count * transfer.factor)
            else:
                for transfer in self.active:
                    transfer.left -= transfer.rate * elapsed
        self.last = now

    def _rates(self) -> None:
        """Each transfer's fair share (``_shares``), divided by its slowdown while slowed."""
        if self.equal:
            users, slowed = self.users, self.slowed
            for transfer in self.active:
                transfer.count = users[transfer.resources[0]]
                transfer.factor = transfer.slowdown if slowed else 1.0
                transfer.rate = transfer.solo / (transfer.count * transfer.factor)
            return
        if self.shared:
            self._split_shared()
        self._shares()
        if self.slowed:
            for transfer in self.active:
                transfer.rate /= transfer.slowdown

    def _shares(self) -> None:
        """Max-min fair rates with per-transfer caps (progressive filling): each round raises
        every unfrozen transfer to the lowest cap or fair share of a resource, and freezes the
        transfers that reached it. ``rising[key]`` counts a resource's unfrozen transfers."""
        if not self.shared:
            for transfer in self.active:  # no resource shared: each runs at its own limit
                transfer.rate = transfer.solo
            return
        users: dict[Hashable, list[Transfer]] = {}
        for transfer in self.active:
            transfer.rate = -1.0
            for key in transfer.resources:
                users.setdefault(key, []).append(transfer)
        left = {key: self.capacity[key] for key in users}
        rising = {key: len(transfers) for key, transfers in users.items()}
        unfrozen = list(self.active)
        while unfrozen:
            level = min(min(t.cap for t in unfrozen),
                        min(left[key] / count for key, count in rising.items()))
            limit = level * (1 + _RELATIVE_TOLERANCE)
            frozen = [t for t in unfrozen if t.cap <= limit]
            for key in [key for key, count in rising.items() if left[key] / count <= limit]:
                frozen.extend(t for t in users[key] if t.rate < 0)
            newly = []
            for transfer in frozen:
                if transfer.rate < 0:
                    transfer.rate = level
                    newly.append(transfer)
            if len(newly) == len(unfrozen):
                return  # every rate is set: what the resources have left is not needed
            for transfer in newly:
                for key in transfer.resources:
                    left[key] -= level
                    rising[key] -= 1
                    if not rising[key]:
                        del rising[key]
            unfrozen = [t for t in unfrozen if t.rate < 0]

    def _reschedule(self) -> None:
        if not self.active:
            self.version += 1
            self.due, self.planned = math.inf, -1
            return
        self._rates()
        if self.equal:
            delay = min((t.left if t.left > 0.0 else 0.0) * t.factor * t.count / t.solo
                        for t in self.active)
        else:
            delay = min((t.left if t.left > 0.0 else 0.0) / t.rate for t in self.active)
        due = self.engine.now + delay
        engine = self.engine
        if due == self.due and self.planned == engine.scheduled:
            return  # the pending event holds: same time, and none queued since (same order)
        self.version += 1
        self.due = due
        engine.at(due, self._complete, self.version)
        self.planned = engine.scheduled

    def _complete(self, version: int) -> None:
        if version == self.version:
            self.planned = -1
            self._advance()
            self._end_done(True)

    def _end_done(self, due: bool, replan: bool = True) -> None:
        """End the transfers that are done now (``due``: at least the first to finish: this
        instant was planned for it) and plan the next completion (when none ended: only with
        ``replan``)."""
        equal = self.equal  # processor sharing: what it moves alone in 1e-15 s may be left
        done = [t for t in self.active
                if t.left <= t.floor + (t.solo if equal else t.rate) * 1e-15]
        if not done:
            if not due:
                if replan:
                    self._reschedule()
                return
            # This event was set for the transfer that finishes first; when its delay is below
            # the clock's resolution the clock cannot advance, so it is complete now.
            first = min(self.active, key=lambda t: t.left / t.rate)
            if first.twins:  # only the first of them ends: the others become single
                at = self.active.index(first)
                self.active[at:at + 1] = self._split(first)
            done = [first]
        finished = set(done)
        self.active = [t for t in self.active if t not in finished]
        parts = [part for transfer in done for part in transfer.parts()]
        for resources, stream, _ in parts:
            self._release(resources, stream)
        self._reschedule()
        for _, _, on_done in parts:
            on_done()
