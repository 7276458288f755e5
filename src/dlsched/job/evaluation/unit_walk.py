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
This is the simulator's timing exactly, which runs the same units and hides the same
communication (``Chain.overlap_seconds``, ``job.evaluation.pipeline_time.event_pipeline``):
``tests/job/test_unit_walk.py`` holds them equal on random replicas, ``test_plan_dualpipe.py``
on whole plans with expert all-to-alls.

Megatron-Core's 1F1B with the EP All-to-All overlap (``--overlap-moe-expert-parallel-comm``,
``job.evaluation.a2a_overlap``) is walked here too (``unit_walked``): its replica's times carry
``pair_seconds``, and ``merged_layout`` gives its units, 1F1B (one rank) or interleaved 1F1B
whose steady-state forward and backward run as one merged unit, priced by that table.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

from dlsched.errors import ConfigError
from dlsched.job.evaluation.pipeline_orders import rank_orders
from dlsched.job.evaluation.unit_levels import shape_bound, walk_level_lanes
from dlsched.job.evaluation.unit_program import unit_program, units_of, walk_program
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
"""Schedules walked here; each holds two stages per rank. The job planner runs them only when
``--schedule`` names one (its search keeps to the others)."""
UNIT_CHUNKS = {"zb-v": 2, "dualpipe": 1, "dualpipev": 2}
"""Chunks (virtual stages per rank, ``Execution.chunks``) of each: the two halves of a V, or
one stage per direction on ``pp`` stages for DualPipe (whose rank holds two of them)."""


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


def held_stages(schedule: str, pp: int, chunks: int, rank: int) -> tuple[int, ...]:
    """The virtual stages pipeline rank ``rank`` holds, chunk by chunk: ``c x pp + rank``
    (Megatron-LM's interleaving) for every schedule but ZB-V and DualPipeV (``rank`` and ``2 pp
    - 1 - rank``, a V) and DualPipe (``rank`` and ``pp - 1 - rank``, one per direction: twice
    the parameters of one stage, DeepSeek-V3 report Table 2)."""
    if schedule == "dualpipe":
        return (rank, pp - 1 - rank)
    if schedule in UNIT_SCHEDULES:
        return (rank, 2 * pp - 1 - rank)
    return tuple(c * pp + rank for c in range(chunks))


def microbatch_share(schedule: str) -> float:
    """The share of a rank's layers one microbatch passes through: 1/2 for DualPipe (it runs
    one of the rank's two stages, the one of its direction), 1 for every other schedule."""
    return 0.5 if schedule == "dualpipe" else 1.0


@lru_cache(maxsize=256)
def held_in_flight(schedule: str, pp: int, num_microbatches: int,
                   rank: int) -> tuple[tuple[int, ...], ...]:
    """Chunk-microbatches whose activations ``rank`` holds after each forward and weight
    gradient of its order, per chunk of ``held_stages`` (stashed by F, freed by W; a pair's
    forward stashes before its backward frees, as both run together)."""
    layout = unit_layout(schedule, pp, num_microbatches)
    chunk = {s: c for c, s in enumerate(held_stages(schedule, pp, 2, rank))}
    counts, held = [0, 0], []
    for action in layout.orders[rank]:
        if action.kind in "FW":
            counts[chunk[action.stage]] += 1 if action.kind == "F" else -1
            held.append(tuple(counts))
    return tuple(held)


def check_unit_schedule(schedule: str, pp: int, num_microbatches: int,
                        chunks: int | None = None) -> None:
    """ConfigError when ``schedule`` cannot run ``num_microbatches`` on ``pp`` ranks (with
    ``chunks`` other than ``UNIT_CHUNKS``' when given): ZB-V needs two ranks or more, DualPipe
    and DualPipeV what ``dualpipe.check_dualpipe`` asks."""
    if chunks is not None and chunks != UNIT_CHUNKS[schedule]:
        raise ConfigError(f"the {schedule} schedule runs {UNIT_CHUNKS[schedule]} "
                          f"chunk(s) per rank (got {chunks}); accepted: "
                          f"{UNIT_CHUNKS[schedule]}", "chunks")
    if pp < 2:
        raise ConfigError(f"the {schedule} schedule needs 2 or more pipeline ranks "
                          f"(got {pp})", "pp")
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


