"""What a pipeline simulation returns: the iteration's time, memory and busy seconds, and its
timeline, whose spans are kept as records (the function that makes each and its arguments)
and built when first read: planners compare thousands of simulated times and read few
timelines."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from dlsched.errors import Cutoff
from dlsched.pipeline.plans.actions import Action
from dlsched.pipeline.plans.plan import PipelinePlan
from dlsched.sim import Span, Timeline

KIND_NAMES = {"F": "forward", "B": "backward", "I": "backward-input", "W": "backward-weight"}


class Late(Cutoff):
    """A simulation passed its deadline: the iteration ends after it."""


# A span as recorded during a simulation: the function that makes it and its arguments.
SpanRecord = tuple[Callable[..., Span], tuple]


@dataclass(frozen=True, eq=False)
class SimResult:
    """A simulated iteration: time (s), peak memory per GPU (bytes), busy seconds per GPU,
    the plan run, and the timeline (``timeline``, built from ``records`` when first read)."""

    plan: PipelinePlan
    iteration_s: float
    peak_memory: tuple[float, ...]
    busy_s: tuple[float, ...]
    records: tuple[SpanRecord, ...] = field(repr=False)

    @cached_property
    def timeline(self) -> Timeline:
        """Every compute, transfer and all-reduce span (seconds), in the order they ended."""
        return Timeline(make(*args) for make, args in self.records)

    @property
    def bubble_fraction(self) -> float:
        """Idle share of the used GPUs' time: 1 - busy / (GPUs used x iteration)."""
        used = [b for b, order in zip(self.busy_s, self.plan.orders, strict=True) if order]
        if not used or self.iteration_s <= 0:
            return 0.0
        return 1.0 - sum(used) / (len(used) * self.iteration_s)


def compute_span(name: str, start: float, end: float, action: Action) -> Span:
    """GPU ``name`` running ``action`` from ``start`` to ``end`` (seconds)."""
    return Span(name, start, end, KIND_NAMES[action.kind], str(action), group=name,
                args={"stage": action.stage, "microbatch": action.microbatch})


def link_span(src: int, dst: int, start: float, end: float, kind: str, target: Action,
               num_bytes: float) -> Span:
    """An activation or gradient (``kind``) for ``target`` moving ``num_bytes`` bytes from
    GPU ``src`` to ``dst`` between ``start`` and ``end`` (seconds)."""
    return Span(f"link {src}->{dst}", start, end, kind, f"{kind} {target}", int(num_bytes),
                "network", {"stage": target.stage, "microbatch": target.microbatch})


def sync_span(name: str, start: float, end: float, label: str, stage: int) -> Span:
    """GPU ``name``'s part of an all-reduce of ``stage`` from ``start`` to ``end`` (s)."""
    return Span(f"{name} sync", start, end, "allreduce", label, group=name,
                args={"stage": stage})
