"""Execute a data-parallel plan: backward, the all-reduces, then the next forward.

Backward runs layers L-1 -> 0 back to back from time 0. Messages enter the network in plan
order; with ``in_flight`` 1 (serial) each starts at max(network free, its launch time) and costs
the comm model's time for its bytes; with k > 1 up to k run at once, overlapping their latencies
and sharing the bandwidth (``network.py``). The next forward runs layers 0 -> L-1 on the GPU
after backward; layer l
starts when layer l-1's forward is done and its own last block has arrived (with a barrier:
when every message has arrived). The iteration time is the end of the last forward.

With a two-state network (``TwoState``: idle and under-load curves) the network and the
rank's compute are simulated together: every message progresses at its idle rate while the
rank does not compute and ``slowdown(bytes)`` times slower while it does (backward, and each
forward layer with its update), so a message that overlaps compute for a fraction of its idle
progress p costs p x loaded + (1 - p) x idle seconds. The forward waits as above, and a wait
leaves the network idle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dlsched.dataparallel.comm import TwoState
from dlsched.dataparallel.network import SharedNetwork, shared_times
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
        return _two_state_times(problem, plan, problem.comm)
    if plan.in_flight > 1:
        return shared_times([(msg.launch, *problem.comm.split(msg.num_bytes))
                             for msg in plan.messages], plan.in_flight)
    starts, ends, free = [], [], 0.0
    for msg in plan.messages:
        start = max(free, msg.launch)
        free = start + problem.comm.cost(msg.num_bytes)
        starts.append(start)
        ends.append(free)
    return starts, ends


def _two_state_times(problem: DPProblem, plan: DPPlan,
                     comm: TwoState) -> tuple[list[float], list[float]]:
    """Messages on a ``plan.in_flight``-slot network, loaded while the rank computes: backward
    from 0, then each forward layer once the messages it waits for have ended."""
    network = SharedNetwork(plan.in_flight)
    waits: list[list[int]] = [[] for _ in range(problem.num_layers)]
    for index, msg in enumerate(plan.messages):
        network.submit(index, msg.launch, *comm.split(msg.num_bytes),
                       comm.slowdown(msg.num_bytes))
        for block in msg.blocks:
            waits[block.layer].append(index)
    if plan.barrier:
        waits = [list(range(len(plan.messages)))] * problem.num_layers
    starts, ends = [math.nan] * len(plan.messages), [math.nan] * len(plan.messages)

    def run(until: float) -> None:
        for index, start, end in network.advance(until):
            starts[index], ends[index] = start, end

    def compute(start: float, seconds: float) -> float:
        run(start)
        if seconds > 0:
            network.set_loaded(True)
            run(start + seconds)
            network.set_loaded(False)
        return start + seconds

    clock = compute(0.0, problem.backward_end)
    for layer in range(problem.num_layers):
        while any(math.isnan(ends[index]) for index in waits[layer]):
            run(network.next_event())
        clock = max([clock, *(ends[index] for index in waits[layer])])
        clock = compute(clock, problem.forward[layer])
    run(math.inf)
    return starts, ends


def iteration_time(problem: DPProblem, plan: DPPlan) -> float:
    """Seconds from the start of backward to the end of the next forward (no timeline)."""
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
    starts, ends = comm_finish_times(problem, plan)
    time, forward_starts, reduced = _forward(problem, plan, starts, ends)
    spans = []
    for layer in range(problem.num_layers):
        ready, name = problem.ready[layer], problem.names[layer]
        spans.append(Span("gpu", ready - problem.backward[layer], ready, "backward",
                          f"B {name}", group="worker", args={"layer": layer}))
        spans.append(Span("gpu", forward_starts[layer],
                          forward_starts[layer] + problem.forward[layer], "forward",
                          f"F {name}", group="worker", args={"layer": layer}))
    for index, (msg, start, end) in enumerate(zip(plan.messages, starts, ends, strict=True)):
        layers = sorted({b.layer for b in msg.blocks})
        spans.append(Span("network", start, end, "allreduce", f"m{index} L{layers[0]}"
                          + (f"-{layers[-1]}" if len(layers) > 1 else ""), msg.num_bytes,
                          "worker", {"message": index, "layers": layers}))
    return Execution(time, Timeline(spans), tuple(reduced))
