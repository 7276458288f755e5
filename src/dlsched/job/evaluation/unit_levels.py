"""The unit walk (``job.evaluation.unit_program``) as a max-plus graph evaluated level by level
with numpy: every unit of a dependency level, on every rank and in both lanes, at once.

``unit_program.walk_program`` takes one Python step per unit (about 0.6 us each, two lanes:
81-99 ms for ZB-V and DualPipeV at PP 64 and 384 microbatches). Every time it computes is a
``max`` of earlier times plus seconds: a unit begins at the latest of its rank's previous
unit's end (0 for the first) and its inputs' arrivals, and ends its seconds later; an output
crossing to another rank arrives when the rank's send stream, free at the latest of the unit's
end and its previous transfer's arrival, has carried it (``send[boundary]`` seconds); an output
of a boundary that sends nothing (0 s, as the evaluator's blocking transfers give) arrives at
the unit's end and leaves the stream as it was. So the walk is a graph whose nodes are the
units and the transfers that take time, each ``max(predecessors) + seconds``, the same in every
evaluation of a layout and send pattern (per lane, which boundaries send): only the seconds
change.

``level_program`` builds each lane's graph once per unit program and send pattern, in the unit
walk's order, and numbers both lanes' nodes level by level (one more than the latest
predecessor's). Two rewrites shorten the chains: a node of one predecessor (a W after its own
I, a forward of the first stage, a stage's forward after the one before it on the same rank)
is not waited for but folded into what reads it — the reader reads the predecessor plus the
node's seconds, as a copy of the predecessor with the seconds summed (at most ``FOLD``),
which is on the predecessor's level; and a transfer's arrival ``max(end, stream) + hop`` is
read as ``max(end + hop, stream + hop)`` (copies again), so a unit waits one level after its
input's producer, not two. ``walk_levels`` evaluates a level with one gather per predecessor
slot, a maximum per slot after the first and one addition into the level's slice of the
times (about 3 us per level, whatever the ranks; each level's index arrays and views made
once). At PP 64 and 384 microbatches: ZB-V 1,725 levels (147,456 units), DualPipe 512 (32,706
units), DualPipeV 1,023 (65,473 units); the levels are about the units of a rank (less the
folded ones) plus the pipeline's depth, so the cost still grows with the microbatches.

A folded chain's seconds are summed before they are added (``t + (a + b)`` for ``(t + a) +
b``) and a transfer's hop is added before the maximum (exact: rounding is monotone), so the
times are the unit walk's to rounding: ``tests/job/test_unit_levels.py`` holds every lane equal
to ``walk_program``'s to 1e-9 on random replicas of each schedule (sends, all-to-alls hidden
by overlapped pairs, Megatron-Core's merged 1F1B units).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise, zip_longest
from typing import Any

import numpy as np

from dlsched.errors import ConfigError
from dlsched.job.evaluation.unit_program import UnitProgram
from dlsched.pipeline.plans.actions import Action

Walked = tuple[tuple[float, ...], tuple[float, ...], float]


FOLD = 4  # seconds a reference may carry (module docstring): the longest chain folded
ZERO, NONE = -2, -1  # a lane's node of time 0 (nothing before) and of -inf (no predecessor)


@dataclass(frozen=True)
class _LaneGraph:
    """One lane's graph (one send pattern): per node (in the order made) its predecessors
    (``width`` x nodes, ``NONE`` padded) and its seconds' indices (``FOLD + 1`` at most x
    nodes; ``zero``, the index of 0 s, padded) and level; per rank its last backward unit and
    its last unit."""

    preds: np.ndarray
    terms: np.ndarray
    level: np.ndarray
    backward: tuple[int, ...]
    last: tuple[int, ...]
    zero: int


@dataclass(frozen=True)
class LevelProgram:
    """Both lanes' graphs as one, numbered level by level (lane 0's nodes, lane 1's, then
    -inf and 0): ``preds`` per lane its last backward units' predecessors (width x ranks:
    node indices, for their starts), ``weights`` per term ``j`` the
    nodes with one (``weights[j][0]``) and its index into both lanes' seconds laid end to end
    (unit shapes, boundaries, 0; lane 1's from the middle on); ``backward`` and ``last`` per
    lane and rank its last backward unit and last unit; ``times`` and ``seconds`` the walk's
    buffers (each node's time, then -inf and 0; each node's seconds), of which ``levels``
    holds the views per level (its first predecessor slot and the others that hold any, its
    times, its seconds), used by one walk at a time (``lock``): made once, as a numpy call
    costs about 1 us and a level about 3 us."""

    preds: tuple[np.ndarray, ...]
    weights: tuple[tuple[np.ndarray, np.ndarray], ...]
    levels: tuple[tuple[np.ndarray, tuple[np.ndarray, ...], np.ndarray, np.ndarray], ...]
    backward: tuple[tuple[int, ...], ...]
    last: tuple[tuple[int, ...], ...]
    shapes: tuple[np.ndarray, ...]
    times: np.ndarray
    seconds: np.ndarray
    lock: threading.Lock


_LEVELS: dict[tuple[int, tuple[tuple[bool, ...], ...]], tuple[UnitProgram, LevelProgram]] = {}
MAX_KEPT = 8  # graphs kept at once (ZB-V at PP 64 and 384 microbatches: 20 MB, measured)


def level_program(program: UnitProgram, sends: tuple[tuple[bool, ...], ...],
                  schedule: str) -> LevelProgram:
    """The graph of ``program`` with the send pattern ``sends`` (per lane and boundary:
    whether its transfer takes time), kept per program and pattern."""
    kept = _LEVELS.get((id(program), sends))
    if kept is not None and kept[0] is program:
        return kept[1]
    graphs: dict[tuple[bool, ...], _LaneGraph] = {}  # one graph per pattern (blocking: one)
    for pattern in sends:
        if pattern not in graphs:
            graphs[pattern] = _lane_graph(program, pattern, schedule)
    built = _merged([graphs[pattern] for pattern in sends], program)
    if len(_LEVELS) >= MAX_KEPT:
        _LEVELS.clear()
    _LEVELS[(id(program), sends)] = (program, built)
    return built


def _lane_graph(program: UnitProgram, sends: tuple[bool, ...], schedule: str) -> _LaneGraph:
    """One lane's graph (``_LaneGraph``) of a program and send pattern: the program's
    units in the unit walk's order (``walk_program``'s: a rank runs its units until one waits
    for an input not made yet), a node per unit and per transfer that takes time; a node of
    one predecessor is folded into its successors (module docstring)."""
    hop = len(program.shapes)  # seconds index of boundary b: hop + b
    preds: list[list[int]] = []
    terms: list[tuple[int, ...]] = []
    level: list[int] = []
    copies: dict[tuple[int, tuple[int, ...]], int] = {}

    def node(before: list[int], seconds: tuple[int, ...]) -> int:
        preds.append(before)
        terms.append(seconds)
        level.append(1 + max([level[p] if p >= 0 else -1 for p in before]))
        return len(level) - 1

    def ref(at: int, extra: tuple[int, ...] = ()) -> int:
        """What a successor reads for ``at``'s time plus the seconds ``extra``: a node of one
        predecessor folded into it (its seconds carried, up to ``FOLD``), a copy of the node
        with ``extra`` added where there are any (the same predecessors: the same level), or
        where that would carry more than ``FOLD`` seconds a node after it adding ``extra``."""
        while at >= 0 and len(preds[at]) == 1 and len(terms[at]) + len(extra) <= FOLD:
            at, extra = preds[at][0], terms[at] + extra
        if not extra:
            return at
        copy = copies.get((at, extra))
        if copy is None:
            copy = copies[(at, extra)] = (
                node([at], extra) if at < 0 or len(terms[at]) + len(extra) > FOLD else
                node(preds[at], terms[at] + extra))
        return copy

    pp = len(program.steps)
    outputs: dict[int, tuple[int, int, int]] = {}  # key -> (unit, stream before, boundary)
    last_unit, last_sent = [ZERO] * pp, [ZERO] * pp
    backward, pointer, queued = [NONE] * pp, [0] * pp, [True] * pp
    woken = list(range(pp - 1, -1, -1))
    while woken:
        rank = woken.pop()
        queued[rank] = False
        steps, k = program.steps[rank], pointer[rank]
        while k < len(steps):
            first, rest, shape, outs, is_backward = steps[k]
            if first >= 0 and (first not in outputs
                               or (rest and any(key not in outputs for key in rest))):
                break
            before = [ref(last_unit[rank])]
            if first >= 0:
                for unit, stream, boundary in map(outputs.pop, (first, *rest)):
                    if stream == NONE:  # made on the rank, or on a boundary sending nothing
                        before.append(ref(unit))
                    else:  # arrival: max(unit end, stream before) + hop, each plus the hop
                        before += [ref(unit, (hop + boundary,)), ref(stream, (hop + boundary,))]
                # a predecessor read twice (a W's input, the I before it) read once
                before = list(dict.fromkeys(before))
            unit = last_unit[rank] = node(before, (shape,))
            if is_backward:
                backward[rank] = unit
            for key, boundary, to in outs:
                if boundary < 0 or not sends[boundary]:  # the stream as it was
                    outputs[key] = (unit, NONE, boundary)
                else:
                    outputs[key] = (unit, last_sent[rank], boundary)
                    last_sent[rank] = node([ref(unit), ref(last_sent[rank])],
                                           (hop + boundary,))
                if boundary >= 0 and not queued[to]:
                    queued[to] = True
                    woken.append(to)
            k += 1
        pointer[rank] = k
    if any(k < len(steps) for k, steps in zip(pointer, program.steps, strict=True)):
        raise ConfigError(f"pipeline: the {schedule} orders deadlock")
    zero = hop + len(sends)
    return _LaneGraph(np.array(list(zip_longest(*preds, fillvalue=NONE)), dtype=np.int64),
                      np.array(list(zip_longest(*terms, fillvalue=zero)), dtype=np.int64),
                      np.array(level, dtype=np.int64), tuple(backward), tuple(last_unit), zero)


def _placed(nodes: np.ndarray, offset: int, count: int) -> np.ndarray:
    """A lane's node indices ``nodes`` in the merged numbering of ``count`` nodes: its own
    nodes ``offset`` on, ``NONE`` the -inf slot ``count``, ``ZERO`` the 0 slot ``count + 1``."""
    return np.where(nodes >= 0, nodes + offset, np.where(nodes == NONE, count, count + 1))


def _merged(lanes: list[_LaneGraph], program: UnitProgram) -> LevelProgram:
    """The two lanes' graphs as one (``LevelProgram``), numbered level by level."""
    sizes = [len(lane.level) for lane in lanes]
    count = sum(sizes)
    width = max(len(lane.preds) for lane in lanes)
    most = max(len(lane.terms) for lane in lanes)
    stride = lanes[0].zero + 1  # lane 1's seconds after lane 0's
    preds = np.full((width, count), count, dtype=np.int64)
    terms = np.full((most, count), lanes[0].zero, dtype=np.int64)
    offsets = (0, sizes[0])
    ends: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    for lane, (graph, offset) in enumerate(zip(lanes, offsets, strict=True)):
        part = slice(offset, offset + len(graph.level))
        given = graph.preds
        preds[:len(given), part] = _placed(given, offset, count)
        real = graph.terms != graph.zero
        terms[:len(graph.terms), part] = np.where(real, graph.terms + lane * stride,
                                                  lanes[0].zero)
        ends.append(tuple(tuple(_placed(np.array(nodes), offset, count).tolist())
                          for nodes in (graph.backward, graph.last)))
    level = np.concatenate([lane.level for lane in lanes])
    order = np.argsort(level, kind="stable")
    number = np.empty(count + 2, dtype=np.int64)
    number[order] = np.arange(count)
    number[count], number[count + 1] = count, count + 1
    preds, terms, level = number[preds[:, order]], terms[:, order], level[order]
    weights = [(np.arange(count), terms[0])]
    for j in range(1, most):
        has = np.flatnonzero(terms[j] != lanes[0].zero)
        weights.append((has, terms[j][has]))
    bounds = (0, *(np.flatnonzero(np.diff(level)) + 1).tolist(), count)
    times, seconds = np.empty(count + 2), np.empty(count)
    times[count], times[count + 1] = -np.inf, 0.0
    backward = tuple(tuple(number[list(nodes)].tolist()) for nodes, _ in ends)
    return LevelProgram(
        tuple(preds[:, list(nodes)] for nodes in backward), tuple(weights),
        tuple((*_level(preds[:, a:b], count), times[a:b], seconds[a:b])
              for a, b in pairwise(bounds)),
        backward, tuple(tuple(number[list(nodes)].tolist()) for _, nodes in ends),
        _tables(program)[0], times, seconds, threading.Lock())


