"""Execute a data-parallel plan: backward, the all-reduces, then the next forward.

Backward runs layers L-1 -> 0 back to back from time 0. Messages enter the network in plan
order; with ``in_flight`` 1 (serial) each starts at max(network free, its launch time) and costs
the comm model's time for its bytes; with k > 1 up to k run at once (fewer while the running
ones hold the plan's ``credit`` in bytes), overlapping their latencies and sharing the
bandwidth (``network.py``). The next forward runs layers 0 -> L-1 on the GPU
after backward; layer l
starts when layer l-1's forward is done and its own last block has arrived (with a barrier:
when every message has arrived). The iteration time is the end of the last forward.

With a two-state network (``TwoState``: idle and under-load curves) the network and the
rank's compute are simulated together, each slowing the other (``contention.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from dlsched.dataparallel.comm import TwoState
from dlsched.dataparallel.contention import contended_run
from dlsched.dataparallel.network import shared_times
from dlsched.dataparallel.plan import DPPlan
from dlsched.dataparallel.problem import DPProblem
from dlsched.sim.timeline import Span, Timeline


@dataclass(frozen=True)
class Execution:
    """Iteration time (s), the timeline, and when each layer's gradient was fully reduced."""

    time: float
    timeline: Timeline
    reduced: tuple[float, ...]


def comm_finish_times(problem: DPProblem, plan: DPPlan) -> tuple[list[float], list[float]]:
    """Start and end seconds of every message in plan order."""
    if isinstance(problem.comm, TwoState):
        run = contended_run(problem, plan, problem.comm)
        return list(run.starts), list(run.ends)
    if plan.in_flight > 1:
        return shared_times([(msg.launch, *problem.comm.split(msg.num_bytes))
                             for msg in plan.messages], plan.in_flight, plan.credit,
                            [msg.num_bytes for msg in plan.messages])
    starts, ends, free = [], [], 0.0
    for msg in plan.messages:
        start = max(free, msg.launch)
        free = start + problem.comm.cost(msg.num_bytes)
        starts.append(start)
        ends.append(free)
    return starts, ends


def iteration_time(problem: DPProblem, plan: DPPlan) -> float:
    """Seconds from the start of backward to the end of the next forward (no timeline)."""
    if isinstance(problem.comm, TwoState):
        return contended_run(problem, plan, problem.comm).time
    return _forward(problem, plan, *comm_finish_times(problem, plan))[0]


def _reduced(problem: DPProblem, plan: DPPlan, ends: list[float]) -> list[float]:
    reduced = [0.0] * problem.num_layers
    for msg, end in zip(plan.messages, ends, strict=True):
        for block in msg.blocks:
            reduced[block.layer] = max(reduced[block.layer], end)
    if plan.barrier:
        reduced = [max(ends, default=0.0)] * problem.num_layers
    return reduced


def _forward(problem: DPProblem, plan: DPPlan, starts: list[float],
             ends: list[float]) -> tuple[float, list[float], list[float]]:
    reduced = _reduced(problem, plan, ends)
    clock, forward_starts = problem.backward_end, []
    for layer in range(problem.num_layers):
        clock = max(clock, reduced[layer])
        forward_starts.append(clock)
        clock += problem.forward[layer]
    return clock, forward_starts, reduced


def execute(problem: DPProblem, plan: DPPlan) -> Execution:
    """Simulate ``plan`` (assumed valid) and build its timeline: "backward"/"forward" spans on
    resource ``gpu`` and "allreduce" spans on ``network`` (group ``worker``)."""
    if isinstance(problem.comm, TwoState):
        run = contended_run(problem, plan, problem.comm)
        starts, ends, time = list(run.starts), list(run.ends), run.time
        reduced, forward_starts, forward_ends = (_reduced(problem, plan, ends),
                                                 run.forward_starts, run.forward_ends)
        ready = run.ready
        backward_starts = (*ready[1:], 0.0)
    else:
        starts, ends = comm_finish_times(problem, plan)
        time, forward_starts, reduced = _forward(problem, plan, starts, ends)
        forward_ends = tuple(f + d for f, d in zip(forward_starts, problem.forward,
                                                   strict=True))
        ready = problem.ready
        backward_starts = tuple(r - b for r, b in zip(ready, problem.backward, strict=True))
    spans = []
    for layer in range(problem.num_layers):
        name = problem.names[layer]
        spans.append(Span("gpu", backward_starts[layer], ready[layer], "backward",
                          f"B {name}", group="worker", args={"layer": layer}))
        spans.append(Span("gpu", forward_starts[layer], forward_ends[layer], "forward",
                          f"F {name}", group="worker", args={"layer": layer}))
    for index, (msg, start, end) in enumerate(zip(plan.messages, starts, ends, strict=True)):
        layers = sorted({b.layer for b in msg.blocks})
        spans.append(Span("network", start, end, "allreduce", f"m{index} L{layers[0]}"
                          + (f"-{layers[-1]}" if len(layers) > 1 else ""), msg.num_bytes,
                          "worker", {"message": index, "layers": layers}))
    return Execution(time, Timeline(spans), tuple(reduced))
