"""One pipeline replica's per-rank action orders, and their steady state: a period that repeats.

``rank_orders`` gives each rank's actions for a schedule (the pipeline domain's orders,
``pipeline.schedules``; stage ``s`` on rank ``s % pp``). ``periodic_orders`` finds what one
more microbatch (``shift`` more for the interleaved schedule, which adds ``pp`` at a time) adds
to them: on every rank the order for ``m`` microbatches is

    prefix + period(0) + period(1) + ... + period(R - 1) + suffix(m)

where ``period(k)`` is one period's actions with their microbatches ``k x shift`` later and
``suffix(m)`` the cool-down with its microbatches ``m - base`` later; ``R = periods + (m -
base) / shift``. The structure is read off the orders of ``base``, ``base + shift`` and ``base
+ 2 shift`` microbatches (each rank's orders must differ by one inserted period each time), and
each rank's prefix is then shortened by the whole periods its order repeats before the
insertion, so that the prefix is the warm-up and round 0 the first period of every rank (the
ranks then have different numbers of rounds, 1F1B's rank ``r`` ``m - (pp - 1 - r)``); when that
is not a cut, by as many periods on every rank. Every round boundary must be a cut of the
dependencies (no action before it waits for one after it; a suffix counts as after every
round), which is checked: ``job.evaluation.pipeline_steady`` then walks round by round and reads
the rounds that only repeat off the walked ones. ``tests/job/test_pipeline_periods.py`` checks
that the expanded structure is ``rank_orders`` exactly for every schedule on random degrees and
microbatches.
GPipe (its forwards and backwards grow at two places per rank) and an interleaved schedule
whose microbatches are not a multiple of ``pp`` have no such structure (None: walked in full).
ZB-V's orders (``2 pp`` stages in a V, ``stage_ranks``) have one from ``2 pp - 1`` microbatches.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from dlsched.errors import ConfigError
from dlsched.pipeline.plans.actions import Action
from dlsched.pipeline.plans.plan import Stage
from dlsched.pipeline.plans.schedules import (
    gpipe_orders,
    interleaved_orders,
    one_f_one_b_orders,
    zb_h1_orders,
    zb_v_orders,
)

KIND_CODES = {"F": 0, "B": 1, "I": 1, "W": 2}
Coded = tuple[int, int, int]
"""An action as (stage, kind code, microbatch) (``KIND_CODES``: a split backward's I takes
B's code)."""
MAX_BASE_PERIODS = 8  # bases tried past the first: beyond any warm-up of these schedules


@lru_cache(maxsize=512)
def rank_orders(schedule: str, pp: int, chunks: int,
                num_microbatches: int) -> tuple[tuple[Action, ...], ...]:
    """Each rank's actions in order (one replica; kept per arguments)."""
    m = num_microbatches
    if schedule == "interleaved":
        return interleaved_orders(chunks, m, tuple((k,) for k in range(pp)), pp)
    stages = tuple(Stage(s, s + 1, (s,)) for s in range(pp))
    if schedule == "1f1b":
        return one_f_one_b_orders(stages, pp, m)
    if schedule == "gpipe":
        return gpipe_orders(stages, pp, m)
    if schedule == "zb-h1":
        return zb_h1_orders(stages, pp, m)
    if schedule == "zb-v":  # 2 pp stages in a V (stage_ranks), as unit_walk.unit_layout's
        return zb_v_orders(m, tuple((k,) for k in range(pp)), pp)
    raise ConfigError(f"{schedule!r} is not accepted; accepted: 1f1b, interleaved, gpipe, "
                      "zb-h1, zb-v", "schedule")


def stage_ranks(schedule: str, pp: int, stages: int) -> tuple[int, ...]:
    """The rank of each of ``stages`` stages: ``s % pp`` (one chunk after another), or the V
    of ZB-V (stage ``s`` on rank ``s`` going down, ``2 pp - 1 - s`` coming up)."""
    if schedule == "zb-v":
        return tuple(min(s, 2 * pp - 1 - s) for s in range(stages))
    return tuple(s % pp for s in range(stages))


@lru_cache(maxsize=512)
def coded_orders(schedule: str, pp: int, chunks: int,
                 num_microbatches: int) -> tuple[tuple[Coded, ...], ...]:
    """``rank_orders`` as coded triples (``Coded``)."""
    return tuple(tuple((a.stage, KIND_CODES[a.kind], a.microbatch) for a in order)
                 for order in rank_orders(schedule, pp, chunks, num_microbatches))


@dataclass(frozen=True)
class PeriodicOrders:
    """The orders of ``base + n x shift`` microbatches (any ``n >= 0``) as per-rank prefix,
    period (its round-0 microbatches) and suffix (its microbatches at ``base``); each rank's
    order of ``base`` has ``periods[rank]`` rounds (module docstring)."""

    shift: int
    base: int
    periods: tuple[int, ...]
    prefix: tuple[tuple[Coded, ...], ...]
    period: tuple[tuple[Coded, ...], ...]
    suffix: tuple[tuple[Coded, ...], ...]

    def rounds(self, num_microbatches: int) -> tuple[int, ...]:
        """Each rank's rounds of its period in the order of ``num_microbatches``."""
        return tuple(n + (num_microbatches - self.base) // self.shift for n in self.periods)

    def expand(self, num_microbatches: int) -> tuple[tuple[Coded, ...], ...]:
        """The full orders of ``num_microbatches`` (for checking; the walk never builds them)."""
        later = num_microbatches - self.base
        return tuple(
            prefix + repeated(period, self.shift, 0, rounds) + shifted(suffix, later)
            for prefix, period, suffix, rounds in zip(
                self.prefix, self.period, self.suffix, self.rounds(num_microbatches),
                strict=True))


def repeated(period: tuple[Coded, ...], shift: int, first: int,
             end: int) -> tuple[Coded, ...]:
    """Rounds ``first`` to ``end - 1`` of ``period`` (round ``k``: its microbatches ``k x
    shift`` later)."""
    return tuple((s, kind, j + k * shift) for k in range(first, end) for s, kind, j in period)


def shifted(actions: tuple[Coded, ...], microbatches: int) -> tuple[Coded, ...]:
    """``actions`` with their microbatches ``microbatches`` later."""
    return tuple((s, kind, j + microbatches) for s, kind, j in actions)


def periodic_orders(schedule: str, pp: int, chunks: int,
                    num_microbatches: int) -> PeriodicOrders | None:
    """The periodic structure of the orders of ``num_microbatches`` (module docstring), or
    None when they have none or are too short to gain from it."""
    shift = pp if schedule == "interleaved" else 1
    if schedule == "interleaved" and num_microbatches % pp:
        return None
    found = _structure(schedule, pp, chunks, shift, num_microbatches % shift)
    return found if found is not None and found.base <= num_microbatches else None


@lru_cache(maxsize=256)
def _structure(schedule: str, pp: int, chunks: int, shift: int,
               residue: int) -> PeriodicOrders | None:
    """The structure of the residue class (kept): read from the first base of at least ``pp
    - 1`` microbatches (where 1F1B's and ZB-H1's steady state starts; the interleaved
    schedule's from ``2 pp``; ZB-V's from ``2 pp - 1``, below which its orders are those of
    ``2 pp - 1`` cut short), the next bases tried when it does not hold there."""
    start = 2 * pp - 1 if schedule == "zb-v" else max(pp - 1, 1)
    first = residue + shift * -(-(start - residue) // shift)
    for base in range(first, first + shift * MAX_BASE_PERIODS, shift):
        found = _read(schedule, pp, chunks, shift, base)
        if found is not None:
            return found
    return None


def _read(schedule: str, pp: int, chunks: int, shift: int,
          base: int) -> PeriodicOrders | None:
    """The structure read off the orders of ``base``, ``+ shift`` and ``+ 2 shift``; None when
    they do not grow by one period each time or a round boundary is not a cut."""
    orders = [coded_orders(schedule, pp, chunks, base + k * shift) for k in range(3)]
    prefix, period, suffix, rounds = [], [], [], []
    for rank in range(pp):
        one, two, three = (order[rank] for order in orders)
        at = _common(one, two)
        length = len(two) - len(one)
        if length <= 0 or two[at + length:] != shifted(one[at:], shift):
            return None
        inserted = two[at:at + length]
        if three[:at + length] != two[:at + length] or \
                three[at + length:at + 2 * length] != shifted(inserted, shift) or \
                three[at + 2 * length:] != shifted(two[at + length:], shift):
            return None
        back = 0  # whole periods just before the insertion that repeat it
        while at - (back + 1) * length >= 0 and shifted(
                one[at - (back + 1) * length:at - back * length], (back + 1) * shift) == inserted:
            back += 1
        prefix.append(one[:at])
        period.append(inserted)
        suffix.append(one[at:])
        rounds.append(back)
    # each rank's own repeats taken out of its prefix (the rounds start together, right after
    # the warm-up), else as many on every rank (the rounds end together)
    for keep in (rounds, [min(rounds)] * pp):
        structure = PeriodicOrders(
            shift, base, tuple(keep),
            tuple(p[:len(p) - n * len(q)] for p, q, n in zip(prefix, period, keep, strict=True)),
            tuple(shifted(q, -n * shift) for q, n in zip(period, keep, strict=True)),
            tuple(suffix))
        if _cuts(structure):
            return structure
    return None


def _common(one: tuple[Coded, ...], two: tuple[Coded, ...]) -> int:
    """Length of the common prefix of two orders."""
    at = 0
    while at < len(one) and one[at] == two[at]:
        at += 1
    return at


def _cuts(structure: PeriodicOrders) -> bool:
    """Whether every round boundary of the order of ``base + shift`` microbatches is a cut:
    no action waits for one in a later round (its input's producer: the stage before for a
    forward, the stage after, or the last stage's forward, for a backward, its backward for
    a weight gradient)."""
    every = structure.rounds(structure.base + structure.shift)
    where: dict[tuple[int, int, int], int] = {}  # action -> its round (the suffix: after all)
    for prefix, period, suffix, rounds in zip(structure.prefix, structure.period,
                                              structure.suffix, every, strict=True):
        for action in prefix:
            where[action] = 0
        for k in range(rounds):
            for action in shifted(period, k * structure.shift):
                where[action] = k + 1
        for action in shifted(suffix, structure.shift):
            where[action] = max(every) + 1
    last = max(s for s, _, _ in where)
    for (s, kind, j), round_ in where.items():
        if kind == 0:
            producer = (s - 1, 0, j) if s > 0 else None
        elif kind == 1:
            producer = (s + 1, 1, j) if s < last else (s, 0, j)
        else:
            producer = (s, 1, j)
        if producer is not None and where[producer] > round_:
            return False
    return True
