"""One rank's compute and its network simulated together, each slowing the other.

With a two-state network (``TwoState``), while the rank computes (backward, then each
forward layer with its update) every message in flight progresses ``slowdown(bytes)`` times
slower (the loaded curve over the idle one), and while messages are in flight the compute
progresses ``compute_slowdown(bytes)`` times slower (the largest factor of the messages in
flight; 1 when the file has no measurement); a message that waited behind earlier ones
progresses ``queued_slowdown(bytes)`` times slower instead (the stream curve, when the file
has one) and, while no rank computes, costs ``idle_queued_slowdown(bytes)`` times its idle
cost (the idle stream curve, when the file has one). Layer work is the profile's: seconds of
compute with no message in flight. So a message overlapping compute for a fraction p of its idle
progress costs p x loaded + (1 - p) x idle seconds, and a layer computed beside a message
lasts its work x that factor.

Messages enter the network in plan order, each once backward has done its launch time's
worth of work (a launch after backward: that long after backward's actual end), so a slowed
backward delays the launches as the runtime's gradient hooks would. Layer l's forward starts
when layer l-1's is done and its messages (all, with a barrier) have ended; a wait leaves
the network idle.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from dlsched.dataparallel.comm import TwoState
from dlsched.dataparallel.network import SharedNetwork
from dlsched.dataparallel.plan import DPPlan
from dlsched.dataparallel.problem import DPProblem


@dataclass(frozen=True)
class ContendedRun:
    """Seconds from the start of backward: message starts and ends (plan order), each layer's
    gradient-ready time, and each layer's forward start and end."""

    starts: tuple[float, ...]
    ends: tuple[float, ...]
    ready: tuple[float, ...]
    forward_starts: tuple[float, ...]
    forward_ends: tuple[float, ...]

    @property
    def time(self) -> float:
        """The iteration: the end of the last forward (s)."""
        return self.forward_ends[-1]


class _Rank:
    """The network of one rank and the clock of its compute."""

    def __init__(self, plan: DPPlan, comm: TwoState) -> None:
        self.plan, self.comm = plan, comm
        self.network = SharedNetwork(plan.in_flight, plan.credit)
        count = len(plan.messages)
        self.starts, self.ends = [math.nan] * count, [math.nan] * count
        self.released: dict[int, float] = {}
        self.submitted = 0

    def run(self, until: float) -> None:
        """Advance the network to ``until`` (s), recording the messages that end."""
        for index, start, end in self.network.advance(until):
            self.starts[index], self.ends[index] = start, end

    def release(self, index: int, launch: float) -> None:
        """Message ``index`` may launch at ``launch`` (s); submit, in plan order, every
        message whose turn has come."""
        self.released[index] = launch
        while self.submitted in self.released:
            size = self.plan.messages[self.submitted].num_bytes
            self.network.submit(self.submitted, self.released.pop(self.submitted),
                                *self.comm.split(size), self.comm.slowdown(size),
                                self.comm.compute_slowdown(size), self.comm.queued_slowdown(size),
                                size, self.comm.idle_queued_slowdown(size))
            self.submitted += 1

    def compute(self, work: float, marks: list[tuple[float, Callable[[], None]]]) -> None:
        """Compute ``work`` seconds (at full speed) from now, the network loaded meanwhile;
        each mark's action runs when its amount of work (ascending) is done."""
        network = self.network
        network.set_loaded(True)
        done, next_mark = 0.0, 0
        while True:
            while next_mark < len(marks) and marks[next_mark][0] <= done:
                marks[next_mark][1]()
                next_mark += 1
            if done >= work:
                break
            target = min(marks[next_mark][0], work) if next_mark < len(marks) else work
            slow, before = network.compute_slowdown(), network.now
            finish = before + (target - done) * slow
            event = network.next_event()
            if event < finish:
                self.run(event)
                done = min(target, done + (network.now - before) / slow)
            else:
                self.run(finish)
                done = target
        network.set_loaded(False)

    def wait_for(self, indices: list[int]) -> None:
        """Let the network run (the rank idle) until these messages have ended."""
        while any(math.isnan(self.ends[index]) for index in indices):
            event = self.network.next_event()
            if event == math.inf:
                raise RuntimeError(f"contention: messages {indices} can never end (a message "
                                   "before them in plan order was never released)")
            self.run(event)


def contended_run(problem: DPProblem, plan: DPPlan, comm: TwoState) -> ContendedRun:
    """Simulate ``plan`` on ``problem`` with the two-state network ``comm`` (see above)."""
    rank = _Rank(plan, comm)
    layers = problem.num_layers
    backward_end = problem.backward_end
    ready = [0.0] * layers

    def ready_mark(layer: int) -> Callable[[], None]:
        return lambda: ready.__setitem__(layer, rank.network.now)

    def launch_mark(index: int) -> Callable[[], None]:
        return lambda: rank.release(index, rank.network.now)

    marks = [(problem.ready[layer], ready_mark(layer)) for layer in range(layers)]
    marks += [(msg.launch, launch_mark(index)) for index, msg in enumerate(plan.messages)
              if msg.launch <= backward_end]
    rank.compute(backward_end, sorted(marks, key=lambda mark: mark[0]))
    delay = rank.network.now - backward_end
    for index, msg in enumerate(plan.messages):
        if msg.launch > backward_end:
            rank.release(index, msg.launch + delay)
    waits: list[list[int]] = [[] for _ in range(layers)]
    for index, msg in enumerate(plan.messages):
        for block in msg.blocks:
            waits[block.layer].append(index)
    if plan.barrier:
        waits = [list(range(len(plan.messages)))] * layers
    forward_starts, forward_ends = [], []
    for layer in range(layers):
        rank.wait_for(waits[layer])
        forward_starts.append(rank.network.now)
        rank.compute(problem.forward[layer], [])
        forward_ends.append(rank.network.now)
    rank.run(math.inf)
    return ContendedRun(tuple(rank.starts), tuple(rank.ends), tuple(ready),
                        tuple(forward_starts), tuple(forward_ends))
