"""The unit walk (``job.evaluation.unit_program``) as a max-plus graph evaluated level by level
with numpy: every unit of a dependency level, on every rank, at once.

``unit_program.walk_program`` takes one Python step per unit (about 1.3 us at PP 64: 81-99 ms
for ZB-V and DualPipeV at 384 microbatches). Every time it computes is a ``max`` of earlier
times plus seconds: a unit begins at the latest of its rank's previous unit's end (0 for the
first) and its inputs' arrivals, and ends its seconds later; an output crossing to another
rank arrives when the rank's send stream, free at the latest of the unit's end and its
previous transfer's arrival, has carried it (``send[boundary]`` seconds), an output of a
boundary that sends nothing (0 seconds) at the unit's end, the stream unchanged. So the walk is
a graph whose nodes are the units and the transfers (one per output that crosses ranks), each
``max(predecessors) + seconds``, the same in every evaluation of a layout: only the seconds
change, and which boundaries send at all (a lane's zero sends read the unit's end instead of
the transfer, and leave the stream as it was).

``level_program`` builds that graph once per unit program and send pattern (per lane, which
boundaries send): each node's level (one more than its latest predecessor's), the nodes
numbered level by level, each with its predecessors padded to one count (a ``-inf`` entry).
``walk_levels`` then evaluates a level as one gather, one maximum over the predecessors and
one addition into the level's slice of the times, both lanes at once: about 6 us per level,
whatever the ranks. Its cost is the levels (about the units per rank plus the pipeline's
depth: 2,600 for ZB-V at PP 64 and 384 microbatches against 147,456 units), still one level
per unit of a rank, so it grows with the microbatches.

The times are the unit walk's bit for bit: the same additions of the same operands, and
maxima (exact) of the same values (``tests/job/test_unit_levels.py`` holds every time equal
on random replicas of each schedule, sends and overlapped pairs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dlsched.errors import ConfigError
from dlsched.job.evaluation.unit_program import UnitProgram
from dlsched.pipeline.plans.actions import Action

Walked = tuple[tuple[float, ...], tuple[float, ...], float]


@dataclass(frozen=True)
class _Graph:
    """A unit program's graph before its send pattern is known: per node (numbered level by
    level) its rank's previous node, its inputs' producers (units) and their transfers (-1:
    none), the boundary each transfer crosses, and for a transfer the unit it carries and the
    rank's previous transfer; ``bounds`` each level's first node; ``shape`` per unit node its
    shape, -1 for a transfer; ``backward`` and ``last`` per rank its last backward and last
    unit nodes."""

    prev: np.ndarray
    made: np.ndarray
    carried: np.ndarray
    crossing: np.ndarray
    shape: np.ndarray
    bounds: tuple[int, ...]
    backward: tuple[int, ...]
    last: tuple[int, ...]
    boundaries: int


@dataclass(frozen=True)
class LevelProgram:
    """The graph with one send pattern: ``preds`` (nodes x width x 2 lanes, flat indices into
    the times), ``table`` (nodes x 2) each node's index into its lane's seconds (unit shapes,
    then boundaries, then a 0), and the level slices."""

    graph: _Graph
    preds: np.ndarray
    table: np.ndarray
    levels: tuple[tuple[np.ndarray, slice], ...]


_GRAPHS: dict[int, tuple[UnitProgram, _Graph]] = {}
_LEVELS: dict[tuple[int, tuple[tuple[bool, ...], ...]], tuple[_Graph, LevelProgram]] = {}
MAX_GRAPHS = 32  # unit programs whose graph is kept (each about 10 MB at PP 64, 384 microbatches)


def _graph(program: UnitProgram, schedule: str) -> _Graph:
    """The graph of ``program`` (module docstring), kept per program object."""
    kept = _GRAPHS.get(id(program))
    if kept is not None and kept[0] is program:
        return kept[1]
    graph = _build(program, schedule)
    if len(_GRAPHS) >= MAX_GRAPHS:
        _GRAPHS.clear()
        _LEVELS.clear()
    _GRAPHS[id(program)] = (program, graph)
    return graph


def _build(program: UnitProgram, schedule: str) -> _Graph:
    """Walk the program without times (``walk_program``'s order: a rank runs its units until
    one waits for an input not made yet), numbering nodes as they are made, then renumber
    them level by level."""
    pp = len(program.steps)
    widest = max((len(step[1]) + (step[0] >= 0) for steps in program.steps for step in steps),
                 default=0)
    prev: list[int] = []  # node -> its rank's previous unit (units) or transfer (transfers)
    made: list[list[int]] = []  # node -> producing units of its inputs (units) / [unit]
    carried: list[list[int]] = []  # node -> transfers of its inputs (-1: on the rank)
    crossing: list[list[int]] = []  # node -> boundary of each input's transfer (-1: none)
    shape: list[int] = []
    level: list[int] = []
    outputs: dict[int, tuple[int, int, int]] = {}  # key -> (unit, transfer, boundary)
    last_unit, last_sent = [-2] * pp, [-2] * pp  # -2: the zero node (nothing before)
    backward, pointer, queued = [-1] * pp, [0] * pp, [True] * pp
    woken = list(range(pp - 1, -1, -1))

    def add(before: int, units: list[int], sends: list[int], bounds: list[int],
            kind: int) -> int:
        depth = level[before] if before >= 0 else -1
        for unit, sent in zip(units, sends, strict=True):
            depth = max(depth, level[sent if sent >= 0 else unit])
        prev.append(before)
        made.append(units)
        carried.append(sends)
        crossing.append(bounds)
        shape.append(kind)
        level.append(depth + 1)
        return len(level) - 1

    while woken:
        rank = woken.pop()
        queued[rank] = False
        steps, k = program.steps[rank], pointer[rank]
        while k < len(steps):
            first, rest, kind, outs, is_backward = steps[k]
            keys = ((first, *rest) if first >= 0 else ())
            if any(key not in outputs for key in keys):
                break
            got = [outputs.pop(key) for key in keys]
            node = add(last_unit[rank], [g[0] for g in got], [g[1] for g in got],
                       [g[2] for g in got], kind)
            last_unit[rank] = node
            if is_backward:
                backward[rank] = node
            for key, boundary, to in outs:
                if boundary < 0:
                    outputs[key] = (node, -1, -1)
                    continue
                sent = add(last_sent[rank], [node], [-1], [boundary], -1)
                last_sent[rank] = sent
                outputs[key] = (node, sent, boundary)
                if not queued[to]:
                    queued[to] = True
                    woken.append(to)
            k += 1
        pointer[rank] = k
    if any(k < len(steps) for k, steps in zip(pointer, program.steps, strict=True)):
        raise ConfigError(f"pipeline: the {schedule} orders deadlock")
    count = len(level)
    order = np.argsort(np.array(level, dtype=np.int64), kind="stable")
    number = np.empty(count + 2, dtype=np.int64)
    number[order] = np.arange(count)
    number[-2], number[-1] = count + 1, count  # -2: the zero node, -1: none (-inf)

    def padded(rows: list[list[int]]) -> np.ndarray:
        out = np.full((count, max(widest, 1)), -1, dtype=np.int64)
        for i, row in enumerate(rows):
            out[i, :len(row)] = row
        return out[order]

    renumber = number.__getitem__
    levels = np.array(level, dtype=np.int64)[order]
    bounds = tuple(np.flatnonzero(np.diff(levels)).tolist())
    made_array, carried_array = padded(made), padded(carried)
    return _Graph(renumber(np.array(prev, dtype=np.int64)[order]),
                  np.where(made_array >= 0, renumber(made_array), count),
                  np.where(carried_array >= 0, renumber(carried_array), -1),
                  padded(crossing), np.array(shape, dtype=np.int64)[order],
                  (0, *(b + 1 for b in bounds), count),
                  tuple(int(number[b]) for b in backward),
                  tuple(int(number[u]) for u in last_unit),
                  len(program.shapes))


def level_program(program: UnitProgram, sends: tuple[tuple[bool, ...], ...],
                  schedule: str) -> LevelProgram:
    """The graph of ``program`` with the send pattern ``sends`` (per lane and boundary:
    whether its transfer takes time), kept per program and pattern."""
    graph = _graph(program, schedule)
    kept = _LEVELS.get((id(program), sends))
    if kept is not None and kept[0] is graph:
        return kept[1]
    count = len(graph.prev)
    none, zero_table = count, graph.boundaries + len(sends[0])
    transfer = graph.shape < 0
    lanes_preds, lanes_table = [], []
    for lane, pattern in enumerate(sends):
        busy = np.array([*pattern, False])  # index -1 (no boundary): nothing sent
        # units: the previous unit, then each input (its transfer where the boundary sends)
        takes = np.where(graph.carried >= 0, busy[graph.crossing], False)
        inputs = np.where(takes, graph.carried, graph.made)
        # transfers: (the unit, the previous transfer) where it sends, else the previous
        sending = busy[graph.crossing[:, 0]] & transfer
        first = np.where(transfer, np.where(sending, graph.made[:, 0], graph.prev), graph.prev)
        inputs = np.where(transfer[:, None], none, inputs)
        inputs[:, 0] = np.where(sending, graph.prev, inputs[:, 0])
        preds = np.concatenate((first[:, None], inputs), axis=1)
        lanes_preds.append(preds * 2 + lane)
        table = np.where(transfer, np.where(sending, graph.boundaries + graph.crossing[:, 0],
                                            zero_table), graph.shape)
        lanes_table.append(table)
    preds = np.stack(lanes_preds, axis=2)
    table = np.stack(lanes_table, axis=1)
    levels = tuple((preds[a:b], slice(a, b))
                   for a, b in zip(graph.bounds[:-1], graph.bounds[1:], strict=True))
    result = LevelProgram(graph, preds, table, levels)
    _LEVELS[(id(program), sends)] = (graph, result)
    return result


def walk_levels(program: UnitProgram, pair: tuple[Any, Any], schedule: str,
                seconds: Callable[[Any, tuple[Action, ...]], float]) -> list[Walked]:
    """Both lanes of ``pair`` (replicas of one layout, each with its seconds and ``send``):
    per rank the start and end of its last backward unit and the replica's end, as
    ``unit_program.walk_program`` gives them (module docstring)."""
    sends = tuple(tuple(s > 0 for s in lane.send) for lane in pair)
    levels = level_program(program, sends, schedule)
    graph = levels.graph
    count = len(graph.prev)
    lane_seconds = np.array([[*(seconds(lane, unit) for unit in program.shapes), *lane.send,
                              0.0] for lane in pair])
    weights = np.empty((count, 2))
    weights[:, 0] = lane_seconds[0][levels.table[:, 0]]
    weights[:, 1] = lane_seconds[1][levels.table[:, 1]]
    times = np.empty((count + 2, 2))
    times[count] = -np.inf
    times[count + 1] = 0.0
    flat = times.reshape(-1)
    take, maximum, add = flat.take, np.maximum.reduce, np.add
    for preds, part in levels.levels:
        add(maximum(take(preds), axis=1), weights[part], out=times[part])
    backward = np.array(graph.backward)
    starts = flat.take(levels.preds[backward]).max(axis=1)
    ends = times[backward]
    last = times[np.array(graph.last)].max(axis=0)
    return [(tuple(starts[:, lane].tolist()), tuple(ends[:, lane].tolist()),
             float(last[lane])) for lane in range(2)]


def walk_level_lanes(program: UnitProgram, lanes: Sequence[Any], schedule: str,
                     seconds: Callable[[Any, tuple[Action, ...]], float]) -> list[Walked]:
    """``walk_levels`` of each of ``lanes``, two at a time."""
    out = []
    for first in range(0, len(lanes), 2):
        pair = (lanes[first], lanes[min(first + 1, len(lanes) - 1)])
        out += walk_levels(program, pair, schedule, seconds)[:len(lanes) - first]
    return out
