"""The interleaved schedule's replica walked round by round with every rank at once (numpy over
the ranks), in two lanes: the timing ``pipeline_walk.walk_pipeline`` gives each lane, without a
Python step per action.

Megatron-LM's interleaved 1F1B (``pipeline.plans.schedules.interleaved_rank_order``) runs on
rank ``r`` ``w_r`` warm-up forwards, then pairs of one forward and one backward, then the last
backwards: in local round ``k`` the forward ``F_r[k + w_r]`` (its ``k + w_r``-th) and the
backward ``B_r[k]`` (each when there is one). Rank ``r``'s local round ``k`` is global round
``g = k - r``. With Megatron's warm-up (``w_r = 2 (p - 1 - r) + (c - 1) p`` for ``c`` chunks and a
multiple of ``p`` microbatches) every input an action waits for is made in the global round
before it: a forward's by rank ``r - 1`` (rank ``p - 1``'s for rank 0's next chunk), a
backward's by rank ``r + 1`` (rank 0's for rank ``p - 1``), the last stage's backward's by the
forward of its own round. So a global round is the forwards of every rank at once, then the
backwards of every rank at once, their inputs the previous round's outputs moved one rank over:
a dozen numpy operations on vectors of ``p`` per lane, whatever ``p`` is. ``round_table``
reads the rounds off the orders and checks this, action by action (None otherwise: those
orders are walked by ``pipeline_steady``).

The rounds in which every rank runs a forward and a backward repeat their stages every ``c p``
rounds (a period: ``p`` microbatches of every chunk); once the state at the end of a period
(per lane and rank: free time, send stream, the activation and gradient on their way) is the
previous period's moved by one amount per lane, every later period is that one moved again (a
max-plus recurrence invariant under translation; ``pipeline_steady``'s argument), so the walk
jumps over the whole periods left. Each rank sends one transfer at a time, in its action order
(its send stream, as the walk's): the times are the full walk's exactly but for the order of
the steady state's sums (floating-point rounding), which ``tests/job/test_interleaved_rounds.py``
bounds at 1e-9 on random replicas.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from dlsched.job.evaluation.pipeline_orders import coded_orders, periodic_orders
from dlsched.job.evaluation.pipeline_walk import PipelineTimes, ReplicaTiming

TOLERANCE = 1e-12  # of the largest time: rounding in the comparison (pipeline_steady's)
DIRECT_CHECK = 6  # microbatches per rank up to which the rounds are read off the orders as they are


@dataclass(frozen=True, eq=False)  # kept per layout and compared by ``same``
class RoundTable:
    """Rounds ``first .. last`` (global); ``steady .. steady_end - 1`` every rank runs a
    forward and a backward, their stages repeating every ``period`` rounds, and are kept once
    (``row``). ``stage_f`` / ``stage_b``: per row and rank the stage of its forward /
    backward (-1: none); ``flags`` per row: any forward, every rank one, any backward, every
    rank one, rank 0's forward the first stage (no input), rank ``p - 1``'s backward the last
    stage (its input its own forward); ``kept``: the state's entries the period's comparison
    reads (the inputs the next round has none for left out)."""

    pp: int
    first: int
    steady: int
    steady_end: int
    period: int
    last: int
    stage_f: np.ndarray
    stage_b: np.ndarray
    flags: tuple[tuple[bool, ...], ...]
    kept: np.ndarray

    def row(self, g: int) -> int:
        if g < self.steady:
            return g - self.first
        if g < self.steady_end:
            return self.steady - self.first + (g - self.steady) % self.period
        return self.steady - self.first + self.period + g - self.steady_end

    def same(self, other: RoundTable) -> bool:
        """Whether ``other`` is this table (its arrays compared by value)."""
        return all(np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b
                   for a, b in zip(vars(self).values(), vars(other).values(), strict=True))

    def longer(self, periods: int) -> RoundTable:
        """The table of ``periods`` more steady periods (``p`` microbatches each)."""
        more = periods * self.period
        return RoundTable(self.pp, self.first, self.steady, self.steady_end + more,
                          self.period, self.last + more, self.stage_f, self.stage_b,
                          self.flags, self.kept)


@lru_cache(maxsize=64)
def round_table(pp: int, chunks: int, num_microbatches: int) -> RoundTable | None:
    """The rounds of the interleaved orders (module docstring), None when they are not such
    rounds. Up to ``DIRECT_CHECK p`` microbatches they are read off the orders themselves;
    beyond (a multiple of ``p``, where the orders have ``pipeline_orders``' periodic
    structure: ``p`` more microbatches insert one period), off the orders of fewer by whole
    periods, once those and ``p`` more agree on it."""
    m = num_microbatches
    if m <= DIRECT_CHECK * pp:
        return _read(pp, chunks, m)
    if m % pp or periodic_orders("interleaved", pp, chunks, m) is None:
        return None
    small = m - (m - DIRECT_CHECK * pp) // pp * pp
    if small == m:
        small -= pp
    one, two = _read(pp, chunks, small - pp), _read(pp, chunks, small)
    if one is None or two is None or one.steady == one.steady_end or \
            not one.longer(1).same(two):
        return None
    return two.longer((m - small) // pp)


def _read(pp: int, chunks: int, m: int) -> RoundTable | None:
    """The table read off the orders of ``m`` microbatches, every dependency checked."""
    orders = coded_orders("interleaved", pp, chunks, m)
    stages = pp * chunks
    if pp < 2 or not m:
        return None
    where: dict[tuple[int, int, int], tuple[int, int]] = {}  # action -> (round, rank)
    for r, order in enumerate(orders):
        forwards = [a for a in order if a[1] == 0]
        backwards = [a for a in order if a[1] == 1]
        # warm-up: the forwards before the one that pairs with the first backward
        warm = next((i for i, a in enumerate(order) if a[1] == 1), len(order) + 1) - 1
        steady = len(forwards) - warm
        expected = [*forwards[:warm], *(a for pair in zip(forwards[warm:], backwards[:steady],
                                                          strict=True) for a in pair),
                    *backwards[steady:]]
        if tuple(expected) != order or any(a[0] % pp != r for a in order):
            return None
        where.update({a: (v - warm - r, r) for v, a in enumerate(forwards)})
        where.update({a: (v - r, r) for v, a in enumerate(backwards)})
    for (s, kind, j), (g, _) in where.items():  # every input made the round before
        if kind == 0 and s == 0:
            continue
        if kind == 0:
            made, due = where.get((s - 1, 0, j)), g - 1
        elif s == stages - 1:  # the last stage's backward: its own forward, this round
            made, due = where.get((s, 0, j)), g
        else:
            made, due = where.get((s + 1, 1, j)), g - 1
        if made is None or made[0] != due:
            return None
    return _table(pp, stages, where)


def _table(pp: int, stages: int,
           where: dict[tuple[int, int, int], tuple[int, int]]) -> RoundTable | None:
    """The rounds' stages, the steady range and its period, the rows kept (``RoundTable``)."""
    first = min(g for g, _ in where.values())
    last = max(g for g, _ in where.values())
    stage_f, stage_b = (np.full((last - first + 1, pp), -1) for _ in range(2))
    for (s, kind, _), (g, r) in where.items():
        (stage_f if kind == 0 else stage_b)[g - first, r] = s
    full = [g for g in range(first, last + 1) if (stage_f[g - first] >= 0).all()
            and (stage_b[g - first] >= 0).all()]
    period = stages  # p microbatches of every chunk
    steady, steady_end = (full[0], full[-1] + 1) if full else (last + 1, last + 1)
    if len(full) != steady_end - steady:
        return None
    for g in range(steady + period, steady_end):
        if not ((stage_f[g - first] == stage_f[g - first - period]).all()
                and (stage_b[g - first] == stage_b[g - first - period]).all()):
            return None
    last_b = [max(g for (_, kind, _), (g, rank) in where.items() if kind == 1 and rank == r)
              for r in range(pp)]
    if min(last_b) < steady_end:  # every rank's last backward in a round walked
        return None
    if steady_end - steady >= 2 * period:
        rows = [*range(first, steady + period), *range(steady_end, last + 1)]
    else:  # too short to repeat: every round kept, none steady
        rows, steady = list(range(first, last + 1)), last + 1
        steady_end = steady
    stage_f, stage_b = stage_f[[g - first for g in rows]], stage_b[[g - first for g in rows]]
    flags = tuple((bool((f >= 0).any()), bool((f >= 0).all()), bool((b >= 0).any()),
                   bool((b >= 0).all()), bool(f[0] == 0), bool(b[-1] == stages - 1))
                  for f, b in zip(stage_f, stage_b, strict=True))
    kept = np.arange(4 * pp)
    if steady < steady_end:  # the inputs the first steady round does not read
        after = rows.index(steady)
        drop = ([2 * pp] if flags[after][4] else []) + ([4 * pp - 1] if flags[after][5] else [])
        kept = np.delete(kept, drop)
    return RoundTable(pp, first, steady, steady_end, period, last, stage_f, stage_b, flags,
                      kept)


