"""Per-layer and fusion baselines: WFBP, MG-WFBP, PyTorch DDP buckets and Horovod fusion.

DDP and Horovod run one all-reduce at a time (DDP's buckets go to one process group's stream in
order; Horovod's background thread performs its fused operations one after another), so their
plans have ``in_flight`` 1 on any network. ``ddp``/``horovod`` are the shipped defaults,
``ddp-tuned``/``horovod-tuned`` search bucket size, fusion threshold and cycle on the grid
shared by every tuned policy (``tuning.py``).
"""

from __future__ import annotations

import math

from dlsched.dataparallel.cache import cached_plan
from dlsched.dataparallel.plan import DPPlan, Message, message, whole_layer
from dlsched.dataparallel.problem import DPProblem
from dlsched.dataparallel.simulate import iteration_time
from dlsched.dataparallel.tuning import CYCLES, SIZES, grid_search, size_text

MiB = 2**20
DDP_BUCKET = 25 * MiB
DDP_FIRST_BUCKET = 1 * MiB
HOROVOD_FUSION = 64 * MiB
HOROVOD_CYCLE = 5e-3
PHASES = 7  # cycle phases Horovod's time is the median over


def _backward_order(problem: DPProblem) -> list[int]:
    return [layer for layer in reversed(range(problem.num_layers))
            if problem.grad_bytes[layer] > 0]


@cached_plan
def wfbp_plan(problem: DPProblem) -> DPPlan:
    """Wait-free backprop (Poseidon/PS-style): one all-reduce per layer as soon as its gradient
    is ready, FIFO in backward order; the next forward waits for all of them."""
    msgs = [message(problem, [whole_layer(problem, layer)]) for layer in _backward_order(problem)]
    return DPPlan(tuple(msgs), barrier=True, policy="wfbp")


@cached_plan
def mgwfbp_plan(problem: DPProblem) -> DPPlan:
    """MG-WFBP (Shi et al., INFOCOM 2019): walk the layers in backward order and merge the next
    layer into the current message when the message could only start after that layer is ready
    anyway, or when waiting for it costs less than one startup (``cost(0)``)."""
    order = _backward_order(problem)
    startup = problem.comm.cost(0)
    msgs: list[Message] = []
    group: list[int] = []
    free = 0.0
    for position, layer in enumerate(order):
        group.append(layer)
        start = max(free, problem.ready[layer])
        following = order[position + 1] if position + 1 < len(order) else None
        if following is not None and problem.ready[following] - start < startup:
            continue
        msgs.append(message(problem, [whole_layer(problem, g) for g in group]))
        free = max(free, msgs[-1].launch) + problem.comm.cost(msgs[-1].num_bytes)
        group = []
    return DPPlan(tuple(msgs), barrier=True, policy="mgwfbp")


def bucket_plan(problem: DPProblem, bucket_bytes: int = DDP_BUCKET,
                first_bucket_bytes: int = DDP_FIRST_BUCKET) -> DPPlan:
    """PyTorch DDP: tensors in reverse parameter order fill buckets until a bucket reaches its
    cap (the first bucket 1 MiB, then 25 MiB); a bucket is all-reduced when all its tensors are
    ready, buckets in order; the optimizer step (and so the next forward) waits for all."""
    msgs: list[Message] = []
    bucket: list[int] = []
    size, cap = 0, first_bucket_bytes
    for layer in _backward_order(problem):
        bucket.append(layer)
        size += problem.grad_bytes[layer]
        if size >= cap:
            msgs.append(message(problem, [whole_layer(problem, g) for g in bucket]))
            bucket, size, cap = [], 0, bucket_bytes
    if bucket:
        msgs.append(message(problem, [whole_layer(problem, g) for g in bucket]))
    return DPPlan(tuple(msgs), barrier=True, policy="ddp",
                  settings=f"bucket {size_text(bucket_bytes)}, first "
                           f"{size_text(first_bucket_bytes)}")


@cached_plan
def ddp_tuned_plan(problem: DPProblem) -> DPPlan:
    """DDP with its bucket size (``bucket_cap_mb``) tuned on the shared size grid."""
    return grid_search(problem, bucket_plan, {"bucket_bytes": SIZES},
                       {"bucket_bytes": DDP_BUCKET}, "ddp-tuned")


def horovod_plan(problem: DPProblem, fusion_bytes: int = HOROVOD_FUSION,
                 cycle: float = HOROVOD_CYCLE, phase: float | None = None) -> DPPlan:
    """Horovod tensor fusion: every ``cycle`` seconds the background thread fuses the tensors
    that became ready (in readiness order) into messages of up to ``fusion_bytes``; the
    optimizer step waits for all. The thread ticks on its own clock, not aligned with backward:
    its ticks fall at ``phase``, phase + cycle, ... seconds after backward starts. Given no
    phase, the plan is the median iteration over ``PHASES`` evenly spaced phases
    ((i + 1/2) / PHASES x cycle): a typical iteration under a uniformly random phase."""
    if phase is not None:
        return _horovod_at(problem, fusion_bytes, cycle, phase)
    plans = sorted((_horovod_at(problem, fusion_bytes, cycle, (i + 0.5) / PHASES * cycle)
                    for i in range(PHASES)), key=lambda plan: iteration_time(problem, plan))
    return plans[PHASES // 2]


def _horovod_at(problem: DPProblem, fusion_bytes: int, cycle: float, phase: float) -> DPPlan:
    order = _backward_order(problem)  # readiness ascending: each tick takes a prefix
    msgs: list[Message] = []
    position = 0
    while position < len(order):
        tick = _first_tick(problem.ready[order[position]], cycle, phase)
        end = position
        while end < len(order) and problem.ready[order[end]] <= tick + 1e-15:
            end += 1
        ready, position = order[position:end], end
        group: list[int] = []
        size = 0
        for layer in ready:
            if group and size + problem.grad_bytes[layer] > fusion_bytes:
                msgs.append(message(problem, [whole_layer(problem, g) for g in group], tick))
                group, size = [], 0
            group.append(layer)
            size += problem.grad_bytes[layer]
        if group:
            msgs.append(message(problem, [whole_layer(problem, g) for g in group], tick))
    return DPPlan(tuple(msgs), barrier=True, policy="horovod",
                  settings=f"fusion {size_text(fusion_bytes)}, cycle {cycle * 1e3:g} ms, "
                           f"phase {phase * 1e3:.3g} ms")


def _first_tick(ready: float, cycle: float, phase: float) -> float:
    """The first tick phase + k x cycle (k >= 0) at which a gradient ready at ``ready`` (s)
    is seen (ticks without a new gradient send nothing, so they are skipped)."""
    cycles = max(0, math.ceil((ready - phase) / cycle))
    while cycles > 0 and ready <= phase + (cycles - 1) * cycle + 1e-15:
        cycles -= 1
    while ready > phase + cycles * cycle + 1e-15:
        cycles += 1
    return phase + cycles * cycle


@cached_plan
def horovod_tuned_plan(problem: DPProblem) -> DPPlan:
    """Horovod with fusion threshold and cycle time tuned on the shared grid (each point at
    its median phase: users cannot align the cycle with backward)."""
    return grid_search(problem, horovod_plan, {"fusion_bytes": SIZES, "cycle": CYCLES},
                       {"fusion_bytes": HOROVOD_FUSION, "cycle": HOROVOD_CYCLE}, "horovod-tuned")
