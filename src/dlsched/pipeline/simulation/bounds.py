"""Provable lower bounds on the iteration time (seconds).

``plan_bound`` holds for every schedule of a plan's partition and mapping:

* device bound: GPU ``d`` cannot start before the first microbatch reaches its earliest stage
  (``head``: forwards of the stages before it, each on its fastest replica, plus the
  uncontended transfers), then runs all its work; after its last action, the gradient of that
  stage must still drain to stage 0 (``tail``, full backwards, or I only when split) and, for a
  replicated stage, its all-reduce must run (with DDP buckets: the ring of the bucket its last
  backward completes). With a split backward the last I is followed by the
  I-only tail, which gives a second term over the F and I work only;
* heads and tails (one-machine relaxation, after Carlier): every action of GPU ``d`` has a
  release time (the path before it can start: for F of stage ``s`` the forwards before it;
  for B or I also its own forward and the round trip through the later stages) and a tail
  (the path that must follow it: the rest of its microbatch's round trip and the way back to
  stage 0; after a B or W also the stage's all-reduce). For any set of its actions, the GPU
  cannot finish them before the smallest release + their work + the smallest tail; the bound
  takes the best set among those with release and tail above thresholds;
* path bound: one microbatch's forward and backward through all stages with its transfers;
* memory (in-flight slots) bound: a GPU that hosts one stage ``s`` and has room for only ``k``
  of its ``m_d`` microbatches' stashes runs them in ``w = ceil(m_d / k)`` waves: a
  microbatch's F can start only after the one ``k`` places earlier has freed its stash, a
  round trip ``R`` (its F, the forwards and input-gradient backwards of every later stage and
  the transfers, its own backward, I + W when split), so the last wave starts after
  ``head + (w - 1) R`` and still needs ``R`` (without its W when split) and the tail.

A GPU's per-action ``overhead`` counts in its own work (device and heads-and-tails terms);
the path terms leave it out, which keeps them valid.

``instance_bound`` holds for every plan on the graph: all the work spread over all the GPUs'
FLOP/s with no idle time.
"""

from __future__ import annotations

import math
from typing import Any
from weakref import WeakKeyDictionary

import numpy as np

from dlsched.pipeline.chains.problem import PipelineProblem
from dlsched.pipeline.chains.tensor_parallel import ring_allreduce_s
from dlsched.pipeline.plans.plan import PipelinePlan, Stage
from dlsched.pipeline.simulation.ddp import last_bucket_bytes
from dlsched.pipeline.simulation.memory import action_stash, static_memory

# Per instance, the terms of stages and stage pairs (``_hop``, ``_fastest``): candidate
# partitions share most of their stages.
_TERMS: WeakKeyDictionary[PipelineProblem, dict[tuple, Any]] = WeakKeyDictionary()


def _hop(problem: PipelineProblem, stages: tuple[Stage, ...], s: int) -> float:
    """Smallest uncontended transfer between stage ``s`` and ``s + 1`` (seconds): between
    split stages each pair of replicas moves only the overlap of their parts (found once
    per instance and pair of stages)."""
    known = _TERMS.setdefault(problem, {})
    key = ("hop", stages[s], stages[s + 1])
    if key not in known:
        known[key] = _pair_hop(problem, stages[s], stages[s + 1])
    return known[key]


def _pair_hop(problem: PipelineProblem, sender: Stage, receiver: Stage) -> float:
    size = float(problem.chain.activation_bytes[sender.last - 1])
    graph = problem.graph
    senders, receivers = np.array(sender.devices), np.array(receiver.devices)
    mine, theirs = (np.array([stage.part(d) for d in stage.devices])
                    for stage in (sender, receiver))
    shared = np.maximum(0.0, np.minimum(mine[:, 1:], theirs[:, 1]) - np.maximum(mine[:, :1],
                                                                               theirs[:, 0]))
    pairs = np.ix_(senders, receivers)
    with np.errstate(divide="ignore", invalid="ignore"):
        times = graph.latency[pairs] + size * shared / graph.bandwidth[pairs]
    times[senders[:, None] == receivers[None, :]] = 0.0
    return float(times[shared > 0].min())


def _fastest(problem: PipelineProblem, stages: tuple[Stage, ...]) -> list[tuple[float, float]]:
    """(forward, backward) seconds per stage on its fastest replica (found once per instance
    and stage)."""
    known = _TERMS.setdefault(problem, {})
    for stage in stages:
        if ("fastest", stage) not in known:
            known[("fastest", stage)] = tuple(problem.stage_times(stage).min(axis=0))
    return [known[("fastest", stage)] for stage in stages]


def _shares(problem: PipelineProblem, split: bool) -> tuple[float, float]:
    """(I, W) shares of the full backward in a plan that splits backwards (``split``) or not:
    (1, 0) for full backwards."""
    return problem.chain.grad_shares if split else (1.0, 0.0)


