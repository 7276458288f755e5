"""dlsched's own data-parallel policy, "dlsched": US-Byte over fused layer groups, by search.

US-Byte plans per parameter tensor, and a model such as ResNet-50 has 161 tensors, most of them
a few kB: every one pays a full all-reduce startup (1.3 ms on the reference 8-worker cluster),
so US-Byte can lose to MG-WFBP there. This policy first fuses runs of adjacent layers into
groups — MG-WFBP's merge groups, or groups that grow until they hold ``threshold`` bytes,
walked from the output or from the input end — runs US-Byte (gap filling, forward-order
phase 2, priority refinement) on the groups as if each were one layer, and maps every block
back to the original tensors (a block crossing a group's tensors becomes one fused message).
On every grouping it also tries stopping gap filling early: a block of a later layer sent into
a short gap can hold up the first layers, which the next forward needs first. Every candidate,
plus each baseline's message order with its barrier removed, is scored by simulation and the
fastest kept — so it is never slower than US-Byte (the one-layer-per-group candidate) or any
baseline — and finally a local search fuses, splits and swaps messages while that shortens
the iteration, then one more sweep tries halving a message and deferring its second half
behind the next one, so an urgent gradient need not wait for the whole of a large message.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import replace
from itertools import accumulate

from dlsched.dataparallel.plan import Block, DPPlan, Message, message
from dlsched.dataparallel.policies.bytescheduler import bytescheduler_tuned_plan
from dlsched.dataparallel.policies.simple import (
    ddp_tuned_plan,
    horovod_tuned_plan,
    mgwfbp_plan,
    wfbp_plan,
)
from dlsched.dataparallel.policies.usbyte import usbyte_plan, usbyte_schedule, usbyte_tuned_plan
from dlsched.dataparallel.problem import DPProblem
from dlsched.dataparallel.simulate import iteration_time

MB = 10**6
THRESHOLDS = (1 * MB, 2 * MB, 4 * MB, 8 * MB, 16 * MB, 32 * MB, 64 * MB)
# Fractions of the backward time after which gap filling stops (step 2).
PHASE1_CUTOFFS = (0.0, 0.25, 0.5, 0.75, 0.9, math.inf)
LOCAL_SEARCH_PASSES = 3  # sweeps of step 4's local search

Groups = list[list[int]]  # runs of adjacent layers, in forward order


def threshold_groups(problem: DPProblem, threshold: int, from_input: bool = False) -> Groups:
    """Adjacent layers fused until a group holds >= ``threshold`` bytes, walking from the
    output (backward order) or, with ``from_input``, from the input layers."""
    order = range(problem.num_layers) if from_input else reversed(range(problem.num_layers))
    groups: Groups = []
    current: list[int] = []
    size = 0
    for layer in order:
        current.append(layer)
        size += problem.grad_bytes[layer]
        if size >= threshold:
            groups.append(sorted(current))
            current, size = [], 0
    if current:
        groups.append(sorted(current))
    return sorted(groups)


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
    """Each group as one layer: times and bytes add up (ready when its first layer is). One
    layer per group gives back an equal problem, so plans cached for it are reused."""
    return DPProblem(
        tuple(sum(problem.forward[k] for k in g) for g in groups),
        tuple(sum(problem.backward[k] for k in g) for g in groups),
        tuple(sum(problem.grad_bytes[k] for k in g) for g in groups),
        problem.comm, tuple(problem.names[g[0]] if len(g) == 1
                            else f"{problem.names[g[0]]}..{problem.names[g[-1]]}" for g in groups),
        problem.model, problem.in_flight)


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


def _fastest(problem: DPProblem, plans: list[DPPlan]) -> DPPlan:
    return min(plans, key=lambda plan: iteration_time(problem, plan))


def _grouped_usbyte(problem: DPProblem, groups: Groups, phase1_until: float,
                    refine: bool, overshoot: bool = True) -> DPPlan:
    grouped = grouped_problem(problem, groups)
    if refine:
        plan = usbyte_plan(grouped, phase1_until=phase1_until)
    else:
        plan = usbyte_schedule(grouped, list(range(len(groups))), phase1_until=phase1_until,
                               overshoot=overshoot)
    return _ungroup(problem, groups, plan)


def _unique(groupings: list[Groups]) -> list[Groups]:
    return [g for i, g in enumerate(groupings) if g not in groupings[:i]]


def dlsched_plan(problem: DPProblem) -> DPPlan:
    """Step 1: US-Byte (with priority refinement) on each grouping — one group per layer,
    MG-WFBP's, and size thresholds walked from either end. Step 2: on every grouping, gap
    filling cut off early (at fractions of the backward time, or never) with input-first
    priority, so the urgent first layers are not queued behind blocks of later ones, with gap
    blocks ending just past or just before the next gradient. Step 3: the
    baselines' orders without barriers. The fastest plan of all (ties: the earliest) then goes
    through step 4, ``improve`` (local search: fuse, split and swap messages), and one sweep
    of ``_halvings``."""
    groupings = _unique([[[layer] for layer in range(problem.num_layers)],
                         mgwfbp_groups(problem),
                         *(threshold_groups(problem, t, end) for t in THRESHOLDS
                           for end in (False, True))])
    refined = [_grouped_usbyte(problem, g, math.inf, True) for g in groupings]
    cutoffs = [_grouped_usbyte(problem, g, f * problem.backward_end, False, overshoot)
               for g in groupings for f in PHASE1_CUTOFFS for overshoot in (True, False)]
    baselines = [replace(b(problem), barrier=False, policy="dlsched", settings="")
                 for b in (wfbp_plan, mgwfbp_plan, ddp_tuned_plan, horovod_tuned_plan,
                           bytescheduler_tuned_plan, usbyte_tuned_plan)]
    candidates = [*refined, *cutoffs, *baselines]
    if problem.in_flight > 1:
        candidates += [replace(plan, in_flight=problem.in_flight) for plan in candidates]
    return improve(problem, improve(problem, _fastest(problem, candidates)), passes=1,
                   moves=_halvings)


Moves = Callable[[DPProblem, list[Message], int], Iterator[list[Message]]]


def improve(problem: DPProblem, plan: DPPlan, passes: int = LOCAL_SEARCH_PASSES,
            moves: Moves | None = None) -> DPPlan:
    """Step 4, local search: at each message, try fusing it with the next one (one startup
    saved, its blocks arrive later), splitting it at a block boundary (either part first: the
    urgent part no longer waits for the rest) and swapping it with the next one (``moves``,
    default ``_moves``); keep the first change that shortens the simulated iteration and try
    again at the message before. Stops after ``passes`` sweeps or a sweep without
    improvement. ``dlsched_plan`` ends with one sweep of ``_halvings``."""
    moves = moves or _moves
    msgs = list(plan.messages)
    best = iteration_time(problem, plan)
    for _ in range(passes):
        improved, index = False, 0
        while index < len(msgs):
            for trial in moves(problem, msgs, index):
                time = iteration_time(problem, replace(plan, messages=tuple(trial)))
                if time < best:
                    msgs, best, improved, index = trial, time, True, max(index - 1, 0)
                    break
            else:
                index += 1
        if not improved:
            break
    return replace(plan, messages=tuple(msgs))


def _moves(problem: DPProblem, msgs: list[Message], index: int) -> Iterator[list[Message]]:
    """The neighbouring plans of step 4 at message ``index`` (fuse, split, swap)."""
    head, current, tail = msgs[:index], msgs[index], msgs[index + 1:]
    if tail:
        yield [*head, Message(current.blocks + tail[0].blocks,
                              max(current.launch, tail[0].launch)), *tail[1:]]
    for cut in range(1, len(current.blocks)):
        first = message(problem, list(current.blocks[:cut]))
        second = message(problem, list(current.blocks[cut:]))
        yield [*head, first, second, *tail]
        yield [*head, second, first, *tail]
    if tail:
        yield [*head, tail[0], current, *tail[1:]]


def _halvings(problem: DPProblem, msgs: list[Message], index: int) -> Iterator[list[Message]]:
    """Message ``index``'s last block halved, the second half sent next or deferred behind the
    next message, so an urgent message need not wait for the whole of a large one (the
    optimum of a 2-layer case hypothesis found does this; without it the plan was 12.3% above). One
    sweep after step 4: as a move of every sweep it made ``reproduce usbyte`` 1.6x slower."""
    current, last = msgs[index], msgs[index].blocks[-1]
    if last.length < 2:
        return
    half = last.length // 2
    first = message(problem, [*current.blocks[:-1], replace(last, length=half)])
    rest = message(problem, [replace(last, offset=last.offset + half, length=last.length - half)])
    head, tail = msgs[:index], msgs[index + 1:]
    yield [*head, first, rest, *tail]
    if tail:
        yield [*head, first, tail[0], rest, *tail[1:]]
