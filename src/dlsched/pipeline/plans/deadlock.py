"""Whether a fixed-order plan runs to its end, found without simulating time.

In the simulator a GPU starts its next action once that action's inputs are there: the
activation (or gradient) from every replica of the neighbouring stage whose part of the
microbatch overlaps its own, or, for the last stage's backward and for W, its own F (I)
before it; transfers and all-reduces always finish and memory is checked before the run. No
action ever stops another from becoming ready, so the actions a plan executes before it stalls
are the same in whatever order the ready ones run: executing them without durations finds
the GPU and position where ``simulate`` reports the deadlock (the first stuck GPU by index)
in O(actions x overlapping replicas).
"""

from __future__ import annotations

from dlsched.pipeline.plans.actions import Action
from dlsched.pipeline.plans.plan import Stage, overlap
from dlsched.pipeline.plans.units import next_unit


def parts_from(stages: tuple[Stage, ...], source: int, target: int, dst: int) -> int:
    """How many parts of a microbatch replica ``dst`` of stage ``target`` receives from the
    replicas of its neighbour stage ``source``: those whose part overlaps its own (the same
    for every microbatch: one whole one from an unsplit stage, a part from each overlapping
    replica of a split one)."""
    theirs, sender = stages[target].part(dst), stages[source]
    if not sender.split:
        return 1 if overlap((0.0, 1.0), theirs) > 0 else 0
    return sum(1 for d in sender.devices if overlap(sender.part(d), theirs) > 0)


def stalled_at(stages: tuple[Stage, ...], orders: tuple[tuple[Action, ...], ...],
               num_microbatches: int,
               joined: tuple[frozenset[int], ...] = ()) -> tuple[int, int] | None:
    """(GPU, position in its order) of the first GPU that waits forever, None when every GPU
    runs its whole order; with ``joined`` (``PipelinePlan.joined``) a unit of actions starts
    only once all its inputs are there (``units.next_unit``)."""
    split = any(a.kind == "I" for order in orders for a in order)
    backward, last = ("I" if split else "B"), len(stages) - 1
    pointer = [0] * len(orders)
    ready: set[tuple[Action, int]] = set()
    arrived: dict[tuple[Action, int], int] = {}
    needed: dict[tuple[int, int, int], int] = {}  # parts_from, per stages and replica

    def deliver(src: int, target: Action, s: int) -> list[int]:
        receiving = stages[target.stage]
        mine = stages[s].part(src)
        woken = []
        for dst in receiving.devices_for(target.microbatch):
            if overlap(mine, receiving.part(dst)) <= 0:
                continue
            key = (target, dst)
            arrived[key] = arrived.get(key, 0) + 1
            parts = (s, target.stage, dst)
            if parts not in needed:
                needed[parts] = parts_from(stages, *parts)
            if arrived[key] == needed[parts]:
                ready.add(key)
                woken.append(dst)
        return woken

    def consequences(device: int, action: Action) -> list[int]:
        s, j = action.stage, action.microbatch
        woken = []
        if action.kind == "F":
            if s == last:
                ready.add((Action(s, backward, j), device))
            else:
                woken += deliver(device, Action(s + 1, "F", j), s)
        if action.kind in ("B", "I") and s > 0:
            woken += deliver(device, Action(s - 1, backward, j), s)
        if action.kind == "I":
            ready.add((Action(s, "W", j), device))
        return woken

    for j in range(num_microbatches):
        for device in stages[0].devices_for(j):
            ready.add((Action(0, "F", j), device))
    pending = list(range(len(orders)))
    while pending:
        device = pending.pop()
        order, links = orders[device], joined[device] if joined else frozenset()
        while unit := next_unit(order, pointer[device], links,
                                lambda action, device=device: (action, device) in ready):
            pointer[device] += len(unit)
            for action in unit:
                pending.extend(consequences(device, action))
    return next(((k, pointer[k]) for k, order in enumerate(orders) if pointer[k] < len(order)),
                None)
