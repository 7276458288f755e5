"""ByteScheduler (Peng et al., SOSP 2019): fixed partitions, credit-based preemption.

Every gradient is cut into partitions of ``partition_bytes``; ready partitions wait in a
priority queue, layers nearest the input first. As in ByteScheduler's core, the most urgent
partition is handed to the network while credit is left — the partitions in flight hold fewer
than ``credit_bytes`` bytes — and takes its size from the credit, which returns when it
finishes; so a credit of 1 byte (``ONE_IN_FLIGHT``) keeps exactly one partition in flight. On a
network that carries several all-reduces at once (``DPProblem.in_flight``) the handed-over
partitions run concurrently, sharing the bandwidth; on the serial network they queue. Each
layer's next forward waits only for its own partitions (no barrier). As shipped, ByteScheduler's
partition is a fixed setting (1M elements) and its credit is auto-tuned online by Bayesian
optimisation; here ``bytescheduler`` keeps the default partition (1M elements,
``BYTESCHEDULER_PARTITION``'s default of 1,000,000) and grid-searches the credit, and
``bytescheduler-tuned`` searches both on the grid every tuned policy shares (``tuning.py``).
ByteScheduler's own tuner searches credits of 4M-64M elements for all-reduce; the shared grid
also offers one partition in flight, which is often faster on a serial network (handing a
partition over commits the network to it).
"""

from __future__ import annotations

import heapq
import math

from dlsched.dataparallel.cache import cached_plan
from dlsched.dataparallel.network import SharedNetwork
from dlsched.dataparallel.plan import Block, DPPlan, Message
from dlsched.dataparallel.problem import DPProblem
from dlsched.dataparallel.tuning import credit_bytes, credit_search, credit_text, size_text


def partitions(problem: DPProblem, layer: int, size: int) -> list[Block]:
    """Layer ``layer``'s gradient cut into blocks of ``size`` bytes (the last may be shorter)."""
    total = problem.grad_bytes[layer]
    return [Block(layer, offset, min(size, total - offset)) for offset in range(0, total, size)]


def bytescheduler_schedule(problem: DPProblem, partition_bytes: int,
                           credit: float) -> DPPlan:
    """The plan ByteScheduler produces with fixed partition and credit sizes (bytes)."""
    arrivals = sorted((problem.ready[k], k) for k in range(problem.num_layers)
                      if problem.grad_bytes[k] > 0)
    queue: list[tuple[int, int, Block]] = []
    network = SharedNetwork(problem.in_flight)
    msgs: list[Message] = []
    in_flight: dict[int, int] = {}  # message index -> bytes holding credit
    now, next_arrival = 0.0, 0
    while next_arrival < len(arrivals) or queue or network.busy:
        while next_arrival < len(arrivals) and arrivals[next_arrival][0] <= now + 1e-15:
            layer = arrivals[next_arrival][1]
            for block in partitions(problem, layer, partition_bytes):
                heapq.heappush(queue, (layer, block.offset, block))
            next_arrival += 1
        for index, _, _ in network.advance(now):
            del in_flight[index]
        while queue and sum(in_flight.values()) < credit:
            block = heapq.heappop(queue)[2]
            in_flight[len(msgs)] = block.length
            network.submit(len(msgs), now, *problem.comm.split(block.length))
            msgs.append(Message((block,), now))
        upcoming = min(arrivals[next_arrival][0] if next_arrival < len(arrivals) else math.inf,
                       network.next_event())
        if upcoming == math.inf:
            break
        now = max(now, upcoming)
    return DPPlan(tuple(msgs), barrier=False, policy="bytescheduler",
                  in_flight=problem.in_flight, credit=credit,
                  settings=f"partition {size_text(partition_bytes)}, credit "
                           f"{credit_text(credit)}")


def _schedule(problem: DPProblem, partition: int, credit_multiple: int) -> DPPlan:
    return bytescheduler_schedule(problem, partition, credit_bytes(credit_multiple, partition))


@cached_plan
def bytescheduler_plan(problem: DPProblem) -> DPPlan:
    """ByteScheduler as shipped: the default 1M-element partition, credit tuned (the
    credit grid it shares with US-Byte)."""
    return credit_search(problem, _schedule, "partition", "bytescheduler", tune_size=False)


@cached_plan
def bytescheduler_tuned_plan(problem: DPProblem) -> DPPlan:
    """ByteScheduler with partition and credit both tuned on the shared grid."""
    return credit_search(problem, _schedule, "partition", "bytescheduler-tuned",
                         tune_size=True)
