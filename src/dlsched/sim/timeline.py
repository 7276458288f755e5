"""The Timeline: what every simulator and the runtime produce, and every report consumes."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Span:
    """One piece of work on one resource.

    ``start``/``end`` in seconds; ``num_bytes`` moved (0 for compute); ``group`` names the
    owner shown as a process in traces (a rank, "network"); ``args`` carries identifiers such
    as chunk id and stage for traces and tests.
    """

    resource: str
    start: float
    end: float
    kind: str
    label: str
    num_bytes: int = 0
    group: str = ""
    args: Mapping[str, Any] = field(default_factory=dict)

    @property
    def duration(self) -> float:
        """Length of the span in seconds."""
        return self.end - self.start


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total, current_start, current_end = 0.0, None, None
    for start, end in sorted(intervals):
        if current_end is None or start > current_end:
            if current_end is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None:
        total += current_end - current_start
    return total


class Timeline:
    """An immutable collection of spans with the queries reports need (all times in seconds)."""

    __slots__ = ("spans",)

    def __init__(self, spans: Iterable[Span]) -> None:
        self.spans: tuple[Span, ...] = tuple(spans)

    def __len__(self) -> int:
        return len(self.spans)

    @property
    def start(self) -> float:
        """Earliest span start (0.0 for an empty timeline)."""
        return min((s.start for s in self.spans), default=0.0)

    @property
    def end(self) -> float:
        """Latest span end (0.0 for an empty timeline)."""
        return max((s.end for s in self.spans), default=0.0)

    @property
    def makespan(self) -> float:
        """end - start, seconds."""
        return self.end - self.start

    def resources(self) -> list[str]:
        """Resource names in order of first appearance."""
        return list(dict.fromkeys(s.resource for s in self.spans))

    def on(self, resource: str) -> list[Span]:
        """Spans on one resource, by start time."""
        return sorted((s for s in self.spans if s.resource == resource), key=lambda s: s.start)

    def busy_time(self, resource: str) -> float:
        """Seconds during which at least one span is active on ``resource``."""
        return _union_length([(s.start, s.end) for s in self.spans if s.resource == resource])

    def busy_fraction(self, resource: str) -> float:
        """busy_time / makespan (0 for an empty timeline)."""
        span = self.makespan
        return self.busy_time(resource) / span if span > 0 else 0.0

    def bytes_by_resource(self) -> dict[str, int]:
        """Bytes moved on each resource."""
        totals: dict[str, int] = defaultdict(int)
        for s in self.spans:
            totals[s.resource] += s.num_bytes
        return dict(totals)

    def lanes(self) -> list[int]:
        """For each span (in ``spans`` order) a lane index so spans sharing a lane never overlap.

        Lanes are assigned per resource greedily by start time (interval partitioning, which
        uses the minimum number of lanes); traces give each lane its own track.
        """
        lane_of = [0] * len(self.spans)
        lane_ends: dict[str, list[float]] = defaultdict(list)
        order = sorted(range(len(self.spans)), key=lambda i: (self.spans[i].start, i))
        for index in order:
            span = self.spans[index]
            ends = lane_ends[span.resource]
            free = next((k for k, end in enumerate(ends) if end <= span.start), None)
            if free is None:
                ends.append(span.end)
                lane_of[index] = len(ends) - 1
            else:
                ends[free] = span.end
                lane_of[index] = free
        return lane_of
