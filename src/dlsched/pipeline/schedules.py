"""Microbatch schedules: per-GPU action orders for a given partition and mapping.

Fixed generators (GPipe, 1F1B / PipeDream-Flush, interleaved 1F1B) write the orders directly;
list-scheduling rules (``Dispatch``) let the simulator build the order: ZB-H1 and the planner's
own rules. All stages' replicas follow their stage's order on their own microbatches.
"""

from __future__ import annotations

from collections.abc import Callable

from dlsched.pipeline.actions import Action
from dlsched.pipeline.plan import Stage
from dlsched.pipeline.simulate import Dispatch


def _local(stage: Stage, replica: int, num_microbatches: int) -> list[int]:
    r = len(stage.devices)
    return [j for j in range(num_microbatches) if j % r == replica]


def _assemble(stages: tuple[Stage, ...], num_devices: int, num_microbatches: int,
              order_of: Callable[[int, list[int]], list[Action]]) -> tuple[tuple[Action, ...], ...]:
    orders: list[list[Action]] = [[] for _ in range(num_devices)]
    for s, stage in enumerate(stages):
        for replica, device in enumerate(stage.devices):
            orders[device].extend(order_of(s, _local(stage, replica, num_microbatches)))
    return tuple(tuple(order) for order in orders)


def _warmup(stages: tuple[Stage, ...], s: int, num_microbatches: int) -> int:
    """1F1B warm-up forwards of stage ``s``: the GPUs from ``s`` to the end (at most m)."""
    return min(num_microbatches, sum(len(stage.devices) for stage in stages[s:]))


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
            orders[stage.device_for(action.microbatch)].append(action)
    return tuple(tuple(order) for order in orders)


def gpipe_orders(stages: tuple[Stage, ...], num_devices: int,
                 num_microbatches: int) -> tuple[tuple[Action, ...], ...]:
    """GPipe (Huang et al., NeurIPS 2019): every forward, then every backward, in order."""
    def order(s: int, mbs: list[int]) -> list[Action]:
        return [Action(s, "F", j) for j in mbs] + [Action(s, "B", j) for j in mbs]
    return _assemble(stages, num_devices, num_microbatches, order)


def one_f_one_b_orders(stages: tuple[Stage, ...], num_devices: int,
                       num_microbatches: int) -> tuple[tuple[Action, ...], ...]:
    """1F1B / PipeDream-Flush (Narayanan et al., ICML 2021): stage ``s`` runs ``w_s`` warm-up
    forwards, then alternates one backward and one forward, then drains. ``w_s`` is the number
    of GPUs from stage ``s`` to the end (``p - s`` without replication); it never grows along
    the pipeline, which keeps the schedule deadlock-free. A replicated stage writes this global
    sequence once and each replica keeps its own microbatches, in the same order."""
    m = num_microbatches
    sequences = [_steady_state([Action(s, "F", j) for j in range(m)],
                               [[Action(s, "B", j)] for j in range(m)], _warmup(stages, s, m))
                 for s in range(len(stages))]
    return _distribute(stages, sequences, num_devices)


def interleaved_orders(chunks: int, num_microbatches: int, devices: tuple[int, ...],
                       num_devices: int) -> tuple[tuple[Action, ...], ...]:
    """Interleaved 1F1B (Narayanan et al., SC 2021): GPU ``k`` holds stages ``k, k+p, ...``;
    forwards visit chunks in groups of ``p`` microbatches, warm-up ``2(p-k-1) + (v-1)p``."""
    p, v, m = len(devices), chunks, num_microbatches
    total = m * v
    orders: list[tuple[Action, ...]] = []
    for k in range(p):
        forwards = [_virtual(k, p, v, i, forward=True) for i in range(total)]
        backwards = [_virtual(k, p, v, i, forward=False) for i in range(total)]
        warm = min(total, 2 * (p - k - 1) + (v - 1) * p + 1)
        orders.append(tuple(_steady_state(forwards, [[b] for b in backwards], warm)))
    full: list[tuple[Action, ...]] = [()] * num_devices
    for k, device in enumerate(devices):
        full[device] = orders[k]
    return tuple(full)


def _virtual(rank: int, p: int, v: int, index: int, forward: bool) -> Action:
    chunk = (index // p) % v
    if not forward:
        chunk = v - 1 - chunk
    microbatch = (index // (p * v)) * p + index % p
    return Action(chunk * p + rank, "F" if forward else "B", microbatch)


def zb_h1_orders(stages: tuple[Stage, ...], num_devices: int,
                 num_microbatches: int) -> tuple[tuple[Action, ...], ...]:
    """ZB-H1 (Qi et al., ICLR 2024, section 2.1 and Figure 3 top): the 1F1B order with the
    backward split into input gradient ``I`` (in B's place) and weight gradient ``W``; stage
    ``s`` runs ``W`` of microbatch ``i`` right after ``I`` of microbatch ``i + s`` and its last
    ``s`` W's after its final I, so every stage keeps the same number of microbatches in flight
    and the tail bubbles fill with W's. Replicated stages keep their microbatches of it."""
    m = num_microbatches
    sequences = []
    for s in range(len(stages)):
        steps = [[Action(s, "I", j)] + ([Action(s, "W", j - s)] if j >= s else [])
                 for j in range(m)]
        sequence = _steady_state([Action(s, "F", j) for j in range(m)], steps,
                                 _warmup(stages, s, m))
        sequences.append(sequence + [Action(s, "W", j) for j in range(max(0, m - s), m)])
    return _distribute(stages, sequences, num_devices)


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
                    caps, split)


def critical_path_dispatch(remaining: list[tuple[float, float]], caps: tuple[int, ...],
                           split: bool) -> Dispatch:
    """List scheduling by highest remaining path (HLF): ``remaining[s]`` is (seconds left
    after stage ``s``'s forward, after its backward) along the chain; ties: oldest microbatch."""
    def priority(action: Action) -> tuple:
        after_forward, after_backward = remaining[action.stage]
        level = {"F": after_forward, "B": after_backward, "I": after_backward, "W": 0.0}
        return (-level[action.kind], action.microbatch)
    return Dispatch(f"list-critical-path{'-split' if split else ''}", priority, caps, split)
