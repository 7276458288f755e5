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
split into input and weight gradients at ``input_fraction``). ZB-V, DualPipe and DualPipeV place
their stages in a V or in two directions and run overlapped F & B pairs as units: both walks
hand them to ``job.evaluation.unit_walk``, and the simulation runs the same units with the
stages' all-to-alls as ``Chain.overlap_seconds``.

``walk_pipeline`` (``job.evaluation.pipeline_walk``) walks the per-rank orders once, starting
each action when its rank is free and its input has arrived: an exact longest path through the
schedule's dependency graph, in time linear in its actions, with no event queue and one replica
instead of ``dp`` (the simulator's cost grows with both); ``replica_timings``
(``job.evaluation.pipeline_steady``) gives the same timing, and the one of the replica without
its transfers, from one walk of only the warm-up, the steady state's rounds until they repeat
and the cool-down (its cost independent of the microbatches); ``fast_pipeline`` one lane of it.
``event_pipeline`` runs the same replica through ``pipeline.simulate`` (links with FIFO
streams and per-GPU NICs); the property test ``tests/job/test_pipeline_time.py`` holds the
two within 1%. ``one_f_one_b_closed_form`` is the textbook ``(m + p - 1)(f + b) + 2 (p - 1) c``
of identical stages: exact without transfers (the check of both), a lower bound with them (it
leaves out the steady state's waits on transfers).
"""

from __future__ import annotations

import numpy as np

from dlsched.errors import ConfigError
from dlsched.hardware.device_graph import Device, DeviceGraph
from dlsched.job.evaluation.pipeline_orders import rank_orders
from dlsched.job.evaluation.pipeline_steady import fast_pipeline, replica_timings
from dlsched.job.evaluation.pipeline_walk import (
    PipelineTimes,
    ReplicaTiming,
    walk_pipeline,
)
from dlsched.job.evaluation.unit_walk import UNIT_SCHEDULES, unit_layout
from dlsched.pipeline.chains.chain import Chain
from dlsched.pipeline.chains.problem import PipelineProblem
from dlsched.pipeline.plans.plan import PipelinePlan, Stage
from dlsched.pipeline.simulation.sim_result import SimResult
from dlsched.pipeline.simulation.simulate import simulate
from dlsched.sim.timeline import Timeline

EVENT_RATE = 1e12  # FLOP/s of the simulator's stand-in GPUs: FLOP = seconds x this rate
EVENT_BANDWIDTH = 1e9  # B/s of its links: bytes = seconds x this bandwidth


def _simulated(times: PipelineTimes) -> SimResult:
    """The replica run by the pipeline simulator (``pipeline.simulate``): stand-in GPUs of
    ``EVENT_RATE`` FLOP/s and links of ``EVENT_BANDWIDTH`` B/s without latency carry the
    seconds given, so only the schedule's execution differs from ``fast_pipeline``."""
    stages_n = times.pp * times.chunks
    if times.pair_seconds:
        raise ConfigError("event_pipeline: Megatron-Core's merged EP-overlap steps "
                          "(pair_seconds) are walked by unit_walk only; accepted: the fast walk")
    if len(set(times.send)) > 1:
        raise ConfigError("event_pipeline: one send time for every stage boundary")
    sent = times.send[0] if times.send else 0.0
    chain = Chain("job", tuple(f"stage{s}" for s in range(stages_n)),
                  np.array(times.forward) * EVENT_RATE, np.array(times.backward) * EVENT_RATE,
                  np.full(stages_n, sent * EVENT_BANDWIDTH), np.zeros(stages_n),
                  np.zeros(stages_n), input_grad_fraction=times.input_fraction,
                  overlap_seconds=np.column_stack([times.forward_comm or np.zeros(stages_n),
                                                   times.backward_comm or np.zeros(stages_n)]))
    devices = tuple(Device(f"rank{k}", EVENT_RATE, 2**40) for k in range(times.pp))
    graph = DeviceGraph("replica", devices, np.full((times.pp, times.pp), EVENT_BANDWIDTH),
                        np.zeros((times.pp, times.pp)))
    problem = PipelineProblem(chain, graph, times.num_microbatches, ("none",))
    if times.schedule in UNIT_SCHEDULES:  # a V or two directions, units (job.unit_walk)
        layout = unit_layout(times.schedule, times.pp, times.num_microbatches)
        plan = PipelinePlan("job", layout.stages, layout.orders, times.num_microbatches,
                            joined=layout.joined)
        return simulate(problem, plan)
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
        if span.kind in ("backward", "backward-input", "backward-weight") \
                and span.end >= ends[_rank(span)]:
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


__all__ = ["PipelineTimes", "ReplicaTiming", "event_pipeline", "event_timeline",
           "fast_pipeline", "one_f_one_b_closed_form", "rank_orders", "replica_timings",
           "walk_pipeline"]
