"""One walk of a replica in two lanes, its steady state computed once: the timing with the
pipeline's transfers and without them (what ``job.evaluation.evaluate`` reports as the exposed
pipeline time, ``pp_s``) from one pass over the schedule's actions.

The order in which ``pipeline_walk.walk_pipeline`` visits the actions depends only on the
orders, never on the seconds (an action runs once its input has been made), so one pass can
carry two timings: a lane is a replica's stage seconds and sends (``PipelineTimes``), and
every time the walk keeps — per rank when it is free, when its send stream is free, the start
and end of its last backward; per output made and not yet used when it arrives — is a pair,
each lane's computed exactly as the single walk computes it (the same ``max`` and ``+`` in the
same order: the walked times are bit for bit the single walk's).

``replica_timings`` walks the orders' periodic structure (``pipeline_orders.periodic_orders``:
per rank a prefix, rounds of one period, a suffix): the warm-up (prefix), then round after
round of the steady state, comparing after each the state the rest of the walk reads (in both
lanes: per rank its free time, its send stream, its last backward's start and end, and every
output made but not yet used, keyed by stage and microbatch relative to the round) with the state
``c`` rounds earlier (``c`` up to ``MAX_CYCLE``). Once every entry of a lane has moved by one
amount ``D`` (``D'`` in the other), the walk is a max-plus recurrence invariant under
translation, so every later round's actions are those ``c`` rounds earlier moved by ``D``:
rank ``r``'s round ``i >= k`` (``k`` the rounds walked) happens as round ``i - n c`` in
``[k - c, k)`` moved by ``n D``. This holds for every rank up to its own last round, also the
rounds a rank runs after the rank with the fewest has left the steady state (1F1B's rank ``r``
runs ``r`` rounds more than rank 0): a round's actions wait only for earlier rounds and the
prefix (every round boundary is a cut, and a suffix counts as after every round), never for a
cool-down action. So no round past ``k`` is walked: each rank's state at the end of its rounds
(free, send stream, last backward) is read off the walked rounds and moved, and an output a
cool-down action waits for that a skipped round made is looked up the same way; only the
cool-down is then walked. The walk's cost is the warm-up, the rounds until the state repeats
and the cool-down (1F1B at ``p`` stages: ``p (p - 1)`` actions and a few rounds; it was ``2
p^2`` while the last rounds were walked, and twice that with a second walk without transfers),
independent of the microbatches. Where a rank's round holds no backward or no transfer that
moves its stream (its last backward or stream time would then come from before the round) the
skipped rounds are walked instead (``_walk_rest``); without a structure or a repeat the full
orders are walked. The comparison allows ``TOLERANCE`` of the largest time for floating-point
rounding (a walk's sums differ in their last bits from one round to the next), so the times
read off differ from a full walk's by rounding: ``tests/job/test_pipeline_periods.py`` holds
both lanes equal to the full
walk of each (``walk_pipeline``) to 1e-9 on random replicas and schedules. ZB-V, DualPipe and
DualPipeV (whose state on a model with a heavier last stage does not repeat within the rounds
searched) are walked as a graph of their units, every rank's units of one dependency level at
once (``unit_walk.walk_unit_lanes``, ``job.evaluation.unit_levels``; ``_Lanes`` still places
``2 pp`` stages in a V by ``pipeline_orders.stage_ranks`` for ZB-V's periodic orders, which
``replica_timings`` no longer walks here);
ZB-H1, which settles only after hundreds of rounds when its last stage is slower, and the
interleaved schedule from ``ROUNDS_FROM_PP`` ranks (whose rounds hold ``2 c p`` actions per rank)
are walked round by round with every rank at once (``pipeline_rounds.zb_h1_timings``,
``interleaved_rounds.interleaved_timings``: a round in about 20 numpy operations on vectors of
``p`` rather than a Python step per action); GPipe (no steady state: its forwards and its
backwards each run back to back) rank by rank with every microbatch at once
(``pipeline_rounds.gpipe_timings``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from dlsched.errors import ConfigError
from dlsched.job.evaluation.interleaved_rounds import interleaved_timings
from dlsched.job.evaluation.pipeline_orders import (
    Coded,
    PeriodicOrders,
    coded_orders,
    periodic_orders,
    repeated,
    shifted,
    stage_ranks,
)
from dlsched.job.evaluation.pipeline_rounds import gpipe_timings, zb_h1_timings
from dlsched.job.evaluation.pipeline_walk import PipelineTimes, ReplicaTiming
from dlsched.job.evaluation.unit_walk import unit_walked, walk_unit_lanes

MAX_CYCLE = 8  # rounds a repeat may take (a steady state's cyclicity); longer ones are walked
# Rounds searched for a repeat before the rest is walked unchecked: MAX_CYCLE plus one per
# TRANSIENT_SHARE virtual stages (ZB-H1 of equal stages repeats after about pp / 2.5 rounds;
# with heavier first and last stages, as a model's embedding and loss make them, after
# hundreds: each searched round costs a state comparison, about 0.3 ms at PP 64)
TRANSIENT_SHARE = 2
TOLERANCE = 1e-12  # of the largest time: rounding in the comparison of two rounds' states
# Ranks from which the interleaved schedule is walked round by round with every rank at once
# (interleaved_rounds): measured on the GPT 1T replicas (2-core VM), 8 ranks 0.74 ms there
# against 0.50 ms here, 16 ranks 1.4 against 1.9 ms, 64 ranks 6.5 against 30 ms
ROUNDS_FROM_PP = 16

Pair = tuple[float, float]
State = tuple[tuple[int, ...], list[float], list[float]]


Step = tuple[int, int, int, int, int, bool]
_PROGRAMS: dict[tuple[int, int, int], tuple[object, tuple[tuple[Step, ...], ...]]] = {}
MAX_PROGRAMS = 128  # orders compiled at once (each kept with the orders it was read from)


def _program(orders: tuple[tuple[Coded, ...], ...], pp: int, stages: int,
             ranks: tuple[int, ...]) -> tuple[tuple[Step, ...], ...]:
    """Each rank's ``orders`` as the walk reads them, one step per action: the key of its
    input (-1: none), its seconds' index (kind x stages + stage), the key of its output (-1:
    none), the rank the output goes to, the boundary it crosses (its transfer's ``send``
    index; -1: the last stage's forward, kept on its rank) and whether it is a backward
    action. Kept per orders object (the structures and full orders are kept themselves)."""
    kept = _PROGRAMS.get((id(orders), pp, stages))
    if kept is not None and kept[0] is orders:
        return kept[1]
    last, width = stages - 1, 3 * stages
    program = []
    for order in orders:
        steps = []
        for s, kind, j in order:
            key = j * width + s
            if kind == 1:
                want = key if s == last else key + 2 * stages
            else:
                want = key + stages if kind == 0 and s else -1
            if kind == 0:
                step = ((want, s, key, pp, -1, False) if s == last else
                        (want, s, key + stages + 1, ranks[s + 1], s, False))
            elif kind == 2 or s == 0:
                step = (want, kind * stages + s, -1, pp, -1, True)
            else:
                step = (want, stages + s, key + 2 * stages - 1, ranks[s - 1], s - 1, True)
            steps.append(step)
        program.append(tuple(steps))
    if len(_PROGRAMS) >= MAX_PROGRAMS:
        _PROGRAMS.clear()
    _PROGRAMS[(id(orders), pp, stages)] = (orders, tuple(program))
    return tuple(program)


class _Lanes:
    """The two-lane walk's state (module docstring): per lane and rank the free time, send
    stream and last backward; ``made``: output key -> (arrival in lane 0, in lane 1);
    ``record`` (when not None) keeps every output made, for the skipped rounds' look-ups."""

    def __init__(self, times: PipelineTimes, quiet: PipelineTimes) -> None:
        pp = times.pp
        stages = pp * times.chunks
        self.pp, self.last = pp, stages - 1
        self.placed = stage_ranks(times.schedule, pp, stages)  # each stage's rank
        share = times.input_fraction if times.schedule in ("zb-h1", "zb-v") else 1.0
        # per lane: forwards, input gradients, weight gradients (``KIND_CODES`` x stages + s)
        self.flat = tuple([*t.forward, *(b * share for b in t.backward),
                           *(b * (1 - share) for b in t.backward)] for t in (times, quiet))
        # the transfer from stage s to s + 1 (and back): 0 between stages on one rank
        self.hops = tuple([0.0 if self.placed[s + 1] == self.placed[s] else t.send[s]
                           for s in range(self.last)] for t in (times, quiet))
        self.free = ([0.0] * pp, [0.0] * pp)
        self.link = ([0.0] * pp, [0.0] * pp)
        self.last_start = ([0.0] * pp, [0.0] * pp)
        self.last_end = ([0.0] * pp, [0.0] * pp)
        self.made: dict[int, Pair] = {}
        self.record: dict[int, Pair] | None = None

    def run(self, orders: tuple[tuple[Coded, ...], ...], schedule: str,
            start: tuple[int, ...] | None = None,
            lookup: Callable[[int], Pair | None] | None = None, later: int = 0) -> None:
        """Walk one phase in both lanes: every rank's ``orders`` (a cut) with their
        microbatches ``later`` later, each from its ``start`` index; an input not made yet is
        asked of ``lookup`` (a skipped round's output) before the rank waits for it. Keys as
        ``pipeline_walk._Walk.run``'s, each action's read off its ``_program``."""
        made, record, pp = self.made, self.record, self.pp
        (sec, secq), (hop, hopq) = self.flat, self.hops
        (free, freeq), (link, linkq) = self.free, self.link
        (last_start, last_startq), (last_end, last_endq) = self.last_start, self.last_end
        program = _program(orders, pp, self.last + 1, self.placed)
        shift = later * 3 * (self.last + 1)
        pointer, queued = list(start or (0,) * pp), [True] * pp
        woken = list(range(pp - 1, -1, -1))  # ranks with new inputs (a stack)
        while woken:
            rank = woken.pop()
            queued[rank] = False
            steps, k, now, nowq = program[rank], pointer[rank], free[rank], freeq[rank]
            started, ended = last_start[rank], last_end[rank]
            startedq, endedq = last_startq[rank], last_endq[rank]
            size = len(steps)
            while k < size:
                want, seconds, out, to, boundary, backward = steps[k]
                if want >= 0:
                    ready = made.pop(want + shift, None)
                    if ready is None and lookup is not None:
                        ready = lookup(want + shift)
                    if ready is None:
                        break
                    at, atq = ready
                    begin = now if now > at else at
                    beginq = nowq if nowq > atq else atq
                else:  # the first stage's forward; a weight gradient (after its I, here)
                    begin, beginq = now, nowq
                now = begin + sec[seconds]
                nowq = beginq + secq[seconds]
                k += 1
                if backward:
                    started, ended, startedq, endedq = begin, now, beginq, nowq
                if out < 0:
                    continue
                if boundary < 0:  # the last stage's forward done, for its own backward
                    made[out + shift] = (now, nowq)
                    if record is not None:
                        record[out + shift] = (now, nowq)
                    continue
                sent, sentq = hop[boundary], hopq[boundary]
                if sent > 0:  # the rank's stream sends one transfer at a time
                    busy = link[rank]
                    arrival = link[rank] = (now if now > busy else busy) + sent
                else:
                    arrival = now
                if sentq > 0:
                    busy = linkq[rank]
                    arrivalq = linkq[rank] = (nowq if nowq > busy else busy) + sentq
                else:
                    arrivalq = nowq
                made[out + shift] = (arrival, arrivalq)
                if record is not None:
                    record[out + shift] = (arrival, arrivalq)
                if not queued[to]:
                    queued[to] = True
                    woken.append(to)
            pointer[rank], free[rank], freeq[rank] = k, now, nowq
            last_start[rank], last_end[rank] = started, ended
            last_startq[rank], last_endq[rank] = startedq, endedq
        if any(k < len(steps) for k, steps in zip(pointer, program, strict=True)):
            raise ConfigError(f"pipeline: the {schedule} orders deadlock")

    def ranks(self) -> tuple[list[float], ...]:
        """Per lane: free, send stream (never earlier than free: a send leaves after the
        action that makes it), last backward start and end, each per rank."""
        return tuple(values for lane in range(2) for values in (
            self.free[lane][:],
            [max(a, b) for a, b in zip(self.link[lane], self.free[lane], strict=True)],
            self.last_start[lane][:], self.last_end[lane][:]))

    def state(self, relabel: int) -> State:
        """What the rest of the walk reads: the outputs' keys (microbatches ``relabel``
        earlier) and every time, per lane."""
        keys = sorted(self.made)
        ranks = self.ranks()
        lanes = tuple([*(t for values in ranks[4 * lane:4 * lane + 4] for t in values),
                       *(self.made[key][lane] for key in keys)] for lane in range(2))
        moved = relabel * 3 * (self.last + 1)
        return tuple(key - moved for key in keys), lanes[0], lanes[1]

    def translate(self, moved: Pair, microbatches: int) -> None:
        """Move the state ``moved`` later (per lane) and its outputs ``microbatches`` later."""
        ranks = self.ranks()
        for lane in range(2):
            free, link, start, end = (
                [t + moved[lane] for t in values] for values in ranks[4 * lane:4 * lane + 4])
            self.free[lane][:], self.link[lane][:] = free, link
            self.last_start[lane][:], self.last_end[lane][:] = start, end
        shift = microbatches * 3 * (self.last + 1)
        self.made = {key + shift: (t + moved[0], tq + moved[1])
                     for key, (t, tq) in self.made.items()}

    def timings(self) -> tuple[ReplicaTiming, ReplicaTiming]:
        return tuple(ReplicaTiming(tuple(self.last_start[lane]), tuple(self.last_end[lane]),
                                   max(self.free[lane])) for lane in range(2))


def _check_lanes(times: PipelineTimes, quiet: PipelineTimes) -> None:
    if (times.pp, times.chunks, times.num_microbatches, times.schedule,
            times.input_fraction) != (quiet.pp, quiet.chunks, quiet.num_microbatches,
                                      quiet.schedule, quiet.input_fraction):
        raise ConfigError("pipeline: the two lanes of a walk need one schedule, degree, "
                          "chunks, microbatch count and input fraction")


@lru_cache(maxsize=64)
def replica_timings(times: PipelineTimes,
                    quiet: PipelineTimes) -> tuple[ReplicaTiming, ReplicaTiming]:
    """The timing of ``times`` and of ``quiet`` (the same schedule; an evaluation's replica
    with its transfers and without them) from one walk, the steady state's repeating rounds
    computed once (module docstring; kept per pair)."""
    _check_lanes(times, quiet)
    if unit_walked(times):
        # ZB-V, DualPipe(V), merged EP-overlap steps: units, two lanes, level by level
        walked, quiet_walked = walk_unit_lanes((times, quiet))
        return ReplicaTiming(*walked), ReplicaTiming(*quiet_walked)
    # ZB-H1 and (from ROUNDS_FROM_PP ranks) interleaving: every rank at once, round by round
    # GPipe: every microbatch of a rank at once, down the ranks and back up
    rounds = (zb_h1_timings(times, quiet) if times.schedule == "zb-h1" else
              gpipe_timings(times, quiet) if times.schedule == "gpipe" else
              interleaved_timings(times, quiet) if times.schedule == "interleaved"
              and times.pp >= ROUNDS_FROM_PP else None)
    if rounds is not None:
        return rounds
    m = times.num_microbatches
    structure = periodic_orders(times.schedule, times.pp, times.chunks, m)
    walk = _Lanes(times, quiet)
    if structure is None:
        walk.run(coded_orders(times.schedule, times.pp, times.chunks, m), times.schedule)
        return walk.timings()
    walk.run(structure.prefix, times.schedule)
    rounds, k, shift = structure.rounds(m), 0, structure.shift
    steady = min(rounds)  # rounds every rank runs
    tried = times.pp * times.chunks // (TRANSIENT_SHARE * shift) + MAX_CYCLE
    history, ends = [walk.state(0)], []
    walk.record = {}
    while k < min(steady, tried):
        walk.run(structure.period, times.schedule, later=k * shift)
        k += 1
        history = [*history[-MAX_CYCLE + 1:], walk.state(k * shift)]
        ends = [*ends[-MAX_CYCLE + 1:], walk.ranks()]
        jump = _repeat(history)
        if jump is not None:
            break
    else:  # no repeat in the rounds tried: the rest of the full orders, from where they are
        walk.record = None
        walk.run(coded_orders(times.schedule, times.pp, times.chunks, m), times.schedule,
                 tuple(len(prefix) + k * len(period)
                       for prefix, period in zip(structure.prefix, structure.period,
                                                 strict=True)))
        return walk.timings()
    walk.record, record = None, walk.record
    cycle, moved = jump
    if not _skippable(structure, walk):
        return _walk_rest(walk, structure, (k, cycle, moved, steady), rounds, times.schedule)
    for rank, total in enumerate(rounds):  # each rank at the end of its own rounds
        if total > k:
            back = (total - 1 - k) // cycle + 1  # cycles back into the walked rounds
            values = ends[len(ends) - 1 - (k - (total - back * cycle))]
            for lane in range(2):
                free, link, start, end = values[4 * lane:4 * lane + 4]
                walk.free[lane][rank] = free[rank] + back * moved[lane]
                walk.link[lane][rank] = link[rank] + back * moved[lane]
                walk.last_start[lane][rank] = start[rank] + back * moved[lane]
                walk.last_end[lane][rank] = end[rank] + back * moved[lane]
    lookup = _skipped_outputs(structure, walk, record, rounds, (k, cycle, moved))
    walk.run(structure.suffix, times.schedule, lookup=lookup, later=m - structure.base)
    return walk.timings()


@lru_cache(maxsize=64)
def fast_pipeline(times: PipelineTimes) -> ReplicaTiming:
    """The timing of one replica (``replica_timings`` with one lane's times in both)."""
    return replica_timings(times, times)[0]


def _repeat(history: list[State]) -> tuple[int, Pair] | None:
    """(rounds per repeat, seconds per repeat in each lane) when the last state is an
    earlier one moved by one amount in each lane (module docstring); None otherwise."""
    keys, values, valuesq = history[-1]
    scale = max((abs(v) for v in values), default=0.0)
    scaleq = max((abs(v) for v in valuesq), default=0.0)
    for cycle in range(1, len(history)):
        old_keys, old_values, old_valuesq = history[-1 - cycle]
        if old_keys != keys:
            continue
        moved, movedq = values[0] - old_values[0], valuesq[0] - old_valuesq[0]
        if all(abs(new - old - moved) <= TOLERANCE * scale
               for new, old in zip(values, old_values, strict=True)) and \
                all(abs(new - old - movedq) <= TOLERANCE * scaleq
                    for new, old in zip(valuesq, old_valuesq, strict=True)):
            return cycle, (moved, movedq)
    return None


@dataclass(frozen=True)
class _PeriodIndex:
    """What the skipping reads of a structure's periods (``_period_index``): whether every
    rank's period holds a backward action and each (stage, kind) of a microbatch residue once,
    each rank's sending boundaries (``send`` indices its transfers use), and where each
    (stage, kind, residue) runs: its rank and round-0 microbatch."""

    regular: bool
    boundaries: tuple[tuple[int, ...], ...]
    where: dict[tuple[int, int, int], tuple[int, int]]


_INDEXES: dict[int, tuple[PeriodicOrders, _PeriodIndex]] = {}
MAX_INDEXES = 256  # structures indexed at once (pipeline_orders keeps as many structures)


def _period_index(structure: PeriodicOrders, last: int) -> _PeriodIndex:
    """``_PeriodIndex`` of ``structure`` (``last`` its last stage), kept with the structure
    (``pipeline_orders`` keeps each structure once per schedule, degree and residue)."""
    kept = _INDEXES.get(id(structure))
    if kept is not None and kept[0] is structure:
        return kept[1]
    regular, boundaries, where = True, [], {}
    for rank, period in enumerate(structure.period):
        regular &= any(kind != 0 for _, kind, _ in period)
        regular &= len({(s, kind, j % structure.shift) for s, kind, j in period}) == len(period)
        boundaries.append(tuple(sorted({s if kind == 0 else s - 1 for s, kind, _ in period
                                        if (kind == 0 and s < last) or (kind == 1 and s)})))
        where.update({(s, kind, j % structure.shift): (rank, j) for s, kind, j in period})
    index = _PeriodIndex(regular, tuple(boundaries), where)
    if len(_INDEXES) >= MAX_INDEXES:
        _INDEXES.clear()
    _INDEXES[id(structure)] = (structure, index)
    return index


def _skippable(structure: PeriodicOrders, walk: _Lanes) -> bool:
    """Whether the rounds past the repeat can be read off the walked ones (module docstring):
    every rank's period holds a backward action, a transfer that moves its stream in each lane
    whose stream moves at all, and each (stage, kind) of a microbatch residue once."""
    index = _period_index(structure, walk.last)
    if not index.regular:
        return False
    for hops in walk.hops:
        if any(hops) and not all(any(hops[b] > 0 for b in boundaries)
                                 for boundaries in index.boundaries):
            return False
    return True


def _skipped_outputs(structure: PeriodicOrders, walk: _Lanes, record: dict[int, Pair],
                     rounds: tuple[int, ...],
                     jump: tuple[int, int, Pair]) -> Callable[[int], Pair | None]:
    """The look-up of an output a skipped round made (``k`` rounds walked, repeating every
    ``cycle`` rounds by ``moved``): the one ``n cycle`` rounds earlier, in the walked rounds
    (``record``), moved by ``n moved``; None for an output no skipped round makes."""
    k, cycle, (moved, movedq) = jump
    stages, shift = walk.last + 1, structure.shift
    width = 3 * stages
    where = _period_index(structure, walk.last).where

    def lookup(key: int) -> Pair | None:
        j, rest = divmod(key, width)
        what, s = divmod(rest, stages)
        producer = (walk.last, 0) if what == 0 else (s - 1, 0) if what == 1 else (s + 1, 1)
        found = where.get((*producer, j % shift))
        if found is None:
            return None
        rank, first = found
        index = (j - first) // shift  # the producer's round
        if not k <= index < rounds[rank]:
            return None
        back = (index - k) // cycle + 1
        value = record.get(key - back * cycle * shift * width)
        if value is None:
            return None
        return value[0] + back * moved, value[1] + back * movedq

    return lookup


def _walk_rest(walk: _Lanes, structure: PeriodicOrders, jump: tuple[int, int, Pair, int],
               rounds: tuple[int, ...], schedule: str) -> tuple[ReplicaTiming, ReplicaTiming]:
    """The rounds every rank runs skipped by whole repeats, the rest walked: each rank's
    last rounds and the cool-down (for periods ``_skippable`` refuses)."""
    k, cycle, moved, steady = jump
    repeats, shift = (steady - k) // cycle, structure.shift
    walk.translate((repeats * moved[0], repeats * moved[1]), repeats * cycle * shift)
    k += repeats * cycle
    later = (rounds[0] - structure.periods[0]) * shift  # m - base
    walk.run(tuple(repeated(period, shift, k, last) + shifted(suffix, later)
                   for period, suffix, last in zip(structure.period, structure.suffix, rounds,
                                                   strict=True)),
             schedule)
    return walk.timings()
