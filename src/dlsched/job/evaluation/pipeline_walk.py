"""The full walk of one pipeline replica: each action starts when its rank is free and its
input has arrived, an exact longest path through the schedule's dependency graph.

``walk_pipeline`` walks the per-rank orders (``pipeline_orders.coded_orders``) once, in time
linear in their actions: the reference of ``job.evaluation.pipeline_steady``, whose walk gives
the same timing (and the one without transfers) at a cost independent of the number of
microbatches, computing the steady state's repeating rounds once. The property test
``tests/job/test_pipeline_periods.py`` holds the two equal to 1e-9 on random replicas.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlsched.errors import ConfigError
from dlsched.job.evaluation.pipeline_orders import (
    Coded,
    coded_orders,
)
from dlsched.job.evaluation.unit_walk import unit_walked, walk_units


@dataclass(frozen=True)
class PipelineTimes:
    """One replica's per-stage seconds (``job.evaluation.pipeline_time``): ``send[s]`` from
    stage ``s`` to ``s + 1`` (``len = stages - 1``); ``forward_comm`` / ``backward_comm``
    (empty: none) the part of ``forward`` / ``backward`` that is the stage's own communication,
    which an overlapped pair of DualPipe and DualPipeV hides (``job.evaluation.unit_walk``);
    ``pair_seconds`` (empty: none) Megatron-Core's merged forward-backward steps with the EP
    All-to-All overlap (``job.evaluation.a2a_overlap.pair_table``), walked in units."""

    pp: int
    chunks: int
    num_microbatches: int
    schedule: str
    forward: tuple[float, ...]
    backward: tuple[float, ...]
    send: tuple[float, ...]
    input_fraction: float = 0.5
    forward_comm: tuple[float, ...] = ()
    backward_comm: tuple[float, ...] = ()
    pair_seconds: tuple[tuple[float, ...], ...] = ()

    def __post_init__(self) -> None:
        stages = self.pp * self.chunks
        if len(self.forward) != stages or len(self.backward) != stages \
                or len(self.send) != stages - 1:
            raise ConfigError(f"pipeline: {stages} stages need as many forward and backward "
                              f"times and {stages - 1} sends")


@dataclass(frozen=True)
class ReplicaTiming:
    """Seconds from the iteration's start: per rank, when its last backward action started
    and ended (its gradients are complete then), and the replica's end."""

    last_backward_start: tuple[float, ...]
    last_backward_end: tuple[float, ...]
    end: float


class _Walk:
    """The walk's state: per rank free time, send stream, last backward; the outputs made and
    not yet used (``made``: (what, stage, microbatch) -> seconds)."""

    def __init__(self, times: PipelineTimes) -> None:
        pp = times.pp
        stages = pp * times.chunks
        self.pp, self.last = pp, stages - 1
        share = times.input_fraction if times.schedule == "zb-h1" else 1.0
        self.seconds = (list(times.forward), [b * share for b in times.backward],
                        [b * (1 - share) for b in times.backward])
        # the transfer from stage s to s + 1 (and back): 0 between stages on one rank
        self.hop = [0.0 if (s + 1) % pp == s % pp else times.send[s] for s in range(self.last)]
        self.free, self.link = [0.0] * pp, [0.0] * pp
        self.last_start, self.last_end = [0.0] * pp, [0.0] * pp
        self.made: dict[int, float] = {}

    def run(self, orders: tuple[tuple[Coded, ...], ...], schedule: str,
            start: tuple[int, ...] | None = None) -> None:
        """Walk one phase: every rank's ``orders`` (a cut: no action waits for a later
        phase's), each from its ``start`` index (default 0). A rank runs its actions while their
        inputs are there and is taken up again
        when an input for it arrives. An output's key is ``microbatch x 3 stages + what x
        stages + stage``, what being 0 (a last-stage forward done), 1 (an activation
        arrived) or 2 (a gradient arrived)."""
        made, seconds, hop, link, pp = self.made, self.seconds, self.hop, self.link, self.pp
        free, last_start, last_end = self.free, self.last_start, self.last_end
        last = self.last
        stages = last + 1
        width = 3 * stages
        pointer, queued = list(start or (0,) * pp), [True] * pp
        woken = list(range(pp - 1, -1, -1))  # ranks with new inputs (a stack)
        while woken:
            rank = woken.pop()
            queued[rank] = False
            order, k, now = orders[rank], pointer[rank], free[rank]
            size = len(order)
            while k < size:
                s, kind, j = order[k]
                key = j * width + s
                if kind == 1:
                    ready = made.pop(key if s == last else key + 2 * stages, None)
                elif kind == 0 and s:
                    ready = made.pop(key + stages, None)
                else:  # the first stage's forward; a weight gradient (after its I, here)
                    ready = 0.0
                if ready is None:
                    break
                start = now if now > ready else ready
                now = start + seconds[kind][s]
                k += 1
                if kind == 0:
                    if s == last:
                        made[key] = now
                        continue
                    to, sent, key = s + 1, hop[s], key + stages + 1
                else:
                    last_start[rank], last_end[rank] = start, now
                    if kind == 2 or s == 0:
                        continue
                    to, sent, key = s - 1, hop[s - 1], key + 2 * stages - 1
                if sent > 0:  # the rank's stream sends one transfer at a time
                    busy = link[rank]
                    link[rank] = (now if now > busy else busy) + sent
                    made[key] = link[rank]
                else:
                    made[key] = now
                to %= pp
                if not queued[to]:
                    queued[to] = True
                    woken.append(to)
            pointer[rank], free[rank] = k, now
        if any(k < len(order) for k, order in zip(pointer, orders, strict=True)):
            raise ConfigError(f"pipeline: the {schedule} orders deadlock")

    def timing(self) -> ReplicaTiming:
        return ReplicaTiming(tuple(self.last_start), tuple(self.last_end), max(self.free))


def walk_pipeline(times: PipelineTimes) -> ReplicaTiming:
    """The replica's timing by one walk through the full per-rank orders."""
    if unit_walked(times):
        return unit_timing(times)
    walk = _Walk(times)
    walk.run(coded_orders(times.schedule, times.pp, times.chunks, times.num_microbatches),
             times.schedule)
    return walk.timing()


def unit_timing(times: PipelineTimes) -> ReplicaTiming:
    """The timing of a ZB-V, DualPipe or DualPipeV replica (``unit_walk.walk_units``)."""
    return ReplicaTiming(*walk_units(times))
