"""Measured timelines: time stamps taken while training, turned into a dlsched Timeline.

On the CPU a stamp is ``time.perf_counter()``; on a CUDA device it is an event recorded on the
current stream (so it marks when the GPU reaches that point), resolved to seconds only when the
timeline is built. Spans between stamps become ``Span``s with the same resources and kinds the
simulators use, so traces, plots and metrics work on measurements unchanged.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from dlsched.sim.timeline import Span, Timeline


class Clock:
    """Stamps on the host (perf counter) or on a CUDA device (events); seconds on request."""

    def __init__(self, cuda: bool = False) -> None:
        self.cuda = cuda
        self._origin = self.stamp()

    def stamp(self) -> Any:
        """Mark now (host) or now-on-the-stream (CUDA)."""
        if not self.cuda:
            return time.perf_counter()
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, stamp: Any) -> float:
        """Seconds from this clock's creation to ``stamp`` (synchronizes CUDA once)."""
        if not self.cuda:
            return stamp - self._origin
        stamp.synchronize()
        return self._origin.elapsed_time(stamp) / 1e3


@dataclass
class Recorder:
    """Collects spans as (start stamp, end stamp) pairs; ``timeline()`` resolves them."""

    clock: Clock
    group: str = ""
    _pending: list[tuple[Any, Any, dict[str, Any]]] = field(default_factory=list)
    _resolved: list[Span] = field(default_factory=list)

    def add(self, resource: str, kind: str, label: str, start: Any, end: Any,
            num_bytes: int = 0, **args: Any) -> None:
        """A span from stamp ``start`` to stamp ``end``."""
        self._pending.append((start, end, {"resource": resource, "kind": kind, "label": label,
                                           "num_bytes": num_bytes, "args": args}))

    def add_seconds(self, resource: str, kind: str, label: str, start: float, end: float,
                    num_bytes: int = 0, **args: Any) -> None:
        """A span given directly in seconds (on the scale of ``timeline``'s ``origin``, e.g.
        host ``time.perf_counter()`` values with a perf-counter origin)."""
        self._resolved.append(Span(resource, start, end, kind, label, num_bytes, self.group,
                                   args))

    def timeline(self, origin: float = 0.0) -> Timeline:
        """Every span so far, in seconds after ``origin``: stamped spans are measured from the
        clock's creation, ``add_seconds`` spans keep their own scale; both then minus origin."""
        spans = [Span(p["resource"], self.clock.seconds(s) - origin,
                      self.clock.seconds(e) - origin, p["kind"], p["label"], p["num_bytes"],
                      self.group, p["args"]) for s, e, p in self._pending]
        spans += [Span(s.resource, s.start - origin, s.end - origin, s.kind, s.label,
                       s.num_bytes, s.group, s.args) for s in self._resolved]
        return Timeline(sorted(spans, key=lambda s: (s.start, s.resource)))