def _level(preds: np.ndarray, count: int) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """A level's predecessor slots as the walk reads them: the first, and the others that
    hold any predecessor (a slot of -inf alone, ``count``, is left out), each contiguous."""
    used = [np.ascontiguousarray(slot) for slot in preds if (slot != count).any()]
    return (used or [preds[0].copy()])[0], tuple(used[1:])


_TABLES: dict[int, tuple[UnitProgram, tuple[np.ndarray, ...], np.ndarray]] = {}


def _tables(program: UnitProgram) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """``_shape_table`` of ``program`` and its per-rank shape counts (ranks x shapes), kept
    per program object."""
    kept = _TABLES.get(id(program))
    if kept is not None and kept[0] is program:
        return kept[1], kept[2]
    if len(_TABLES) >= 4 * MAX_KEPT:
        _TABLES.clear()
    table, counts = _shape_table(program), np.array(program.counts, dtype=float)
    _TABLES[id(program)] = (program, table, counts)
    return table, counts


def shape_bound(program: UnitProgram, lane: Any) -> float:
    """``unit_walk.unit_bound`` of ``lane`` at once: the busiest rank's units one after
    another, each shape's seconds (``shape_seconds``) times its count on the rank (seconds)."""
    table, counts = _tables(program)
    return float((counts * shape_seconds(program, table, lane)).sum(axis=1).max())


