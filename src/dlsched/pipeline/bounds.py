"""Provable lower bounds on the iteration time (seconds).

``plan_bound`` holds for every schedule of a plan's partition and mapping:

* device bound: GPU ``d`` cannot start before the first microbatch reaches its earliest stage
  (``head``: forwards of the stages before it, each on its fastest replica, plus the
  uncontended transfers), then runs all its work; after its last action, the gradient of that
  stage must still drain to stage 0 (``tail``, full backwards, or I only when split) and, for a
  replicated stage, its all-reduce must run. With a split backward the last I is followed by the
  I-only tail, which gives a second term over the F and I work only;
* path bound: one microbatch's forward and backward through all stages with its transfers.

``instance_bound`` holds for every plan on the graph: all the work spread over all the GPUs'
FLOP/s with no idle time.
"""

from __future__ import annotations

from dlsched.pipeline.plan import PipelinePlan
from dlsched.pipeline.problem import PipelineProblem


def _hop(problem: PipelineProblem, plan: PipelinePlan, s: int) -> float:
    """Smallest uncontended transfer between stage ``s`` and ``s + 1`` (seconds)."""
    size = float(problem.chain.activation_bytes[plan.stages[s].last - 1])
    graph = problem.graph
    return min(graph.transfer_time(a, b, size) for a in plan.stages[s].devices
               for b in plan.stages[s + 1].devices)


def _fastest(problem: PipelineProblem, plan: PipelinePlan) -> list[tuple[float, float]]:
    """(forward, backward) seconds per stage on its fastest replica."""
    return [tuple(problem.stage_times(stage).min(axis=0)) for stage in plan.stages]


def plan_bound(problem: PipelineProblem, plan: PipelinePlan) -> float:
    """A lower bound on any schedule of ``plan``'s stages and mapping (seconds)."""
    p = plan.num_stages
    fastest = _fastest(problem, plan)
    hops = [_hop(problem, plan, s) for s in range(p - 1)]
    fraction = problem.chain.input_grad_fraction if plan.split_backward else 1.0
    head, tail = [0.0] * p, [0.0] * p
    for s in range(1, p):
        head[s] = head[s - 1] + fastest[s - 1][0] + hops[s - 1]
        tail[s] = tail[s - 1] + fastest[s - 1][1] * fraction + hops[s - 1]
    sync = [problem.allreduce_time(stage) for stage in plan.stages]
    path = head[-1] + fastest[-1][0] + fastest[-1][1] * fraction + tail[-1]
    best = max(path, max(sync[s] + head[s] for s in range(p)))
    for device, order in enumerate(plan.orders):
        if order:
            best = max(best, _device_bound(problem, plan, device, (head, tail, sync)))
    return best


def _device_bound(problem: PipelineProblem, plan: PipelinePlan, device: int,
                  paths: tuple[list[float], list[float], list[float]]) -> float:
    head, tail, sync = paths
    flops = problem.graph.devices[device].flops
    fraction = problem.chain.input_grad_fraction or 1.0
    hosted = sorted({a.stage for a in plan.orders[device]})
    times = {s: problem.stage_flops(plan.stages[s]) for s in hosted}
    work = {"F": lambda s: times[s][0], "B": lambda s: times[s][1],
            "I": lambda s: times[s][1] * fraction, "W": lambda s: times[s][1] * (1 - fraction)}
    all_work = sum(work[a.kind](a.stage) for a in plan.orders[device]) / flops
    start = min(head[s] for s in hosted)
    if not plan.split_backward:
        return start + all_work + min(max(tail[s], sync[s]) for s in hosted)
    forward_input = sum(work[a.kind](a.stage) for a in plan.orders[device]
                        if a.kind != "W") / flops
    return max(start + all_work + min(sync[s] for s in hosted),
               start + forward_input + min(tail[s] for s in hosted))


def instance_bound(problem: PipelineProblem) -> float:
    """A lower bound on every plan: total FLOP of the iteration over the sum of GPU FLOP/s."""
    chain = problem.chain
    total = float(chain.forward_flops.sum() + chain.backward_flops.sum())
    return total * problem.num_microbatches / float(problem.graph.flops.sum())
