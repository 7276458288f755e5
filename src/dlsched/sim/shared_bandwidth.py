"""A channel whose bandwidth is shared equally by the transfers in flight (processor sharing).

This is the fluid model used by every dlsched simulator when several transfers use one link or
network dimension at once: with ``n`` transfers active each progresses at ``bandwidth / n``
bytes/s, and a transfer that joins or leaves changes the rate of the others from that moment on.
"""

from __future__ import annotations

from collections.abc import Callable

from dlsched.sim.engine import Engine

# Transfers within this fraction of their size of the one that completes finish with it
# (guards against float residue leaving a few bytes behind).
_RELATIVE_TOLERANCE = 1e-9


class SharedChannel:
    """Transfers on one channel of ``bandwidth`` bytes/s, shared equally among active ones."""

    __slots__ = ("_active", "_engine", "_last", "_next_id", "_version", "bandwidth")

    def __init__(self, engine: Engine, bandwidth: float) -> None:
        self.bandwidth = bandwidth
        self._engine = engine
        self._active: dict[int, list] = {}
        self._last = 0.0
        self._version = 0
        self._next_id = 0

    @property
    def active(self) -> int:
        """Number of transfers in flight."""
        return len(self._active)

    def start(self, num_bytes: float, on_done: Callable[[], None]) -> None:
        """Begin sending ``num_bytes`` bytes now; call ``on_done()`` when the last byte arrives."""
        self._advance()
        self._next_id += 1
        self._active[self._next_id] = [float(num_bytes), on_done, float(num_bytes)]
        self._reschedule()

    def _advance(self) -> None:
        now = self._engine.now
        if self._active and now > self._last:
            sent = (now - self._last) * self.bandwidth / len(self._active)
            for entry in self._active.values():
                entry[0] -= sent
        self._last = now

    def _reschedule(self) -> None:
        self._version += 1
        if not self._active:
            return
        least = min(entry[0] for entry in self._active.values())
        delay = max(least, 0.0) * len(self._active) / self.bandwidth
        self._engine.after(delay, self._complete, self._version)

    def _complete(self, version: int) -> None:
        if version != self._version:
            return
        self._advance()
        least = min(entry[0] for entry in self._active.values())
        done = [
            key
            for key, entry in self._active.items()
            if entry[0] <= least + _RELATIVE_TOLERANCE * max(1.0, entry[2])
        ]
        callbacks = [self._active.pop(key)[1] for key in done]
        self._reschedule()
        for callback in callbacks:
            callback()
