"""Microbatch schedules: per-GPU action orders for a given partition and mapping.

Fixed generators (GPipe, 1F1B / PipeDream-Flush, interleaved 1F1B) write the orders directly;
list-scheduling rules (``Dispatch``) let the simulator build the order: ZB-H1 and the planner's
own rules. All stages' replicas follow their stage's order on their own microbatches (every
microbatch, for their part of it, on a split stage).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache, wraps
from typing import Any

from dlsched.pipeline.plans.actions import Action
from dlsched.pipeline.plans.plan import Stage
from dlsched.pipeline.simulation.simulate import Dispatch

KEPT_ORDERS = 256


def _layout(value: Any) -> Any:
    """``value`` with every stage replaced by its GPUs and split (what orders depend on; not
    its blocks) and lists by tuples."""
    if isinstance(value, tuple | list):
        return tuple((v.devices, v.split) if isinstance(v, Stage) else _layout(v) for v in value)
    return value


def _kept_per_layout(make: Callable[..., tuple]) -> Callable[..., tuple]:
    """``make`` (a writer of per-GPU orders) with its results kept per layout of its
    arguments (``_layout``; the latest ``KEPT_ORDERS``): grid points of every recomputation
    mode, and the candidate bounds and simulations of one partition, write the same orders."""
    kept: dict[tuple, tuple] = {}

    @wraps(make)
    def orders(*args: Any, **options: Any) -> tuple:
        key = (_layout(args), tuple(sorted(options.items())))
        if key not in kept:
            if len(kept) >= KEPT_ORDERS:
                del kept[next(iter(kept))]
            kept[key] = make(*args, **options)
        return kept[key]
    return orders


def _assemble(stages: tuple[Stage, ...], num_devices: int, num_microbatches: int,
              order_of: Callable[[int, list[int]], list[Action]]) -> tuple[tuple[Action, ...], ...]:
    orders: list[list[Action]] = [[] for _ in range(num_devices)]
    for s, stage in enumerate(stages):
        for device, mine in zip(stage.devices, stage.replica_microbatches(num_microbatches),
                                strict=True):
            orders[device].extend(order_of(s, mine))
    return tuple(tuple(order) for order in orders)


def _warmup(stages: tuple[Stage, ...], s: int, num_microbatches: int,
            caps: tuple[int, ...] | None, doubled: bool = False) -> int:
    """1F1B warm-up forwards of stage ``s``: the lanes ``g`` from ``s`` to the end (GPUs; a
    split stage's replicas count once, as they work on one microbatch together), or
    ``2g - 1`` (``doubled``, ZB-H2's extra warm-up forwards), at most m. With ``caps``
    (microbatches each stage may hold in flight, from its memory) the warm-up is also at most
    ``caps[t]`` for every stage ``t <= s``, so it never grows along the pipeline (the 1F1B
    deadlock-freedom condition)."""
    gpus = sum(stage.lanes for stage in stages[s:])
    natural = min(num_microbatches, 2 * gpus - 1 if doubled else gpus)
    return natural if caps is None else max(1, min(natural, *caps[:s + 1]))


def _steady_state(forwards: list[Action], steps: list[list[Action]], warm: int) -> list[Action]:
    """``warm`` forwards, then each step's backward actions followed by the next forward."""
    sequence = forwards[:warm]
    for index, step in enumerate(steps):
        sequence.extend(step)
        if warm + index < len(forwards):
            sequence.append(forwards[warm + index])
    return sequence


def _distribute(stages: tuple[Stage, ...], sequences: list[list[Action]],
                num_devices: int) -> tuple[tuple[Action, ...], ...]:
    """Each stage's global sequence split onto its replicas by microbatch."""
    orders: list[list[Action]] = [[] for _ in range(num_devices)]
    for stage, sequence in zip(stages, sequences, strict=True):
        for action in sequence:
            for device in stage.devices_for(action.microbatch):
                orders[device].append(action)
    return tuple(tuple(order) for order in orders)


@_kept_per_layout
def gpipe_orders(stages: tuple[Stage, ...], num_devices: int,
                 num_microbatches: int) -> tuple[tuple[Action, ...], ...]:
    """GPipe (Huang et al., NeurIPS 2019): every forward, then every backward, in order."""
    def order(s: int, mbs: list[int]) -> list[Action]:
        return [Action(s, "F", j) for j in mbs] + [Action(s, "B", j) for j in mbs]
    return _assemble(stages, num_devices, num_microbatches, order)


@_kept_per_layout
def one_f_one_b_orders(stages: tuple[Stage, ...], num_devices: int, num_microbatches: int,
                       caps: tuple[int, ...] | None = None) -> tuple[tuple[Action, ...], ...]:
    """1F1B / PipeDream-Flush (Narayanan et al., ICML 2021): stage ``s`` runs ``w_s`` warm-up
    forwards, then alternates one backward and one forward, then drains. ``w_s`` is the number
    of GPUs from stage ``s`` to the end (``p - s`` without replication); it never grows along
    the pipeline, which keeps the schedule deadlock-free. A replicated stage writes this global
    sequence once and each replica keeps its own microbatches, in the same order. ``caps``
    lowers the warm-up to what memory holds (see ``_warmup``)."""
    m = num_microbatches
    sequences = [_steady_state([Action(s, "F", j) for j in range(m)],
                               [[Action(s, "B", j)] for j in range(m)],
                               _warmup(stages, s, m, caps))
                 for s in range(len(stages))]
    return _distribute(stages, sequences, num_devices)


def interleaved_rounds(num_microbatches: int, pp: int) -> list[int]:
    """Sizes of the rounds interleaved 1F1B walks a pipeline's microbatches in: ``r = max(1,
    m // pp)`` rounds as equal as possible (the first ``m % r`` one larger), so each holds at
    least ``pp`` microbatches when ``m >= pp`` (one round of all ``m`` otherwise). With ``m`` a
    multiple of ``r`` this is the rule of torch's ``ScheduleInterleaved1F1B`` (rounds of
    ``m / r``; Megatron's rounds of ``pp`` when ``pp`` divides ``m``); torch refuses other
    ``m``, which the uneven rounds cover. A round smaller than ``pp`` after a larger one (rounds
    of ``pp`` and a short remainder) deadlocks: the short round's next chunk is due on rank 0
    before its microbatches have left the last rank."""
    rounds = max(1, num_microbatches // pp)
    size, larger = divmod(num_microbatches, rounds)
    return [size + 1] * larger + [size] * (rounds - larger)


def interleaved_rank_order(chunks: int, microbatches: list[int], pp: int,
                           rank: int) -> list[Action]:
    """Rank ``rank``'s interleaved 1F1B order over ``microbatches`` (one replica pipeline):
    forwards round by round (``interleaved_rounds``), each round through the chunks in order
    (chunk ``c`` is stage ``c * pp + rank``), backwards the same rounds in reverse chunk
    order; ``(v - 1) G + 2 (pp - rank - 1)`` warm-up forwards (``G`` the first round's size:
    Megatron's and torch's warm-up), one more forward, then one backward and one forward at a
    time, then the remaining backwards."""
    v, start, rounds = chunks, 0, []
    for size in interleaved_rounds(len(microbatches), pp):
        rounds.append(microbatches[start:start + size])
        start += size
    forwards = [Action(c * pp + rank, "F", j) for group in rounds for c in range(v)
                for j in group]
    backwards = [Action(c * pp + rank, "B", j) for group in rounds
                 for c in range(v - 1, -1, -1) for j in group]
    warm = min(len(forwards), (v - 1) * len(rounds[0]) + 2 * (pp - rank - 1) + 1)
    return _steady_state(forwards, [[b] for b in backwards], warm)


@_kept_per_layout
def interleaved_orders(chunks: int, num_microbatches: int,
                       groups: tuple[tuple[int, ...], ...],
                       num_devices: int) -> tuple[tuple[Action, ...], ...]:
    """Interleaved 1F1B (Narayanan et al., SC 2021) on ``p = len(groups)`` pipeline ranks,
    each rank a group of ``d`` data-parallel replicas: GPU ``groups[k][i]`` holds stages
    ``k, k + p, ...`` for the microbatches ``j`` with ``j % d == i`` and runs
    ``interleaved_rank_order`` on them, for any number of microbatches."""
    p, d = len(groups), len(groups[0])
    full: list[tuple[Action, ...]] = [()] * num_devices
    for replica in range(d):
        local = list(range(replica, num_microbatches, d))
        for k in range(p):
            full[groups[k][replica]] = tuple(interleaved_rank_order(chunks, local, p, k))
    return tuple(full)


@_kept_per_layout
def zb_h1_orders(stages: tuple[Stage, ...], num_devices: int, num_microbatches: int,
                 caps: tuple[int, ...] | None = None,
                 doubled: bool = False) -> tuple[tuple[Action, ...], ...]:
    """ZB-H1 (Qi et al., ICLR 2024, section 2.1 and Figure 3 top): the 1F1B order with the
    backward split into input gradient ``I`` (in B's place) and weight gradient ``W``; stage
    ``s`` runs ``W`` of microbatch ``i`` right after ``I`` of microbatch ``i + s`` and its last
    ``s`` W's after its final I, so every stage keeps the same number of microbatches in flight
    and the tail bubbles fill with W's. Replicated stages keep their microbatches of it.
    ``doubled`` gives ZB-H2's longer warm-up (``zb_h2_orders``)."""
    m = num_microbatches
    sequences = []
    for s in range(len(stages)):
        steps = [[Action(s, "I", j)] + ([Action(s, "W", j - s)] if j >= s else [])
                 for j in range(m)]
        sequence = _steady_state([Action(s, "F", j) for j in range(m)], steps,
                                 _warmup(stages, s, m, caps, doubled))
        sequences.append(sequence + [Action(s, "W", j) for j in range(max(0, m - s), m)])
    return _distribute(stages, sequences, num_devices)


def zb_h2_orders(stages: tuple[Stage, ...], num_devices: int, num_microbatches: int,
                 caps: tuple[int, ...] | None = None) -> tuple[tuple[Action, ...], ...]:
    """ZB-H2 (Qi et al., ICLR 2024, section 2.1 and Figure 3 bottom): ZB-H1's order with
    ``2(p - s) - 1`` warm-up forwards on stage ``s`` instead of ``p - s`` (about twice the
    microbatches in flight: the extra forwards fill the bubble before the first I). ``caps``
    lowers the warm-up to what memory holds; replicated stages keep their microbatches."""
    return zb_h1_orders(stages, num_devices, num_microbatches, caps, doubled=True)


@_kept_per_layout
def zb_v_orders(num_microbatches: int, groups: tuple[tuple[int, ...], ...],
                num_devices: int) -> tuple[tuple[Action, ...], ...]:
    """ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, section 6): ``2p``
    stages in a V over ``p = len(groups)`` pipeline ranks, rank ``k`` holding stage ``k`` (the
    way down) and stage ``2p - 1 - k`` (the way up), so the turn at the last rank needs no
    transfer; backwards split into I and W. Rank ``k`` runs, for its down stage ``a`` and up
    stage ``b``: ``2(p - k) - 1`` forwards of ``a``; ``k`` times F of ``b`` then F of ``a``;
    ``p - k`` times F, I, W of ``b``; then, while forwards remain, F of ``a`` (if any left),
    I and W of ``a``, F, I and W of ``b``; cool-down: ``k`` times I of ``a`` then I of ``b``;
    ``p - k`` times I of ``a`` and the oldest W of ``a``; the remaining W's of ``b``, then of
    ``a``. With fewer than ``2p - 1`` microbatches the schedule is built for ``2p - 1`` and the
    missing microbatches' actions are dropped. A rank of ``d`` data-parallel replicas runs
    this on each replica's microbatches ``j`` with ``j % d == i``."""
    p, d = len(groups), len(groups[0])
    full: list[tuple[Action, ...]] = [()] * num_devices
    for replica in range(d):
        local = list(range(replica, num_microbatches, d))
        for k in range(p):
            full[groups[k][replica]] = tuple(Action(stage, kind, local[j])
                                             for stage, kind, j in _zb_v_rank(p, k, len(local)))
    return tuple(full)


@lru_cache(maxsize=1024)
def _zb_v_rank(p: int, k: int, count: int) -> tuple[tuple[int, str, int], ...]:
    """Rank ``k``'s ZB-V order for ``count`` microbatches as (stage, kind, local microbatch):
    built for ``n = max(2p - 1, count)``, the actions of microbatches ``count`` and later
    dropped (the same for every replica with ``count`` microbatches: computed once)."""
    n = max(2 * p - 1, count)
    down, up = k, 2 * p - 1 - k
    done = {(down, kind): 0 for kind in "FIW"} | {(up, kind): 0 for kind in "FIW"}
    order: list[tuple[int, str, int]] = []

    def run(stage: int, kind: str) -> None:
        order.append((stage, kind, done[(stage, kind)]))
        done[(stage, kind)] += 1

    for _ in range(2 * (p - k) - 1):
        run(down, "F")
    for _ in range(k):
        run(up, "F")
        run(down, "F")
    for _ in range(p - k):
        for kind in "FIW":
            run(up, kind)
    while done[(up, "F")] < done[(down, "F")] or done[(down, "F")] < n:
        if done[(down, "F")] < n:
            run(down, "F")
        for stage in (down, up):
            for kind in ("I", "W") if stage == down else "FIW":
                run(stage, kind)
    for _ in range(k):
        run(down, "I")
        run(up, "I")
    for _ in range(p - k):
        run(down, "I")
        run(down, "W")
    for stage in (up, down):
        while done[(stage, "W")] < done[(stage, "I")]:
            run(stage, "W")
    return tuple(action for action in order if action[2] < count)


def _kind_first(kinds: tuple[str, ...]) -> Callable[[Action], tuple]:
    rank = {kind: i for i, kind in enumerate(kinds)}

    def priority(action: Action) -> tuple:
        deeper = -action.stage if action.kind != "F" else action.stage
        return (rank[action.kind], action.microbatch, deeper)
    return priority


def backward_first_dispatch(num_stages: int, caps: tuple[int, ...], split: bool) -> Dispatch:
    """List scheduling, ready backwards (I or B) before forwards before weight gradients,
    oldest microbatch first; at most ``caps[s]`` microbatches in flight on stage ``s``."""
    kinds = ("I", "F", "W") if split else ("B", "F")
    return Dispatch(f"list-bwd-first{'-split' if split else ''}", _kind_first(kinds),
                    caps, split, kinds)


def critical_path_dispatch(remaining: list[tuple[float, float]], caps: tuple[int, ...],
                           split: bool) -> Dispatch:
    """List scheduling by highest remaining path (HLF): ``remaining[s]`` is (seconds left
    after stage ``s``'s forward, after its backward) along the chain; ties: oldest microbatch."""
    def priority(action: Action) -> tuple:
        after_forward, after_backward = remaining[action.stage]
        level = {"F": after_forward, "B": after_backward, "I": after_backward, "W": 0.0}
        return (-level[action.kind], action.microbatch)
    return Dispatch(f"list-critical-path{'-split' if split else ''}", priority, caps, split,
                    tuple(map(tuple, remaining)))