def plan_bound(problem: PipelineProblem, plan: PipelinePlan) -> float:
    """A lower bound on any schedule of ``plan``'s stages and mapping (seconds)."""
    problem = problem.for_plan(plan)
    p = plan.num_stages
    split = plan.split_backward
    fastest, hops = _stage_terms(problem, plan.stages)
    head, tail, sync = _paths(problem, plan.stages, split, bool(plan.ddp_buckets), fastest,
                              hops)
    path = head[-1] + fastest[-1][0] + fastest[-1][1] * _shares(problem, split)[0] + tail[-1]
    flops = [problem.action_flops(stage) for stage in plan.stages]
    jobs = _jobs(problem, split, fastest, hops, (head, tail, sync), flops)
    best = max(path, max(sync[s] + head[s] for s in range(p)),
               _memory_bound(problem, plan, split, fastest, hops, (head, tail), flops))
    # The per-GPU terms depend only on the GPU's speed and overhead and the stages and kinds
    # of its actions in order: replicas running the same sequence share them.
    terms: dict[tuple, float] = {}
    for device, order in enumerate(plan.orders):
        if order:
            gpu = problem.graph.devices[device]
            key = (gpu.flops, gpu.overhead, tuple((a.stage, a.kind) for a in order))
            if key not in terms:
                terms[key] = max(_device_bound(problem, key, split, (head, tail, sync), flops),
                                 _heads_and_tails(key, jobs))
            best = max(best, terms[key])
    return best


def _stage_terms(problem: PipelineProblem, stages: tuple[Stage, ...]
                 ) -> tuple[list[tuple[float, float]], list[float]]:
    """(``_fastest`` per stage, ``_hop`` per pair of consecutive stages), seconds."""
    return (_fastest(problem, stages),
            [_hop(problem, stages, s) for s in range(len(stages) - 1)])


def _paths(problem: PipelineProblem, stages: tuple[Stage, ...], split: bool, bucketed: bool,
           fastest: list[tuple[float, float]], hops: list[float]
           ) -> tuple[list[float], list[float], list[float]]:
    """Per stage (seconds), from the stages' ``_stage_terms`` (``fastest``, ``hops``):
    ``head``, the forwards and transfers before its first F can start; ``tail``, the
    input-gradient backwards and transfers after one of its B (or I) down to stage 0;
    ``sync``, the all-reduce that must follow its last backward."""
    p = len(stages)
    inputs = _shares(problem, split)[0]
    head, tail = [0.0] * p, [0.0] * p
    for s in range(1, p):
        head[s] = head[s - 1] + fastest[s - 1][0] + hops[s - 1]
        tail[s] = tail[s - 1] + fastest[s - 1][1] * inputs + hops[s - 1]
    return head, tail, [_sync_after(problem, bucketed, stage) for stage in stages]


def drain_after(problem: PipelineProblem, stages: tuple[Stage, ...], split: bool,
                bucketed: bool) -> list[float]:
    """Per GPU, seconds any schedule of ``stages`` (I/W backwards when ``split``; DDP buckets
    when ``bucketed``) still runs after the GPU's last action (the device term's last part:
    with full backwards that action is a B, followed by the way down to stage 0 and the
    stage's all-reduce; with split ones an I or W, followed at least by the all-reduce);
    0 for a GPU with no stage."""
    _, tail, sync = _paths(problem, stages, split, bucketed, *_stage_terms(problem, stages))
    drain = [math.inf] * problem.graph.num_devices
    for s, stage in enumerate(stages):
        after = sync[s] if split else max(tail[s], sync[s])
        for device in stage.devices:
            drain[device] = min(drain[device], after)
    return [0.0 if math.isinf(seconds) else seconds for seconds in drain]


def _sync_after(problem: PipelineProblem, bucketed: bool, stage: Stage) -> float:
    """The all-reduce time that must follow a replicated stage's last backward: all of it, or
    with DDP buckets (``bucketed``) the ring of the bucket that last backward completes."""
    if not bucketed or len(stage.devices) == 1:
        return problem.allreduce_time(stage)
    return ring_allreduce_s(problem.graph, stage.devices,
                            last_bucket_bytes(problem.chain, stage.first, stage.last))


def _down(fastest: list[tuple[float, float]], hops: list[float], inputs: float,
          s: int) -> float:
    """Forwards and input-gradient backwards of the stages after ``s`` and the transfers
    there and back (seconds)."""
    return sum(f + b * inputs for f, b in fastest[s + 1:]) + 2 * sum(hops[s:])


