"""The fast walk of a replica whose schedule places stages in a V or in two directions and may
run actions as units: ZB-V, DualPipe and DualPipeV (``UNIT_SCHEDULES``).

``unit_layout`` gives the pipeline domain's stages and orders for one replica of ``pp`` ranks:
ZB-V (``pipeline.plans.schedules.zb_v_orders``) and DualPipeV (``pipeline.plans.dualpipe``) on
``2 pp`` virtual stages in a V (stage ``s`` on rank ``s`` going down, ``2 pp - 1 - s`` coming
up), DualPipe on ``pp`` stages of two copies (stage ``s`` on ranks ``s`` and ``pp - 1 - s``,
even microbatches in the forward direction, odd ones in the reverse), backwards split into
input gradient (``input_fraction`` of the backward) and weight gradient.

``walk_units`` times it the way ``pipeline.simulate`` runs it: a unit (one action, a full
backward ``I W`` or an overlapped pair ``F & B``, ``PipelinePlan.joined``) starts when its rank
is free and every input of it has arrived, and sends its outputs when it ends, one transfer at
a time per rank (the simulator's FIFO stream). An overlapped pair runs the forward chunk of one
microbatch beside the backward chunk of another: each chunk's own communication (the MoE
layers' dispatch and combine all-to-alls, ``forward_comm`` / ``backward_comm`` seconds of the
stage's forward and backward) hides behind the other's compute, so the pair takes ``max(compute
of both, communication of both)`` (DeepSeek-V3 report, section 3.2.1: "both all-to-all and PP
communication can be fully hidden"); alone, a chunk takes its compute plus its communication.
Without communication to hide this is the simulator's timing exactly (the property test
``tests/job/test_unit_walk.py`` holds them equal); the pipeline domain has no in-chunk
communication, so the hiding is checked by hand there.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from dlsched.errors import ConfigError
from dlsched.pipeline.plans.actions import Action
from dlsched.pipeline.plans.dualpipe import (
    check_dualpipe,
    dualpipe_units,
    dualpipev_units,
    flatten,
)
from dlsched.pipeline.plans.plan import Stage
from dlsched.pipeline.plans.schedules import zb_v_orders

UNIT_SCHEDULES = ("zb-v", "dualpipe", "dualpipev")
"""Schedules walked here; each holds two stages (chunks) per rank."""


@dataclass(frozen=True)
class UnitLayout:
    """One replica's stages (``Stage.devices`` are ranks), per-rank orders and units."""

    stages: tuple[Stage, ...]
    orders: tuple[tuple[Action, ...], ...]
    joined: tuple[frozenset[int], ...]


def stage_count(schedule: str, pp: int) -> int:
    """Virtual stages of ``schedule`` on ``pp`` ranks: ``2 pp`` in a V, ``pp`` for DualPipe
    (each rank holds two of them, one per direction)."""
    return pp if schedule == "dualpipe" else 2 * pp


def check_unit_schedule(schedule: str, pp: int, num_microbatches: int) -> None:
    """ConfigError when ``schedule`` cannot run ``num_microbatches`` on ``pp`` ranks: ZB-V
    needs two ranks or more, DualPipe and DualPipeV what ``dualpipe.check_dualpipe`` asks."""
    if pp < 2:
        raise ConfigError(f"--pp: the {schedule} schedule needs 2 or more pipeline ranks "
                          f"(got {pp})")
    if schedule != "zb-v":
        check_dualpipe(schedule, num_microbatches, pp)


@lru_cache(maxsize=256)
def unit_layout(schedule: str, pp: int, num_microbatches: int) -> UnitLayout:
    """The stages and orders of ``schedule`` (module docstring), kept per arguments."""
    check_unit_schedule(schedule, pp, num_microbatches)
    ranks = tuple((k,) for k in range(pp))
    if schedule == "dualpipe":
        stages = tuple(Stage(s, s + 1, (s, pp - 1 - s)) for s in range(pp))
        return UnitLayout(stages, *flatten(dualpipe_units(num_microbatches, pp)))
    stages = tuple(Stage(s, s + 1, (min(s, 2 * pp - 1 - s),)) for s in range(2 * pp))
    if schedule == "dualpipev":
        return UnitLayout(stages, *flatten(dualpipev_units(num_microbatches, ranks, pp)))
    orders = zb_v_orders(num_microbatches, ranks, pp)
    return UnitLayout(stages, orders, tuple(frozenset() for _ in range(pp)))