def _shape_table(program: UnitProgram) -> tuple[np.ndarray, ...]:
    """Per unit shape and action slot (3: a shape holds at most F, I and W): the index of the
    action's seconds in ``forward + backward + (0,)`` and its kind (0 F, 1 I, 2 W, 3 B, 4
    none); the stages of its forward and of its first backward action (``stages``: none)."""
    slots = max(len(unit) for unit in program.shapes)
    index = np.zeros((len(program.shapes), slots), dtype=np.int64)
    kind = np.full((len(program.shapes), slots), 4, dtype=np.int64)
    forward = np.full(len(program.shapes), -1, dtype=np.int64)
    backward = np.full(len(program.shapes), -1, dtype=np.int64)
    for i, unit in enumerate(program.shapes):
        for j, action in enumerate(unit):
            kind[i, j] = "FIWB".index(action.kind)
            index[i, j] = action.stage if action.kind == "F" else -1 - action.stage
        forward[i] = next((a.stage for a in unit if a.kind == "F"), -1)
        backward[i] = next((a.stage for a in unit if a.kind != "F"), -1)
    return index, kind, forward, backward


def shape_seconds(program: UnitProgram, table: tuple[np.ndarray, ...],
                  lane: Any) -> np.ndarray:
    """``unit_walk.unit_seconds`` of every shape of ``program`` for ``lane``, at once: the
    actions' seconds summed in order (F its forward, I ``input_fraction`` of its backward, W
    the rest, B all of it), an overlapped pair (F with I) ``max(compute, communication)``;
    ``pair_seconds[f][b]`` where the replica has them."""
    index, kind, forward, backward = table
    stages = len(lane.forward)
    pairs = getattr(lane, "pair_seconds", ())
    if pairs:
        return np.array(pairs)[np.where(forward >= 0, forward, stages),
                               np.where(backward >= 0, backward, stages)]
    share = lane.input_fraction
    seconds = np.array([*lane.forward, *lane.backward, 0.0])
    scale = np.array([1.0, share, 1 - share, 1.0, 0.0])
    # F reads forward[s] (index s), a backward action backward[s] (index -1 - s: stages + s)
    where = np.where(index >= 0, index, stages - 1 - index)
    where = np.where(kind == 4, 2 * stages, where)
    terms = seconds[where] * scale[kind]
    total = np.zeros(len(index))
    for j in range(index.shape[1]):
        total = total + terms[:, j]
    paired = (forward >= 0) & (kind == 1).any(axis=1)
    if not paired.any():
        return total
    first_i = np.where(kind == 1, -1 - index, stages).min(axis=1)  # the pair's I stage
    fc = np.array([*lane.forward_comm, 0.0]) if lane.forward_comm else np.zeros(stages + 1)
    bc = np.array([*lane.backward_comm, 0.0]) if lane.backward_comm else np.zeros(stages + 1)
    comm = fc[np.where(forward >= 0, forward, stages)] + bc[first_i]
    return np.where(paired, np.maximum(total - comm, comm), total)