def _jobs(problem: PipelineProblem, split: bool, fastest: list[tuple[float, float]],
          hops: list[float], paths: tuple[list[float], list[float], list[float]],
          flops: list[tuple[float, float]]) -> dict[tuple[int, str], tuple[float, float, float]]:
    """Per (stage, kind), the (release, tail, FLOP) of an action in the heads-and-tails term
    of the module docstring."""
    head, tail, sync = paths
    inputs, weights = _shares(problem, split)
    jobs = {}
    for s, (forward, backward) in enumerate(flops):
        down = _down(fastest, hops, inputs, s)
        back = fastest[s][1] * inputs
        own_w = fastest[s][1] * weights
        returned = head[s] + fastest[s][0] + down
        jobs[(s, "F")] = (head[s], down + back + tail[s], forward)
        jobs[(s, "B")] = (returned, max(tail[s], sync[s]), backward)
        jobs[(s, "I")] = (returned, max(tail[s], own_w + sync[s]), backward * inputs)
        jobs[(s, "W")] = (returned + back, sync[s], backward * weights)
    return jobs


def _heads_and_tails(gpu: tuple[float, float, tuple[tuple[int, str], ...]],
                     jobs: dict[tuple[int, str], tuple[float, float, float]]) -> float:
    """The one-machine heads-and-tails term of the module docstring for a GPU of ``gpu =
    (FLOP/s, overhead s, (stage, kind) of each action in order)`` (``jobs``: from
    ``_jobs``)."""
    flops, overhead, sequence = gpu
    sets: dict[tuple[float, float], float] = {}
    for key in sequence:
        release, after, work = jobs[key]
        sets[(release, after)] = sets.get((release, after), 0.0) + (work / flops + overhead)
    best = 0.0
    for low_release in {r for r, _ in sets}:
        for low_tail in {q for _, q in sets}:
            chosen = [(r, q, w) for (r, q), w in sets.items()
                      if r >= low_release and q >= low_tail]
            if chosen:
                best = max(best, min(r for r, _, _ in chosen) + sum(w for _, _, w in chosen)
                           + min(q for _, q, _ in chosen))
    return best


def _memory_bound(problem: PipelineProblem, plan: PipelinePlan, split: bool,
                  fastest: list[tuple[float, float]], hops: list[float],
                  paths: tuple[list[float], list[float]],
                  flops: list[tuple[float, float]]) -> float:
    """The in-flight slots term of the module docstring (0 where memory is not binding)."""
    head, tail = paths
    chain, graph, m = problem.chain, problem.graph, problem.num_microbatches
    inputs, weights = _shares(problem, split)
    static = static_memory(chain, plan.stages, graph.num_devices)
    hosted = [{a.stage for a in order} for order in plan.orders]
    best = 0.0
    for s, stage in enumerate(plan.stages):
        stash = action_stash(chain, stage)
        if stash <= 0:
            continue
        down = _down(fastest, hops, inputs, s)
        forward, backward = flops[s]
        for device, mine in zip(stage.devices, stage.replica_microbatches(m), strict=True):
            if hosted[device] != {s}:
                continue
            own = len(mine)
            slots = int((graph.devices[device].memory - static[device]) / stash * (1 + 1e-12))
            if slots < 1 or slots >= own:
                continue
            speed = graph.devices[device].flops
            trip = (forward + backward * (inputs + weights)) / speed + down
            last = (forward + backward * inputs) / speed + down
            waves = math.ceil(own / slots)
            best = max(best, head[s] + (waves - 1) * trip + last + tail[s])
    return best


def _device_bound(problem: PipelineProblem, gpu: tuple[float, float, tuple[tuple[int, str], ...]],
                  split: bool, paths: tuple[list[float], list[float], list[float]],
                  flops: list[tuple[float, float]]) -> float:
    """The device term of the module docstring for a GPU of ``gpu = (FLOP/s, overhead s,
    (stage, kind) of each action in order)``."""
    head, tail, sync = paths
    speed, overhead, sequence = gpu
    inputs, weights = problem.chain.grad_shares
    hosted = sorted({s for s, _ in sequence})
    work = {}
    for s in hosted:
        forward, backward = flops[s]
        work |= {(s, "F"): forward, (s, "B"): backward, (s, "I"): backward * inputs,
                 (s, "W"): backward * weights}
    all_work = sum(work[key] for key in sequence) / speed + overhead * len(sequence)
    start = min(head[s] for s in hosted)
    if not split:
        return start + all_work + min(max(tail[s], sync[s]) for s in hosted)
    forward_input = sum(work[(s, kind)] / speed + overhead for s, kind in sequence
                        if kind != "W")
    return max(start + all_work + min(sync[s] for s in hosted),
               start + forward_input + min(tail[s] for s in hosted))


def instance_bound(problem: PipelineProblem) -> float:
    """A lower bound on every plan: total FLOP of the iteration over the sum of GPU FLOP/s
    (the backward at the cheaper of full or split)."""
    chain = problem.chain
    cheapest = min(1.0, sum(chain.grad_shares))
    total = float(chain.forward_flops.sum() + chain.backward_flops.sum() * cheapest)
    return total * problem.num_microbatches / float(problem.graph.flops.sum())
