"""Eager PyTorch's CPU and GPU running side by side: the step takes max(GPU, CPU) along the
dependency chain, not their sum.

The host launches kernels one after another, ``overhead`` seconds each (Python, dispatcher,
autograd); the GPU runs each kernel once it is launched and the one before it has finished.
For an op of ``launches`` kernels sharing ``gpu_s`` seconds equally (tau each), launched from
CPU time C with the GPU free at g, the GPU is done at

    max(g + gpu_s, C + overhead + gpu_s, C + launches x overhead + tau)

(the first kernel waits for its launch, then either the GPU or the launches set the pace) and
the CPU moves on to C + launches x overhead. The GPU *starves* where it waits for a launch:
the step's launch-bound time is what it spends idle.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Work:
    """One op's GPU seconds and kernels launched."""

    gpu_s: float
    launches: float


@dataclass
class Clock:
    """The GPU's and CPU's clocks (seconds) and the GPU's idle time so far."""

    gpu: float = 0.0
    cpu: float = 0.0
    idle: float = 0.0
    busy: float = 0.0

    def run(self, work: Work, overhead: float) -> float:
        """Advance both clocks over one op (see the module docstring); the seconds the GPU's
        clock advanced (exactly ``gpu_s`` for work launched by no kernel, a profiled time)."""
        if work.launches <= 0:
            self.gpu += work.gpu_s
            self.busy += work.gpu_s
            return work.gpu_s
        start = self.gpu
        tau = work.gpu_s / work.launches
        self.gpu = max(self.gpu + work.gpu_s, self.cpu + overhead + work.gpu_s,
                       self.cpu + work.launches * overhead + tau)
        self.cpu += work.launches * overhead
        self.busy += work.gpu_s
        self.idle += self.gpu - start - work.gpu_s
        return self.gpu - start

    def span(self, works: Iterable[Work], overhead: float) -> float:
        """Seconds the GPU clock advances over ``works`` run in order."""
        return sum(self.run(work, overhead) for work in works)


def alone(works: Iterable[Work], overhead: float) -> float:
    """Seconds of ``works`` run from an idle GPU and host (a layer priced on its own)."""
    return Clock().span(works, overhead)
