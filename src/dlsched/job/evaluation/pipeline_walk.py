"""The fast walk of one pipeline replica: each action starts when its rank is free and its
input has arrived, an exact longest path through the schedule's dependency graph.

``walk_pipeline`` walks the per-rank orders (``pipeline_orders.coded_orders``) once, in time
linear in their actions. ``fast_pipeline`` gives the same timing at a cost independent of the
number of microbatches where the orders have a steady state (``pipeline_orders.
periodic_orders``): it walks the prefix (the warm-up), then the period round by round, and
after each round compares the state that the rest of the walk reads — per rank the time it is
free, the time its send stream is free (never earlier than the rank: a send leaves after the
action that makes it), the start and end of its last backward, and every output made but not
yet used (keyed by stage and microbatch, relative to the round) — with the state ``c`` rounds
earlier (``c`` up to ``MAX_CYCLE``). When every entry has moved by one amount ``D``, the walk
is a max-plus recurrence that is invariant under time translation, so every later ``c``
rounds move it by ``D`` again: the rounds that only repeat are skipped by adding ``D`` per
``c`` rounds (microbatches relabelled), and the last rounds and the cool-down are walked. The
comparison allows ``TOLERANCE`` of the largest time for floating-point rounding (the sums of a
walk's seconds differ in their last bits from one round to the next); the property test
``tests/job/test_pipeline_periods.py`` holds the two walks equal to 1e-9 on random replicas.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from dlsched.errors import ConfigError
from dlsched.job.evaluation.pipeline_orders import (
    Coded,
    coded_orders,
    periodic_orders,
    repeated,
    shifted,
)
from dlsched.job.evaluation.unit_walk import UNIT_SCHEDULES, walk_units

MAX_CYCLE = 8  # rounds a repeat may take (a steady state's cyclicity); longer ones are walked
# Rounds searched for a repeat before the rest is walked unchecked: MAX_CYCLE plus one per
# TRANSIENT_SHARE virtual stages (ZB-H1 of equal stages repeats after about pp / 2.5 rounds;
# with heavier first and last stages, as a model's embedding and loss make them, after
# hundreds: each searched round costs a state comparison, about 0.3 ms at PP 64)
TRANSIENT_SHARE = 2
TOLERANCE = 1e-12  # of the largest time: rounding in the comparison of two rounds' states


@dataclass(frozen=True)
class PipelineTimes:
    """One replica's per-stage seconds (``job.evaluation.pipeline_time``): ``send[s]`` from
    stage ``s`` to ``s + 1`` (``len = stages - 1``); ``forward_comm`` / ``backward_comm``
    (empty: none) the part of ``forward`` / ``backward`` that is the stage's own communication,
    which an overlapped pair of DualPipe and DualPipeV hides (``job.evaluation.unit_walk``)."""

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

    def state(self, relabel: int) -> tuple[tuple[int, ...], list[float]]:
        """What the rest of the walk reads: the outputs' keys (microbatches ``relabel``
        earlier) and every time, in one order."""
        keys = sorted(self.made)
        values = [*self.free, *(max(a, b) for a, b in zip(self.link, self.free, strict=True)),
                  *self.last_start, *self.last_end, *(self.made[key] for key in keys)]
        moved = relabel * 3 * (self.last + 1)
        return tuple(key - moved for key in keys), values

    def translate(self, seconds: float, microbatches: int) -> None:
        """Move the state ``seconds`` later and its outputs ``microbatches`` later."""
        self.link = [max(a, b) + seconds for a, b in zip(self.link, self.free, strict=True)]
        self.free = [t + seconds for t in self.free]
        self.last_start = [t + seconds for t in self.last_start]
        self.last_end = [t + seconds for t in self.last_end]
        moved = microbatches * 3 * (self.last + 1)
        self.made = {key + moved: t + seconds for key, t in self.made.items()}

    def timing(self) -> ReplicaTiming:
        return ReplicaTiming(tuple(self.last_start), tuple(self.last_end), max(self.free))


def walk_pipeline(times: PipelineTimes) -> ReplicaTiming:
    """The replica's timing by one walk through the full per-rank orders."""
    if times.schedule in UNIT_SCHEDULES:
        return unit_timing(times)
    walk = _Walk(times)
    walk.run(coded_orders(times.schedule, times.pp, times.chunks, times.num_microbatches),
             times.schedule)
    return walk.timing()


@lru_cache(maxsize=64)
def fast_pipeline(times: PipelineTimes) -> ReplicaTiming:
    """``walk_pipeline``'s timing, the repeating rounds of the steady state skipped (module
    docstring; kept per replica: an evaluation asks again for its replica without transfers,
    the same one when it has none)."""
    if times.schedule in UNIT_SCHEDULES:
        return unit_timing(times)
    m = times.num_microbatches
    structure = periodic_orders(times.schedule, times.pp, times.chunks, m)
    if structure is None:
        return walk_pipeline(times)
    walk = _Walk(times)
    walk.run(structure.prefix, times.schedule)
    rounds, k, shift = structure.rounds(m), 0, structure.shift
    steady = min(rounds)  # rounds every rank runs
    tried = times.pp * times.chunks // (TRANSIENT_SHARE * shift) + MAX_CYCLE
    history = [walk.state(0)]
    while k < min(steady, tried):
        walk.run(tuple(shifted(p, k * shift) for p in structure.period), times.schedule)
        k += 1
        history = [*history[-MAX_CYCLE + 1:], walk.state(k * shift)]
        jump = _repeat(history, steady - k)
        if jump is not None:
            repeats, cycle, moved = jump
            walk.translate(repeats * moved, repeats * cycle * shift)
            k += repeats * cycle
            break
    else:  # no repeat in the rounds tried: the rest of the full orders, from where they are
        walk.run(coded_orders(times.schedule, times.pp, times.chunks, m), times.schedule,
                 tuple(len(prefix) + k * len(period)
                       for prefix, period in zip(structure.prefix, structure.period,
                                                 strict=True)))
        return walk.timing()
    # what is left in one phase: the last rounds and the cool-down
    walk.run(tuple(repeated(period, shift, k, last) + shifted(suffix, m - structure.base)
                   for period, suffix, last in zip(structure.period, structure.suffix, rounds,
                                                   strict=True)),
             times.schedule)
    return walk.timing()


def unit_timing(times: PipelineTimes) -> ReplicaTiming:
    """The timing of a ZB-V, DualPipe or DualPipeV replica (``unit_walk.walk_units``)."""
    return ReplicaTiming(*walk_units(times))


def _repeat(history: list[tuple[tuple[int, ...], list[float]]],
            left: int) -> tuple[int, int, float] | None:
    """(whole repeats to skip, rounds per repeat, seconds per repeat) when the last state
    is an earlier one moved by one amount (module docstring); None otherwise."""
    keys, values = history[-1]
    scale = max(abs(v) for v in values) if values else 0.0
    for cycle in range(1, len(history)):
        if left < cycle:
            break
        old_keys, old_values = history[-1 - cycle]
        if old_keys != keys:
            continue
        moved = values[0] - old_values[0]
        if all(abs(new - old - moved) <= TOLERANCE * scale
               for new, old in zip(values, old_values, strict=True)):
            return left // cycle, cycle, moved
    return None
