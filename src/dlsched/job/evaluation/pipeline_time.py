"""One pipeline replica's iteration: fast, and by the pipeline simulator to check it.

Every data-parallel replica of a layout runs the same pipeline on its own GPUs and links, so one
replica is timed. Its ``pp`` ranks hold ``pp x chunks`` virtual stages (stage ``s`` on rank ``s
% pp``, Megatron-LM's interleaving), each running ``forward[s]`` / ``backward[s]`` seconds per
microbatch; a transfer from stage ``s`` to ``s + 1`` (activation) or back (gradient) takes
``send[s]`` seconds and the transfers a rank sends leave one at a time (one stream per GPU, as
the simulator's FIFO streams); transfers arriving at one rank do not slow each other (the
simulator's ranks are given one server, whose links are per pair: a NIC's ingress shared by an
activation and a gradient arriving together is not modelled). The schedules are the pipeline
domain's orders (``pipeline.schedules``: GPipe, 1F1B, interleaved 1F1B, ZB-H1 with the backward
split into input and weight gradients at ``input_fraction``).

``fast_pipeline`` walks the per-rank orders once, starting each action when its rank is free and
its input has arrived: an exact longest path through the schedule's dependency graph, in time
linear in its actions, with no event queue and one replica instead of ``dp`` (the simulator's
cost grows with both). ``event_pipeline`` runs the same replica through ``pipeline.simulate``
(links with FIFO streams and per-GPU NICs); the property test
``tests/job/test_pipeline_time.py`` holds the two within 1%. ``one_f_one_b_closed_form`` is the
textbook ``(m + p - 1)(f + b) + 2 (p - 1) c`` of identical stages: exact without transfers (the
check of both), a lower bound with them (it leaves out the steady state's waits on transfers).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from dlsched.errors import ConfigError
from dlsched.hardware.device_graph import Device, DeviceGraph
from dlsched.pipeline.chains.chain import Chain
from dlsched.pipeline.chains.problem import PipelineProblem
from dlsched.pipeline.plans.actions import Action
from dlsched.pipeline.plans.plan import PipelinePlan, Stage
from dlsched.pipeline.plans.schedules import (
    gpipe_orders,
    interleaved_orders,
    one_f_one_b_orders,
    zb_h1_orders,
)
from dlsched.pipeline.simulation.sim_result import SimResult
from dlsched.pipeline.simulation.simulate import simulate
from dlsched.sim.timeline import Timeline

EVENT_RATE = 1e12  # FLOP/s of the simulator's stand-in GPUs: FLOP = seconds x this rate
EVENT_BANDWIDTH = 1e9  # B/s of its links: bytes = seconds x this bandwidth


@dataclass(frozen=True)
class PipelineTimes:
    """One replica's per-stage seconds (see the module docstring): ``send[s]`` from stage
    ``s`` to ``s + 1`` (``len = stages - 1``)."""

    pp: int
    chunks: int
    num_microbatches: int
    schedule: str
    forward: tuple[float, ...]
    backward: tuple[float, ...]
    send: tuple[float, ...]
    input_fraction: float = 0.5

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
    raise ConfigError(f"--schedule: {schedule!r} is not accepted; accepted: 1f1b, "
                      "interleaved, gpipe, zb-h1")


KIND_CODES = {"F": 0, "B": 1, "I": 1, "W": 2}


@lru_cache(maxsize=512)
def _coded_orders(schedule: str, pp: int, chunks: int,
                  num_microbatches: int) -> tuple[tuple[tuple[int, int, int], ...], ...]:
    """``rank_orders`` as (stage, kind code, microbatch) triples (``KIND_CODES``: a split
    backward's I takes B's code)."""
    return tuple(tuple((a.stage, KIND_CODES[a.kind], a.microbatch) for a in order)
                 for order in rank_orders(schedule, pp, chunks, num_microbatches))


def fast_pipeline(times: PipelineTimes) -> ReplicaTiming:
    """The replica's timing by one walk through the per-rank orders (module docstring)."""
    pp, m = times.pp, times.num_microbatches
    orders = _coded_orders(times.schedule, pp, times.chunks, m)
    stages = pp * times.chunks
    last = stages - 1
    share = times.input_fraction if times.schedule == "zb-h1" else 1.0
    seconds = (list(times.forward), [b * share for b in times.backward],
               [b * (1 - share) for b in times.backward])
    # the transfer from stage s to s + 1 (and back): 0 between stages on one rank
    hop = [0.0 if (s + 1) % pp == s % pp else times.send[s] for s in range(last)]
    nan = float("nan")
    done = [[nan] * (stages * m) for _ in range(2)]  # F and B (or I) ends
    arrival = [[nan] * (stages * m) for _ in range(2)]  # their inputs' arrivals
    pointer, free, link = [0] * pp, [0.0] * pp, [0.0] * pp
    last_start, last_end = [0.0] * pp, [0.0] * pp
    pending = sum(len(order) for order in orders)
    while pending:
        progressed = pending
        for rank, order in enumerate(orders):
            k, size, now = pointer[rank], len(order), free[rank]
            while k < size:
                s, kind, j = order[k]
                index = s * m + j
                if kind == 0:
                    ready = 0.0 if s == 0 else arrival[0][index]
                elif kind == 2:
                    ready = done[1][index]
                else:
                    ready = done[0][index] if s == last else arrival[1][index]
                if ready != ready:  # nan: not yet produced
                    break
                start = now if now > ready else ready
                now = start + seconds[kind][s]
                if kind == 0:
                    done[0][index] = now
                    if s < last:
                        arrival[0][index + m] = _ship(rank, now, hop[s], link)
                else:
                    if kind == 1:
                        done[1][index] = now
                        if s > 0:
                            arrival[1][index - m] = _ship(rank, now, hop[s - 1], link)
                    last_start[rank], last_end[rank] = start, now
                k += 1
            pending -= k - pointer[rank]
            pointer[rank], free[rank] = k, now
        if pending == progressed:
            raise ConfigError(f"pipeline: the {times.schedule} orders deadlock")
    return ReplicaTiming(tuple(last_start), tuple(last_end), max(free))