def walk_levels(program: UnitProgram, pair: tuple[Any, Any], schedule: str,
                seconds: Callable[[Any, tuple[Action, ...]], float]) -> list[Walked]:
    """Both lanes of ``pair`` (replicas of one layout, each with its seconds and ``send``):
    per rank the start and end of its last backward unit and the replica's end, as
    ``unit_program.walk_program`` gives them (module docstring). ``seconds`` prices a unit
    as ``shape_seconds`` does (``unit_walk.unit_seconds``, which the tests compare)."""
    del seconds  # the shapes are priced at once (shape_seconds)
    sends = tuple(tuple(s > 0 for s in lane.send) for lane in pair)
    levels = level_program(program, sends, schedule)
    table = np.array([[*shape_seconds(program, levels.shapes, lane).tolist(), *lane.send, 0.0]
                      for lane in pair]).reshape(-1)
    with levels.lock:
        times, weights = levels.times, levels.seconds
        table.take(levels.weights[0][1], out=weights)
        for nodes, terms in levels.weights[1:]:
            weights[nodes] += table.take(terms)
        take, maximum, add = times.take, np.maximum, np.add
        for first, rest, out, seconds_ in levels.levels:
            latest = take(first)
            for preds in rest:  # the latest of the predecessors (one maximum per slot: 1.3 us
                maximum(latest, take(preds), out=latest)  # against 2.5 for a reduction)
            add(latest, seconds_, out=out)
        walked = []
        for preds, backward, last in zip(levels.preds, levels.backward, levels.last,
                                         strict=True):
            starts = times.take(preds).max(axis=0)
            walked.append((tuple(starts.tolist()), tuple(times[list(backward)].tolist()),
                           float(times[list(last)].max())))
    return walked


def walk_level_lanes(program: UnitProgram, lanes: Sequence[Any], schedule: str,
                     seconds: Callable[[Any, tuple[Action, ...]], float]) -> list[Walked]:
    """``walk_levels`` of each of ``lanes``, two at a time."""
    out = []
    for first in range(0, len(lanes), 2):
        pair = (lanes[first], lanes[min(first + 1, len(lanes) - 1)])
        out += walk_levels(program, pair, schedule, seconds)[:len(lanes) - first]
    return out
