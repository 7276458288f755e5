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

from dlsched.pipeline.ddp import last_bucket_bytes
from dlsched.pipeline.memory import action_stash, static_memory
from dlsched.pipeline.plan import PipelinePlan, Stage, overlap
from dlsched.pipeline.problem import PipelineProblem
from dlsched.pipeline.tensor_parallel import ring_allreduce_s


def _hop(problem: PipelineProblem, plan: PipelinePlan, s: int) -> float:
    """Smallest uncontended transfer between stage ``s`` and ``s + 1`` (seconds): between
    split stages each pair of replicas moves only the overlap of their parts."""
    size = float(problem.chain.activation_bytes[plan.stages[s].last - 1])
    graph, sender, receiver = problem.graph, plan.stages[s], plan.stages[s + 1]
    return min(graph.transfer_time(a, b, size * overlap(sender.part(a), receiver.part(b)))
               for a in sender.devices for b in receiver.devices
               if overlap(sender.part(a), receiver.part(b)) > 0)


def _fastest(problem: PipelineProblem, plan: PipelinePlan) -> list[tuple[float, float]]:
    """(forward, backward) seconds per stage on its fastest replica."""
    return [tuple(problem.stage_times(stage).min(axis=0)) for stage in plan.stages]


def _shares(problem: PipelineProblem, plan: PipelinePlan) -> tuple[float, float]:
    """(I, W) shares of the full backward in ``plan``: (1, 0) for full backwards."""
    return problem.chain.grad_shares if plan.split_backward else (1.0, 0.0)


def plan_bound(problem: PipelineProblem, plan: PipelinePlan) -> float:
    """A lower bound on any schedule of ``plan``'s stages and mapping (seconds)."""
    problem = problem.for_plan(plan)
    p = plan.num_stages
    fastest = _fastest(problem, plan)
    hops = [_hop(problem, plan, s) for s in range(p - 1)]
    inputs = _shares(problem, plan)[0]
    head, tail = [0.0] * p, [0.0] * p
    for s in range(1, p):
        head[s] = head[s - 1] + fastest[s - 1][0] + hops[s - 1]
        tail[s] = tail[s - 1] + fastest[s - 1][1] * inputs + hops[s - 1]
    sync = [_sync_after(problem, plan, stage) for stage in plan.stages]
    path = head[-1] + fastest[-1][0] + fastest[-1][1] * inputs + tail[-1]
    best = max(path, max(sync[s] + head[s] for s in range(p)),
               _memory_bound(problem, plan, fastest, hops, (head, tail)))
    for device, order in enumerate(plan.orders):
        if order:
            best = max(best, _device_bound(problem, plan, device, (head, tail, sync)),
                       _heads_and_tails(problem, plan, device, fastest, hops,
                                        (head, tail, sync)))
    return best


def _sync_after(problem: PipelineProblem, plan: PipelinePlan, stage: Stage) -> float:
    """The all-reduce time that must follow a replicated stage's last backward: all of it, or
    with ``ddp_buckets`` the ring of the bucket that last backward completes."""
    if not plan.ddp_buckets or len(stage.devices) == 1:
        return problem.allreduce_time(stage)
    return ring_allreduce_s(problem.graph, stage.devices,
                            last_bucket_bytes(problem.chain, stage.first, stage.last))