class Times(Protocol):
    """What the walk reads of a replica (``UnitTimes``, or the job's ``PipelineTimes``)."""

    schedule: str
    pp: int
    num_microbatches: int
    forward: tuple[float, ...]
    backward: tuple[float, ...]
    send: tuple[float, ...]
    input_fraction: float
    forward_comm: tuple[float, ...]
    backward_comm: tuple[float, ...]


def unit_walked(times: Times) -> bool:
    """Whether ``times`` is walked in units here: a ZB-V, DualPipe or DualPipeV replica, or one
    whose forward and backward run merged (``pair_seconds``: ``job.evaluation.a2a_overlap``)."""
    return times.schedule in UNIT_SCHEDULES or bool(getattr(times, "pair_seconds", ()))


@lru_cache(maxsize=256)
def merged_layout(schedule: str, pp: int, chunks: int, num_microbatches: int) -> UnitLayout:
    """Megatron-Core's combined 1F1B (``pipeline_parallel/combined_1f1b.py``) on one replica:
    each rank's 1F1B or interleaved order (``pipeline_orders.rank_orders``, Megatron-LM's) with
    its warm-up forwards alone (one more than the plain schedule's: ``get_pp_rank_microbatches``
    adds one when the overlap is on, so that a merged step's forward and backward never depend
    on each other), then each further forward merged with the next backward in order into one
    unit, then the remaining backwards alone."""
    stages = tuple(Stage(s, s + 1, (s % pp,)) for s in range(pp * chunks))
    orders, joined = [], []
    for order in rank_orders(schedule, pp, chunks, num_microbatches):
        forwards = [a for a in order if a.kind == "F"]
        backwards = [a for a in order if a.kind != "F"]
        warm = next(i for i, a in enumerate(order) if a.kind != "F")  # plain warm-up + 1
        merged = min(len(forwards) - warm, len(backwards))
        rank: list[Action] = forwards[:warm]
        pairs = set()
        for k in range(merged):
            pairs.add(len(rank))  # the forward joins the backward after it
            rank += [forwards[warm + k], backwards[k]]
        rank += forwards[warm + merged:] + backwards[merged:]
        orders.append(tuple(rank))
        joined.append(frozenset(pairs))
    return UnitLayout(stages, tuple(orders), tuple(joined))


def layout_of(times: Times) -> UnitLayout:
    """The units ``times`` is walked in (``unit_layout``, or ``merged_layout`` when its pairs
    are priced)."""
    if getattr(times, "pair_seconds", ()):
        return merged_layout(times.schedule, times.pp, len(times.forward) // times.pp,
                             times.num_microbatches)
    return unit_layout(times.schedule, times.pp, times.num_microbatches)


@dataclass(frozen=True)
class UnitTimes:
    """Per-stage seconds of one microbatch: ``forward`` / ``backward`` (compute and the
    chunk's own communication), of which ``forward_comm`` / ``backward_comm`` (empty: none)
    is that communication; ``send[s]`` the transfer between stage ``s`` and ``s + 1``."""

    schedule: str
    pp: int
    num_microbatches: int
    forward: tuple[float, ...]
    backward: tuple[float, ...]
    send: tuple[float, ...]
    input_fraction: float
    forward_comm: tuple[float, ...] = ()
    backward_comm: tuple[float, ...] = ()


