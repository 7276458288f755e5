"""US-Byte (Gao et al., IEEE TPDS 2024): unequal-sized gradient blocks in a near-optimal order.

Gradients are counted in units of ``unit_bytes`` (the reference: 1M fp32 elements). Phase 1,
while backward still produces gradients, is greedy gap filling: whenever the network frees up
at time tau and the next gradient appears at r, it takes the ready layer of highest priority
that still has units; with gap g = r - tau it sends one unit if g is shorter than a startup,
just enough units to reach r if the rest of the layer does not fit in g, and otherwise the whole
rest — so block boundaries fall where a more urgent gradient may arrive. Phase 2, once every
gradient exists, sends each layer's remainder as one message in forward order, which makes every
prefix of layers finish as early as possible. Priorities start input-first and are refined: for
l = L-1 .. 1, if layers become ready while l would still be sending whole, l is tried ahead of
them and kept there if the simulated iteration gets shorter. US-Byte plans for one message at
a time; the authors run it on ByteScheduler's core (``BYTESCHEDULER_PARTITION`` is its unit),
so on a network that carries several all-reduces its blocks go out under ByteScheduler's
credit, with the same choices as ByteScheduler (``tuning.CREDITS``, one in flight among them):
``usbyte`` keeps the authors' 1M-element unit and tunes the credit as ByteScheduler's
shipped version does, ``usbyte-tuned`` tunes unit and credit. Each unit is sent exactly once
(the reference planner could drop units when it picked the same layer twice in a row; the
validator in ``plan.py`` checks every plan).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import replace

from dlsched.dataparallel.cache import cached_plan
from dlsched.dataparallel.plan import Block, DPPlan, Message, message
from dlsched.dataparallel.problem import DPProblem
from dlsched.dataparallel.simulate import iteration_time
from dlsched.dataparallel.tuning import (
    CREDITS,
    DEFAULT_CREDIT_MULTIPLE,
    DEFAULT_PARTITION,
    credit_bytes,
    credit_search,
    credit_text,
    size_text,
)

UNIT_BYTES = DEFAULT_PARTITION  # S_p: US-Byte's unit is ByteScheduler's default partition


def _units_to_reach(problem: DPProblem, gap: float, unit: int, rest: int) -> int:
    """Fewest units whose message lasts at least ``gap`` seconds (at most all of ``rest``)."""
    low, high = 1, math.ceil(rest / unit)
    while low < high:
        middle = (low + high) // 2
        if problem.comm.cost(min(middle * unit, rest)) >= gap:
            high = middle
        else:
            low = middle + 1
    return low


def usbyte_schedule(problem: DPProblem, order: list[int], unit: int = UNIT_BYTES,
                    phase1_until: float = math.inf, overshoot: bool = True) -> DPPlan:
    """The two-phase plan for a priority ``order`` (layers, most urgent first); gap filling
    stops once the network would start later than ``phase1_until`` seconds (default: never
    before all gradients exist, as in US-Byte). A block cut to fill a gap ends at the next
    gradient or just past it (``overshoot``, US-Byte's "just enough units to reach r"), or with
    ``overshoot=False`` just before it (at least one unit)."""
    rank = {layer: position for position, layer in enumerate(order)}
    sent = [0] * problem.num_layers
    startup = problem.comm.cost(0)
    msgs: list[Message] = []
    waiting: list[tuple[int, int]] = []  # (rank, layer) of ready layers with bytes left
    pending, tau = problem.num_layers - 1, 0.0  # layers <= pending are not ready yet
    while True:
        while pending >= 0 and problem.ready[pending] <= tau:
            if problem.grad_bytes[pending] > 0:
                heapq.heappush(waiting, (rank[pending], pending))
            pending -= 1
        if pending < 0 or tau >= phase1_until:
            break
        if not waiting:
            tau = problem.ready[pending]
            continue
        layer = waiting[0][1]
        rest = problem.grad_bytes[layer] - sent[layer]
        gap = problem.ready[pending] - tau
        if gap < startup:
            size = min(unit, rest)
        elif problem.comm.cost(rest) > gap:
            units = _units_to_reach(problem, gap, unit, rest)
            if not overshoot and units > 1 and problem.comm.cost(units * unit) > gap:
                units -= 1
            size = min(units * unit, rest)
        else:
            size = rest
        msgs.append(Message((Block(layer, sent[layer], size),), tau))
        sent[layer] += size
        tau += problem.comm.cost(size)
        if sent[layer] == problem.grad_bytes[layer]:
            heapq.heappop(waiting)
    for layer in range(problem.num_layers):
        rest = problem.grad_bytes[layer] - sent[layer]
        if rest > 0:
            msgs.append(message(problem, [Block(layer, sent[layer], rest)]))
    return DPPlan(tuple(msgs), barrier=False, policy="usbyte", settings=f"unit {size_text(unit)}")


def refine_priority(problem: DPProblem, unit: int = UNIT_BYTES,
                    phase1_until: float = math.inf) -> list[int]:
    """Input-first priority improved by moving layers ahead of those that become ready while
    they would be sending (kept only when the simulated iteration gets shorter)."""
    order = list(range(problem.num_layers))
    best = iteration_time(problem, usbyte_schedule(problem, order, unit, phase1_until))
    for layer in range(problem.num_layers - 1, 0, -1):
        finish = problem.ready[layer] + problem.comm.cost(problem.grad_bytes[layer])
        meanwhile = {k for k in range(layer) if problem.ready[k] < finish}
        if not meanwhile:
            continue
        trial = [k for k in order if k != layer]
        first = next(i for i, k in enumerate(trial) if k in meanwhile)
        trial.insert(first, layer)
        time = iteration_time(problem, usbyte_schedule(problem, trial, unit, phase1_until))
        if time < best:
            best, order = time, trial
    return order


def usbyte_plan(problem: DPProblem, unit: int = UNIT_BYTES,
                phase1_until: float = math.inf) -> DPPlan:
    """US-Byte with refined priorities, one message at a time (the authors' default unit: 1M
    fp32 elements). Units at least as large as the largest gradient all give the same plan
    (every block is a whole layer's rest), so that plan is computed once and labelled with the
    unit asked for."""
    plan = _refined_plan(problem, max(1, min(unit, max(problem.grad_bytes))), phase1_until)
    return replace(plan, settings=f"unit {size_text(unit)}")


@cached_plan
def _refined_plan(problem: DPProblem, unit: int, phase1_until: float) -> DPPlan:
    order = refine_priority(problem, unit, phase1_until)
    return usbyte_schedule(problem, order, unit, phase1_until)


def credited_plan(problem: DPProblem, unit: int = UNIT_BYTES,
                  credit_multiple: int = DEFAULT_CREDIT_MULTIPLE) -> DPPlan:
    """``usbyte_plan`` sent under ByteScheduler's credit of ``credit_multiple`` units (see
    ``tuning.credit_bytes``) on a network carrying several all-reduces; on a serial network
    the credit changes nothing and the plan is the serial one."""
    plan = usbyte_plan(problem, unit)
    if problem.in_flight == 1:
        return plan
    credit = credit_bytes(credit_multiple, unit)
    return replace(plan, in_flight=problem.in_flight, credit=credit,
                   settings=f"{plan.settings}, credit {credit_text(credit)}")


def _credit_grid(problem: DPProblem) -> tuple[int, ...]:
    """The credits worth simulating: ``CREDITS``, or only the default on a serial network."""
    return CREDITS if problem.in_flight > 1 else (DEFAULT_CREDIT_MULTIPLE,)


@cached_plan
def usbyte_shipped_plan(problem: DPProblem) -> DPPlan:
    """US-Byte as the authors ship it: the 1M-element unit, the credit tuned on the grid
    ByteScheduler's shipped version uses (ByteScheduler's core tunes it by default)."""
    return credit_search(problem, credited_plan, "unit", "usbyte", tune_size=False,
                         credits=_credit_grid(problem))


@cached_plan
def usbyte_tuned_plan(problem: DPProblem) -> DPPlan:
    """US-Byte with unit and credit tuned on the shared grid, as ``bytescheduler-tuned`` tunes
    partition and credit (in the authors' code the unit is ByteScheduler's partition)."""
    return credit_search(problem, credited_plan, "unit", "usbyte-tuned", tune_size=True,
                         credits=_credit_grid(problem))