class _Lanes:
    """The walk's per-evaluation seconds, one row per kept round (``RoundTable.row``), and its
    state, per rank (rows of each array) and lane (columns); a round writes into these (a
    numpy call costs about 1 us here, a round's arithmetic far less)."""

    def __init__(self, table: RoundTable, lanes: tuple[PipelineTimes, PipelineTimes]) -> None:
        pp = table.pp
        stages = len(lanes[0].forward)
        forward, backward, f_hop, b_hop, self.no_f, self.no_b = _indexes(table, stages)

        def per_row(values: list[tuple[float, ...]], index: np.ndarray,
                    quiet: bool = False) -> np.ndarray:
            flat = np.zeros((stages + 1, 2))  # the last row: no action (index ``stages``)
            flat[:len(values[0])] = np.array(values).T
            if quiet:  # -inf where an action sends nothing on the stream (none, or no time)
                flat = np.where(flat > 0, 0.0, -np.inf)
            return flat.take(index, axis=0)

        self.forward = per_row([t.forward for t in lanes], forward)
        self.backward = per_row([t.backward for t in lanes], backward)
        sends = [t.send for t in lanes]
        self.hop_f, self.hop_b = per_row(sends, f_hop), per_row(sends, b_hop)
        self.quiet_f, self.quiet_b = per_row(sends, f_hop, True), per_row(sends, b_hop, True)
        self.free, self.link = np.zeros((pp, 2)), np.zeros((pp, 2))
        self.into_f, self.into_b = np.zeros((pp, 2)), np.zeros((pp, 2))  # inputs on their way
        self.last_start, self.last_end = np.zeros((pp, 2)), np.zeros((pp, 2))
        self.begin, self.end_f, self.end_b = (np.empty((pp, 2)) for _ in range(3))
        self.sent, self.arrival = np.empty((pp, 2)), np.empty((pp, 2))
        self.down, self.up = _ROLLS[0][pp], _ROLLS[1][pp]

    def send(self, end: np.ndarray, hop: np.ndarray, quiet: np.ndarray) -> np.ndarray:
        """The arrival of each rank's output (``end``) sent on its stream (``hop`` seconds;
        ``quiet`` -inf where it sends nothing on it: it arrives at ``end``); the stream moves
        on (with nothing sent, to max(stream, end): what it is for every later send)."""
        sent, arrival, link = self.sent, self.arrival, self.link
        np.add(link, quiet, out=sent)
        np.maximum(sent, end, out=sent)
        np.add(sent, hop, out=arrival)
        np.maximum(link, sent, out=link)
        link += hop
        return arrival

    def round(self, row: int, flags: tuple[bool, ...], steady: bool) -> None:
        """One global round: every rank's forward, then every rank's backward (module
        docstring); ranks without one stay as they are. The last backwards are kept outside
        the ``steady`` rounds (every rank runs more after those)."""
        any_f, all_f, any_b, all_b, first_stage, last_stage = flags
        now = self.free
        if any_f:
            end = self.end_f
            if first_stage:
                self.into_f[0] = 0.0
            np.maximum(now, self.into_f, out=self.begin)
            np.add(self.begin, self.forward[row], out=end)
            if not all_f:
                np.copyto(end, now, where=self.no_f[row])
            self.send(end, self.hop_f[row], self.quiet_f[row]).take(self.down, axis=0,
                                                                    out=self.into_f)
            now = end
        if any_b:
            if last_stage:
                self.into_b[-1] = self.end_f[-1]
            begin, end = self.begin, self.end_b
            np.maximum(now, self.into_b, out=begin)
            np.add(begin, self.backward[row], out=end)
            if not all_b:
                missing = self.no_b[row]
                np.copyto(end, now, where=missing)
                np.copyto(self.last_start, begin, where=~missing)
                np.copyto(self.last_end, end, where=~missing)
            elif not steady:
                np.copyto(self.last_start, begin)
                np.copyto(self.last_end, end)
            self.send(end, self.hop_b[row], self.quiet_b[row]).take(self.up, axis=0,
                                                                    out=self.into_b)
            now = end
        if now is self.end_b:  # the round's last ends are the ranks' free times: swap
            self.free, self.end_b = self.end_b, self.free
        elif now is self.end_f:
            self.free, self.end_f = self.end_f, self.free

    def state(self, kept: np.ndarray) -> np.ndarray:
        """What the next period reads (per lane: free, stream, inputs on their way)."""
        whole = np.concatenate((self.free, np.maximum(self.link, self.free), self.into_f,
                                self.into_b))
        return whole[kept]

    def translate(self, moved: np.ndarray) -> None:
        np.maximum(self.link, self.free, out=self.link)
        for values in (self.free, self.link, self.into_f, self.into_b):
            values += moved