def unit_seconds(times: Times, unit: tuple[Action, ...]) -> float:
    """Seconds of ``unit``: its actions one after another, or an overlapped pair's ``max``
    of compute and communication (module docstring); from ``pair_seconds`` (forward stage,
    backward stage; ``len(stages)`` for none) when the replica has them."""
    table = getattr(times, "pair_seconds", ())
    if table:
        none = len(times.forward)
        forward = next((a.stage for a in unit if a.kind == "F"), none)
        backward = next((a.stage for a in unit if a.kind != "F"), none)
        return table[forward][backward]
    total = _one_after_another(times, unit)
    forward = [a.stage for a in unit if a.kind == "F"]
    backward = [a.stage for a in unit if a.kind == "I"]
    if not (forward and backward):
        return total
    comm = _comm(times.forward_comm, forward[0]) + _comm(times.backward_comm, backward[0])
    return max(total - comm, comm)


def _one_after_another(times: Times, unit: tuple[Action, ...]) -> float:
    """Seconds of ``unit``'s actions run one after another (I: ``input_fraction`` of the
    backward, W the rest, B all of it)."""
    share = {"I": times.input_fraction, "W": 1 - times.input_fraction, "B": 1.0}
    return sum(times.forward[a.stage] if a.kind == "F" else times.backward[a.stage]
               * share[a.kind] for a in unit)


def _comm(seconds: tuple[float, ...], stage: int) -> float:
    return seconds[stage] if seconds else 0.0


def rank_units(times: Times, rank: int) -> list[tuple[Action, ...]]:
    """Rank ``rank``'s units in order."""
    layout = layout_of(times)
    return units_of(layout.orders[rank], layout.joined[rank])


def hidden_comm(times: Times, rank: int) -> float:
    """Seconds of communication rank ``rank``'s overlapped pairs hide in one iteration (0
    for the schedules walked elsewhere)."""
    if not unit_walked(times):
        return 0.0
    return sum(_one_after_another(times, unit) - unit_seconds(times, unit)
               for unit in rank_units(times, rank))


def unit_bound(times: Times) -> float:
    """A lower bound on the replica: the busiest rank's units, one after another (each
    shape's seconds times its units, ``unit_program``; ZB-V, DualPipe and DualPipeV with
    numpy, ``unit_levels.shape_bound``, to rounding; the merged 1F1B steps as before)."""
    program = unit_program(layout_of(times))
    if not getattr(times, "pair_seconds", ()):
        return shape_bound(program, times)
    seconds = [unit_seconds(times, unit) for unit in program.shapes]
    return max(sum(n * s for n, s in zip(counts, seconds, strict=True))
               for counts in program.counts)


def walk_units(times: Times) -> tuple[tuple[float, ...], tuple[float, ...], float]:
    """Per rank the start and end of its last backward unit, and the replica's end
    (seconds): every rank runs its units in order, each when the rank is free and its
    inputs are there (module docstring)."""
    return walk_unit_lanes((times,))[0]


def walk_unit_lanes(lanes: tuple[Times, ...]) -> list[tuple[tuple[float, ...],
                                                             tuple[float, ...], float]]:
    """``walk_units`` of each of ``lanes`` (replicas of one schedule, degree and microbatch
    count, each with its own seconds and sends) from one walk: the units run in an order set
    by the orders alone, so every time the walk keeps is one per lane, each computed as the
    walk of that lane alone computes it (``unit_program.walk_program``: the layout compiled
    once into what the walk reads of each unit, each unit shape's seconds priced once): ZB-V,
    DualPipe and DualPipeV all ranks' units of one dependency level at once
    (``unit_levels.walk_level_lanes``, equal to the unit-by-unit walk to 1e-9); Megatron-Core's
    merged 1F1B steps (``pair_seconds``, ledger rows) unit by unit (``unit_program.
    walk_program``, the level walk's reference in the tests), bit for bit as before."""
    times = lanes[0]
    walk = walk_program if getattr(times, "pair_seconds", ()) else walk_level_lanes
    return walk(unit_program(layout_of(times)), lanes, times.schedule, unit_seconds)
