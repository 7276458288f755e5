"""The unit walk (``unit_walk``: ZB-V, DualPipe, DualPipeV, Megatron-Core's merged 1F1B) compiled
once per layout into what it reads per unit, and walked two lanes at a time.

``unit_program`` turns a ``UnitLayout``'s units into, per rank and unit: the integer keys of
its inputs (``microbatch x 3 stages + kind x stages + stage``, kind 0 a forward's input, 1 an
input gradient's, 2 a weight gradient's), the index of its shape (its actions' kinds and
stages: what its seconds depend on), its outputs (key, the boundary whose transfer carries it
or -1 on the rank itself, the rank it goes to) and whether it is a backward unit; and per rank
how many units of each shape it runs. ``walk_program`` then walks the units as
``unit_walk.walk_unit_lanes`` did action by action, each shape's seconds priced once per lane
(``unit_walk.unit_seconds``), the same ``max`` and ``+`` in the same order on each lane: its
times are that walk's bit for bit (``tests/job/test_unit_walk.py`` holds every lane equal to the
lane walked alone and to the event simulator). The walk's cost is still one Python step per
unit: it is the reference of ``job.evaluation.unit_levels`` (ZB-V, DualPipe and DualPipeV
walked level by level from this program) and walks Megatron-Core's merged 1F1B steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dlsched.errors import ConfigError
from dlsched.pipeline.plans.actions import Action

KINDS = {"F": 0, "I": 1, "B": 1, "W": 2}  # a whole backward (B) waits and sends as I does
Step = tuple[int, tuple[int, ...], int, tuple[tuple[int, int, int], ...], bool]


@dataclass(frozen=True)
class UnitProgram:
    """``shapes``: one unit of each shape (``module docstring``); ``steps``: per rank, per unit
    (its first input's key, -1 for none, the other inputs' keys, shape, outputs, backward);
    ``counts``: per rank, its units of each shape."""

    shapes: tuple[tuple[Action, ...], ...]
    steps: tuple[tuple[Step, ...], ...]
    counts: tuple[tuple[int, ...], ...]


_PROGRAMS: dict[int, tuple[Any, UnitProgram]] = {}
MAX_PROGRAMS = 64  # layouts compiled at once (each kept with the layout it was read from)


def units_of(order: tuple[Action, ...], joined: frozenset[int]) -> list[tuple[Action, ...]]:
    """A rank's units in order: its actions, each joined to the next where ``joined`` says."""
    units, start = [], 0
    for i in range(len(order)):
        if i not in joined:
            units.append(order[start:i + 1])
            start = i + 1
    return units


def unit_program(layout: Any) -> UnitProgram:
    """The program of ``layout`` (a ``unit_walk.UnitLayout``: stages, orders, joined), kept
    per layout object (the layouts are kept themselves)."""
    kept = _PROGRAMS.get(id(layout))
    if kept is not None and kept[0] is layout:
        return kept[1]
    stages = layout.stages
    width, last = len(stages), len(stages) - 1
    shapes: dict[tuple[tuple[str, int], ...], int] = {}
    representative: list[tuple[Action, ...]] = []
    steps, counts = [], []
    for rank, (order, joined) in enumerate(zip(layout.orders, layout.joined, strict=True)):
        rank_steps, rank_counts = [], {}
        for unit in units_of(order, joined):
            shape = tuple((a.kind, a.stage) for a in unit)
            if shape not in shapes:
                shapes[shape] = len(representative)
                representative.append(unit)
            index = shapes[shape]
            rank_counts[index] = rank_counts.get(index, 0) + 1
            inputs = tuple((a.microbatch * 3 + KINDS[a.kind]) * width + a.stage for a in unit
                           if not (a.kind == "F" and a.stage == 0)
                           and not (a.kind == "W" and Action(a.stage, "I", a.microbatch) in unit))
            first, rest = (inputs[0], inputs[1:]) if inputs else (-1, ())
            outputs = []
            for a in unit:
                s, j = a.stage, a.microbatch
                if a.kind == "W":
                    continue
                if a.kind in "IB":
                    outputs.append(((j * 3 + 2) * width + s, -1, rank))  # its own W
                    if s == 0:
                        continue
                    target, kind, boundary = s - 1, 1, s - 1
                elif s == last:
                    outputs.append(((j * 3 + 1) * width + s, -1, rank))
                    continue
                else:
                    target, kind, boundary = s + 1, 0, s
                to = stages[target].device_for(j)
                outputs.append(((j * 3 + kind) * width + target, -1 if to == rank else boundary,
                                to))
            rank_steps.append((first, rest, index, tuple(outputs),
                               any(a.kind != "F" for a in unit)))
        steps.append(tuple(rank_steps))
        counts.append(rank_counts)
    program = UnitProgram(tuple(representative), tuple(steps),
                          tuple(tuple(c.get(i, 0) for i in range(len(representative)))
                                for c in counts))
    if len(_PROGRAMS) >= MAX_PROGRAMS:
        _PROGRAMS.clear()
    _PROGRAMS[id(layout)] = (layout, program)
    return program