@dataclass(frozen=True)
class UnitTimes:
    """Per-stage seconds of one microbatch: ``forward`` / ``backward`` (compute and the
    chunk's own communication), of which ``forward_comm`` / ``backward_comm`` is that
    communication; ``send[s]`` the transfer between stage ``s`` and ``s + 1``."""

    schedule: str
    pp: int
    num_microbatches: int
    forward: tuple[float, ...]
    backward: tuple[float, ...]
    send: tuple[float, ...]
    input_fraction: float
    forward_comm: tuple[float, ...]
    backward_comm: tuple[float, ...]


def unit_seconds(times: UnitTimes, unit: tuple[Action, ...]) -> float:
    """Seconds of ``unit``: its actions one after another, or an overlapped pair's ``max``
    of compute and communication (module docstring)."""
    share = times.input_fraction
    seconds = {"F": lambda s: times.forward[s], "I": lambda s: times.backward[s] * share,
               "W": lambda s: times.backward[s] * (1 - share)}
    total = sum(seconds[a.kind](a.stage) for a in unit)
    forward = [a.stage for a in unit if a.kind == "F"]
    backward = [a.stage for a in unit if a.kind == "I"]
    if not (forward and backward):
        return total
    comm = times.forward_comm[forward[0]] + times.backward_comm[backward[0]]
    return max(total - comm, comm)


def walk_units(times: UnitTimes) -> tuple[tuple[float, ...], tuple[float, ...], float]:
    """Per rank the start and end of its last backward unit, and the replica's end
    (seconds): every rank runs its units in order, each when the rank is free and its
    inputs are there (module docstring)."""
    layout = unit_layout(times.schedule, times.pp, times.num_microbatches)
    stages, last, pp = layout.stages, len(layout.stages) - 1, times.pp
    inputs: dict[tuple[str, int, int], float] = {}  # (kind, stage, microbatch) -> ready at
    free, link = [0.0] * pp, [0.0] * pp
    last_start, last_end = [0.0] * pp, [0.0] * pp
    pointer = [0] * pp
    units = [_units(order, joined) for order, joined in zip(layout.orders, layout.joined,
                                                            strict=True)]
    progressed = True
    while progressed:
        progressed = False
        for rank in range(pp):
            while pointer[rank] < len(units[rank]):
                unit = units[rank][pointer[rank]]
                ready = _ready(unit, inputs)
                if ready is None:
                    break
                start = max(free[rank], ready)
                free[rank] = end = start + unit_seconds(times, unit)
                for action in unit:
                    _outputs(action, rank, end, (stages, last, times.send, link), inputs)
                if any(a.kind != "F" for a in unit):
                    last_start[rank], last_end[rank] = start, end
                pointer[rank] += 1
                progressed = True
    if any(p < len(u) for p, u in zip(pointer, units, strict=True)):
        raise ConfigError(f"pipeline: the {times.schedule} orders deadlock")
    return tuple(last_start), tuple(last_end), max(free)


def _units(order: tuple[Action, ...], joined: frozenset[int]) -> list[tuple[Action, ...]]:
    units, start = [], 0
    for i in range(len(order)):
        if i not in joined:
            units.append(order[start:i + 1])
            start = i + 1
    return units


def _ready(unit: tuple[Action, ...], inputs: dict) -> float | None:
    """When every input of ``unit`` is there (None: not yet); a W's input is its I, which
    may run in the same unit."""
    ready = 0.0
    for a in unit:
        if a.kind == "W" and Action(a.stage, "I", a.microbatch) in unit:
            continue
        if a.kind == "F" and a.stage == 0:
            continue
        at = inputs.get((a.kind, a.stage, a.microbatch))
        if at is None:
            return None
        ready = max(ready, at)
    return ready


def _outputs(action: Action, rank: int, end: float, where: tuple, inputs: dict) -> None:
    """Record what ``action`` (ended at ``end`` on ``rank``) makes ready: the next stage's
    F (or the last stage's I), the previous stage's I, its own W; a transfer to another rank
    leaves on the rank's stream after the ones before it."""
    stages, last, send, link = where
    s, j = action.stage, action.microbatch
    if action.kind == "W":
        return
    if action.kind == "I":
        inputs[("W", s, j)] = end
        if s == 0:
            return
        target, seconds = ("I", s - 1, j), send[s - 1]
    elif s == last:
        inputs[("I", s, j)] = end
        return
    else:
        target, seconds = ("F", s + 1, j), send[s]
    if stages[target[1]].device_for(j) == rank or seconds <= 0:
        inputs[target] = end
        return
    link[rank] = max(link[rank], end) + seconds
    inputs[target] = link[rank]