def _ship(rank: int, ready: float, seconds: float, link: list[float]) -> float:
    """When a transfer of ``seconds`` leaving ``rank`` at ``ready`` arrives (its stream
    sends one transfer at a time)."""
    if seconds <= 0:
        return ready
    start = ready if ready > link[rank] else link[rank]
    link[rank] = start + seconds
    return link[rank]


def _simulated(times: PipelineTimes) -> SimResult:
    """The replica run by the pipeline simulator (``pipeline.simulate``): stand-in GPUs of
    ``EVENT_RATE`` FLOP/s and links of ``EVENT_BANDWIDTH`` B/s without latency carry the
    seconds given, so only the schedule's execution differs from ``fast_pipeline``."""
    stages_n = times.pp * times.chunks
    if len(set(times.send)) > 1:
        raise ConfigError("event_pipeline: one send time for every stage boundary")
    sent = times.send[0] if times.send else 0.0
    chain = Chain("job", tuple(f"stage{s}" for s in range(stages_n)),
                  np.array(times.forward) * EVENT_RATE, np.array(times.backward) * EVENT_RATE,
                  np.full(stages_n, sent * EVENT_BANDWIDTH), np.zeros(stages_n),
                  np.zeros(stages_n), input_grad_fraction=times.input_fraction)
    devices = tuple(Device(f"rank{k}", EVENT_RATE, 2**40) for k in range(times.pp))
    graph = DeviceGraph("replica", devices, np.full((times.pp, times.pp), EVENT_BANDWIDTH),
                        np.zeros((times.pp, times.pp)))
    problem = PipelineProblem(chain, graph, times.num_microbatches, ("none",))
    stages = tuple(Stage(s, s + 1, (s % times.pp,)) for s in range(stages_n))
    orders = rank_orders(times.schedule, times.pp, times.chunks, times.num_microbatches)
    plan = PipelinePlan("job", stages, orders, times.num_microbatches, {}, "none", 1)
    return simulate(problem, plan)


def event_timeline(times: PipelineTimes) -> Timeline:
    """The simulated replica's timeline (ranks as resources, seconds)."""
    return _simulated(times).timeline


def event_pipeline(times: PipelineTimes) -> ReplicaTiming:
    """``fast_pipeline``'s timing by the pipeline simulator (``_simulated``)."""
    result = _simulated(times)
    starts, ends = [0.0] * times.pp, [0.0] * times.pp
    for span in result.timeline.spans:
        if span.kind in ("B", "I", "W", "backward") and span.end >= ends[_rank(span)]:
            starts[_rank(span)], ends[_rank(span)] = span.start, span.end
    return ReplicaTiming(tuple(starts), tuple(ends), result.iteration_s)


def _rank(span: object) -> int:
    return int(str(span.resource).removeprefix("rank").split("/")[0])


def one_f_one_b_closed_form(pp: int, num_microbatches: int, forward: float, backward: float,
                            send: float) -> float:
    """``(m + p - 1)(f + b) + 2 (p - 1) c`` seconds: 1F1B over ``pp`` identical stages, exact
    without transfers (``send`` 0); with ``send`` seconds per transfer a lower bound (the
    steady state can also wait on transfers: 34.6 s against this 33.6 s at p 4, m 8, f 1 s,
    b 2 s, c 0.1 s)."""
    return ((num_microbatches + pp - 1) * (forward + backward)
            + 2 * (pp - 1) * send)