def _heads_and_tails(problem: PipelineProblem, plan: PipelinePlan, device: int,
                     fastest: list[tuple[float, float]], hops: list[float],
                     paths: tuple[list[float], list[float], list[float]]) -> float:
    """The one-machine heads-and-tails term of the module docstring for GPU ``device``."""
    head, tail, sync = paths
    flops, overhead = problem.graph.devices[device].flops, problem.graph.devices[device].overhead
    inputs, weights = _shares(problem, plan)
    jobs: dict[tuple[float, float], float] = {}
    for action in plan.orders[device]:
        s = action.stage
        forward, backward = problem.action_flops(plan.stages[s])
        down = sum(f + b * inputs for f, b in fastest[s + 1:]) + 2 * sum(hops[s:])
        back = fastest[s][1] * inputs
        own_w = fastest[s][1] * weights
        returned = head[s] + fastest[s][0] + down
        release, after, work = {
            "F": (head[s], down + back + tail[s], forward),
            "B": (returned, max(tail[s], sync[s]), backward),
            "I": (returned, tail[s], backward * inputs),
            "W": (returned + back, sync[s], backward * weights)}[action.kind]
        if action.kind == "I":
            after = max(after, own_w + sync[s])
        jobs[(release, after)] = jobs.get((release, after), 0.0) + work / flops + overhead
    best = 0.0
    for low_release in {r for r, _ in jobs}:
        for low_tail in {q for _, q in jobs}:
            chosen = [(r, q, w) for (r, q), w in jobs.items()
                      if r >= low_release and q >= low_tail]
            if chosen:
                best = max(best, min(r for r, _, _ in chosen) + sum(w for _, _, w in chosen)
                           + min(q for _, q, _ in chosen))
    return best


def _memory_bound(problem: PipelineProblem, plan: PipelinePlan, fastest: list[tuple[float, float]],
                  hops: list[float], paths: tuple[list[float], list[float]]) -> float:
    """The in-flight slots term of the module docstring (0 where memory is not binding)."""
    head, tail = paths
    chain, graph, m = problem.chain, problem.graph, problem.num_microbatches
    inputs, weights = _shares(problem, plan)
    static = static_memory(chain, plan.stages, graph.num_devices)
    best = 0.0
    for s, stage in enumerate(plan.stages):
        stash = action_stash(chain, stage)
        down = sum(f + b * inputs for f, b in fastest[s + 1:]) + 2 * sum(hops[s:])
        forward, backward = problem.action_flops(stage)
        for device in stage.devices:
            hosted = {a.stage for a in plan.orders[device]}
            own = len(stage.microbatches_of(device, m))
            if stash <= 0 or hosted != {s}:
                continue
            slots = int((graph.devices[device].memory - static[device]) / stash * (1 + 1e-12))
            if slots < 1 or slots >= own:
                continue
            flops = graph.devices[device].flops
            trip = (forward + backward * (inputs + weights)) / flops + down
            last = (forward + backward * inputs) / flops + down
            waves = math.ceil(own / slots)
            best = max(best, head[s] + (waves - 1) * trip + last + tail[s])
    return best


def _device_bound(problem: PipelineProblem, plan: PipelinePlan, device: int,
                  paths: tuple[list[float], list[float], list[float]]) -> float:
    head, tail, sync = paths
    flops, overhead = problem.graph.devices[device].flops, problem.graph.devices[device].overhead
    inputs, weights = problem.chain.grad_shares
    hosted = sorted({a.stage for a in plan.orders[device]})
    times = {s: problem.action_flops(plan.stages[s]) for s in hosted}
    work = {"F": lambda s: times[s][0], "B": lambda s: times[s][1],
            "I": lambda s: times[s][1] * inputs, "W": lambda s: times[s][1] * weights}
    order = plan.orders[device]
    all_work = sum(work[a.kind](a.stage) for a in order) / flops + overhead * len(order)
    start = min(head[s] for s in hosted)
    if not plan.split_backward:
        return start + all_work + min(max(tail[s], sync[s]) for s in hosted)
    forward_input = sum(work[a.kind](a.stage) / flops + overhead for a in order
                        if a.kind != "W")
    return max(start + all_work + min(sync[s] for s in hosted),
               start + forward_input + min(tail[s] for s in hosted))


def instance_bound(problem: PipelineProblem) -> float:
    """A lower bound on every plan: total FLOP of the iteration over the sum of GPU FLOP/s
    (the backward at the cheaper of full or split)."""
    chain = problem.chain
    cheapest = min(1.0, sum(chain.grad_shares))
    total = float(chain.forward_flops.sum() + chain.backward_flops.sum() * cheapest)
    return total * problem.num_microbatches / float(problem.graph.flops.sum())