_ROLLS: tuple[dict[int, np.ndarray], dict[int, np.ndarray]] = ({}, {})


@lru_cache(maxsize=64)
def _indexes(table: RoundTable, stages: int) -> tuple[np.ndarray, ...]:
    """Per row and rank: the stage of each forward and backward and the boundary each sends
    over (``stages``: none), where there is no forward / backward (with a lane axis to
    broadcast); the rank rolls made once."""
    for rolls, step in zip(_ROLLS, (1, -1), strict=True):
        rolls.setdefault(table.pp, np.roll(np.arange(table.pp), step))
    f, b = table.stage_f, table.stage_b
    return (np.where(f < 0, stages, f), np.where(b < 0, stages, b),
            np.where((f < 0) | (f == stages - 1), stages, f),
            np.where(b > 0, b - 1, stages), (f < 0)[:, :, None], (b < 0)[:, :, None])


def interleaved_timings(times: PipelineTimes, quiet: PipelineTimes
                        ) -> tuple[ReplicaTiming, ReplicaTiming] | None:
    """Both lanes' timing (module docstring); None when the orders are not such rounds."""
    if times.schedule != "interleaved" or times.pp < 2:
        return None
    table = round_table(times.pp, times.chunks, times.num_microbatches)
    if table is None:
        return None
    walk = _Lanes(table, (times, quiet))
    flags, period = table.flags, table.period
    earlier = None  # the state at the end of the previous steady period
    g = table.first
    while g <= table.last:
        row = table.row(g)
        walk.round(row, flags[row], table.steady <= g < table.steady_end)
        if table.steady <= g + 1 < table.steady_end and (g + 1 - table.steady) % period == 0:
            state = walk.state(table.kept)
            moved = _moved(earlier, state)
            earlier = state
            if moved is not None:
                whole = (table.steady_end - 1 - g) // period
                walk.translate(whole * moved)
                g += whole * period
                earlier = None
        g += 1
    return tuple(ReplicaTiming(tuple(walk.last_start[:, lane].tolist()),
                               tuple(walk.last_end[:, lane].tolist()),
                               float(walk.free[:, lane].max())) for lane in range(2))


def _moved(earlier: np.ndarray | None, state: np.ndarray) -> np.ndarray | None:
    """Seconds per lane by which ``state`` is ``earlier`` moved, None when it is not."""
    if earlier is None:
        return None
    moved = state - earlier
    scale = np.abs(state).max(axis=0) * TOLERANCE
    if np.all(moved.max(axis=0) - moved.min(axis=0) <= scale):
        return moved[0].copy()
    return None