def walk_program(program: UnitProgram, lanes: Sequence[Any], schedule: str,
                 seconds: Callable[[Any, tuple[Action, ...]], float]
                 ) -> list[tuple[tuple[float, ...], tuple[float, ...], float]]:
    """Per lane (``lanes``: each a replica's times with ``send``), per rank the start and end
    of its last backward unit and the replica's end, ``seconds(lane, unit)`` a unit's
    seconds; walked two lanes at a time (each lane's walk is its own)."""
    out = []
    for first in range(0, len(lanes), 2):
        pair = (lanes[first], lanes[min(first + 1, len(lanes) - 1)])
        out += _walk_pair(program, pair, schedule, seconds)[:len(lanes) - first]
    return out


def _walk_pair(program: UnitProgram, pair: tuple[Any, Any], schedule: str,
               seconds: Callable[[Any, tuple[Action, ...]], float]
               ) -> list[tuple[tuple[float, ...], tuple[float, ...], float]]:
    """Two lanes of one walk (``walk_program``): ``unit_walk.walk_unit_lanes``' arithmetic."""
    one, two = pair
    sec = [seconds(one, unit) for unit in program.shapes]
    secq = [seconds(two, unit) for unit in program.shapes]
    send, sendq = one.send, two.send
    pp = len(program.steps)
    free, freeq, link, linkq = [0.0] * pp, [0.0] * pp, [0.0] * pp, [0.0] * pp
    start, startq, end, endq = [0.0] * pp, [0.0] * pp, [0.0] * pp, [0.0] * pp
    made: dict[int, tuple[float, float]] = {}
    pointer, queued = [0] * pp, [True] * pp
    woken = list(range(pp - 1, -1, -1))  # ranks with new inputs (a stack)
    while woken:
        rank = woken.pop()
        queued[rank] = False
        steps, k, now, nowq = program.steps[rank], pointer[rank], free[rank], freeq[rank]
        busy, busyq, size = link[rank], linkq[rank], len(steps)
        while k < size:
            first, rest, shape, outputs, backward = steps[k]
            if first >= 0:  # the first input's arrival, then the others' (max in order)
                got = made.get(first)
                if got is None:
                    break
                ready, readyq = got
                if rest:
                    for key in rest:
                        got = made.get(key)
                        if got is None:
                            break
                        at, atq = got
                        ready = at if at > ready else ready
                        readyq = atq if atq > readyq else readyq
                    else:
                        got = ready
                    if got is None:
                        break
                    for key in rest:
                        del made[key]
                del made[first]
                begin = ready if ready > now else now
                beginq = readyq if readyq > nowq else nowq
            else:
                begin, beginq = now, nowq
            now, nowq = begin + sec[shape], beginq + secq[shape]
            if backward:
                start[rank], end[rank], startq[rank], endq[rank] = begin, now, beginq, nowq
            for key, boundary, to in outputs:
                if boundary < 0:
                    made[key] = (now, nowq)
                    continue
                seconds_, secondsq = send[boundary], sendq[boundary]
                arrival, arrivalq = now, nowq
                if seconds_ > 0:
                    arrival = busy = (now if now > busy else busy) + seconds_
                if secondsq > 0:
                    arrivalq = busyq = (nowq if nowq > busyq else busyq) + secondsq
                made[key] = (arrival, arrivalq)
                if not queued[to]:
                    queued[to] = True
                    woken.append(to)
            k += 1
        pointer[rank], free[rank], freeq[rank] = k, now, nowq
        link[rank], linkq[rank] = busy, busyq
    if any(k < len(steps) for k, steps in zip(pointer, program.steps, strict=True)):
        raise ConfigError(f"pipeline: the {schedule} orders deadlock")
    return [(tuple(start), tuple(end), max(free)), (tuple(startq), tuple(endq), max(freeq))]
