"""dlsched's own data-parallel policy, "dlsched": US-Byte over fused layer groups, by search.

US-Byte plans per parameter tensor, and a model such as ResNet-50 has 161 tensors, most of them
a few kB: every one pays a full all-reduce startup (1.3 ms on the reference 8-worker cluster),
so US-Byte can lose to MG-WFBP there. This policy first fuses runs of adjacent layers into
groups — MG-WFBP's merge groups, or groups that grow until they hold ``threshold`` bytes —
runs US-Byte (gap filling, forward-order phase 2, priority refinement) on the groups as if each
were one layer, and maps every block back to the original tensors (a block crossing a group's
tensors becomes one fused message). It scores every grouping, plus each baseline's message
order with its barrier removed, by simulation and keeps the fastest, so it is never slower
than US-Byte or any baseline.
"""

from __future__ import annotations

from itertools import accumulate

from dlsched.dataparallel.plan import Block, DPPlan, Message
from dlsched.dataparallel.policies.bytescheduler import bytescheduler_plan
from dlsched.dataparallel.policies.simple import (
    bucket_plan,
    horovod_plan,
    mgwfbp_plan,
    wfbp_plan,
)
from dlsched.dataparallel.policies.usbyte import usbyte_plan
from dlsched.dataparallel.problem import DPProblem
from dlsched.dataparallel.simulate import iteration_time

MB = 10**6
THRESHOLDS = (1 * MB, 2 * MB, 4 * MB, 8 * MB, 16 * MB, 32 * MB, 64 * MB)

Groups = list[list[int]]  # runs of adjacent layers, in forward order


def threshold_groups(problem: DPProblem, threshold: int) -> Groups:
    """Adjacent layers fused, in backward order, until a group holds >= ``threshold`` bytes."""
    groups: Groups = []
    current: list[int] = []
    size = 0
    for layer in reversed(range(problem.num_layers)):
        current.insert(0, layer)
        size += problem.grad_bytes[layer]
        if size >= threshold:
            groups.insert(0, current)
            current, size = [], 0
    if current:
        groups.insert(0, current)
    return groups


def mgwfbp_groups(problem: DPProblem) -> Groups:
    """The layer groups of MG-WFBP's merged messages (plus empty-gradient layers joined on)."""
    groups = sorted(sorted({b.layer for b in m.blocks}) for m in mgwfbp_plan(problem).messages)
    covered = {layer for group in groups for layer in group}
    for layer in range(problem.num_layers):
        if layer not in covered:
            groups.append([layer])
    groups.sort()
    return [list(range(g[0], g[-1] + 1)) for g in groups]


def grouped_problem(problem: DPProblem, groups: Groups) -> DPProblem:
    """Each group as one layer: times and bytes add up (ready when its first layer is)."""
    return DPProblem(
        tuple(sum(problem.forward[k] for k in g) for g in groups),
        tuple(sum(problem.backward[k] for k in g) for g in groups),
        tuple(sum(problem.grad_bytes[k] for k in g) for g in groups),
        problem.comm, tuple(f"{problem.names[g[0]]}..{problem.names[g[-1]]}" for g in groups),
        problem.model)


def _ungroup(problem: DPProblem, groups: Groups, plan: DPPlan) -> DPPlan:
    """Map blocks of group-layers back onto the original layers' byte ranges."""
    starts = [[0, *accumulate(problem.grad_bytes[k] for k in g)] for g in groups]
    msgs = []
    for msg in plan.messages:
        blocks = []
        for block in msg.blocks:
            group, bounds = groups[block.layer], starts[block.layer]
            low, high = block.offset, block.offset + block.length
            for layer, first, last in zip(group, bounds, bounds[1:], strict=False):
                if min(high, last) > max(low, first):
                    blocks.append(Block(layer, max(low, first) - first,
                                        min(high, last) - max(low, first)))
        msgs.append(Message(tuple(blocks), msg.launch))
    return DPPlan(tuple(msgs), barrier=False, policy="dlsched")


def candidate_plans(problem: DPProblem) -> list[DPPlan]:
    """US-Byte on every grouping, and the baselines' orders without their barriers."""
    groupings = [mgwfbp_groups(problem), *(threshold_groups(problem, t) for t in THRESHOLDS)]
    plans = [DPPlan(usbyte_plan(problem).messages, False, "dlsched")]
    for groups in groupings:
        grouped = usbyte_plan(grouped_problem(problem, groups))
        plans.append(_ungroup(problem, groups, grouped))
    for baseline in (wfbp_plan, mgwfbp_plan, bucket_plan, horovod_plan, bytescheduler_plan):
        plans.append(DPPlan(baseline(problem).messages, False, "dlsched"))
    return plans


def dlsched_plan(problem: DPProblem) -> DPPlan:
    """The fastest candidate (ties: the earliest)."""
    return min(candidate_plans(problem), key=lambda plan: iteration_time(problem, plan))
