"""ByteScheduler (Peng et al., SOSP 2019): fixed partitions, credit-based preemption.

Every gradient is cut into partitions of ``partition_bytes``; ready partitions wait in a
priority queue, layers nearest the input first. A partition is handed to the network while the
bytes in flight stay within ``credit_bytes`` (one is always allowed when nothing is in flight);
credit returns when a partition finishes. The network sends handed-over partitions in order, and
each layer's next forward waits only for its own partitions (no barrier). The original tunes
partition and credit online by Bayesian optimisation; here a deterministic grid search over
powers of two picks the pair with the shortest simulated iteration.
"""

from __future__ import annotations

import heapq
from collections import deque

from dlsched.dataparallel.plan import Block, DPPlan, Message
from dlsched.dataparallel.problem import DPProblem
from dlsched.dataparallel.simulate import iteration_time

ELEMENT = 4  # bytes per fp32 element; ByteScheduler's knobs are in elements
PARTITIONS = tuple(e * ELEMENT for e in (2**18, 2**19, 2**20, 2**21, 2**22, 2**23, 2**24))
CREDIT_MULTIPLES = (1, 2, 4, 8)


def partitions(problem: DPProblem, layer: int, size: int) -> list[Block]:
    """Layer ``layer``'s gradient cut into blocks of ``size`` bytes (the last may be shorter)."""
    total = problem.grad_bytes[layer]
    return [Block(layer, offset, min(size, total - offset)) for offset in range(0, total, size)]


def bytescheduler_schedule(problem: DPProblem, partition_bytes: int,
                           credit_bytes: int) -> DPPlan:
    """The plan ByteScheduler produces with fixed partition and credit sizes (bytes)."""
    arrivals = sorted((problem.ready[k], k) for k in range(problem.num_layers)
                      if problem.grad_bytes[k] > 0)
    queue: list[tuple[int, int, Block]] = []
    in_flight: deque[tuple[float, int]] = deque()
    msgs: list[Message] = []
    now, free, credit_used, next_arrival = 0.0, 0.0, 0, 0
    while next_arrival < len(arrivals) or queue:
        while next_arrival < len(arrivals) and arrivals[next_arrival][0] <= now + 1e-15:
            layer = arrivals[next_arrival][1]
            for block in partitions(problem, layer, partition_bytes):
                heapq.heappush(queue, (layer, block.offset, block))
            next_arrival += 1
        while in_flight and in_flight[0][0] <= now + 1e-15:
            credit_used -= in_flight.popleft()[1]
        while queue and (not in_flight or credit_used + queue[0][2].length <= credit_bytes):
            block = heapq.heappop(queue)[2]
            msgs.append(Message((block,), now))
            free = max(free, now) + problem.comm.cost(block.length)
            in_flight.append((free, block.length))
            credit_used += block.length
        upcoming = [t for t in (arrivals[next_arrival][0] if next_arrival < len(arrivals)
                                else None, in_flight[0][0] if in_flight else None) if t is not None]
        if not upcoming:
            break
        now = max(now, min(upcoming))
    return DPPlan(tuple(msgs), barrier=False, policy="bytescheduler")


def bytescheduler_plan(problem: DPProblem) -> DPPlan:
    """ByteScheduler with partition and credit tuned by grid search (fastest simulated; ties:
    the smaller partition, then the smaller credit)."""
    candidates = [bytescheduler_schedule(problem, partition, partition * multiple)
                  for partition in PARTITIONS for multiple in CREDIT_MULTIPLES]
    return min(candidates, key=lambda plan: iteration_time(problem, plan))
