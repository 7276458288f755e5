"""Two stages per pipeline rank in the dlsched planner: ZB-V, DualPipeV and DualPipe.

A partition is a **V** when its ``2p`` stages run on ``p`` disjoint groups of equal size with
stage ``s`` and stage ``2p - 1 - s`` on the same group (Qi et al., "Zero Bubble Pipeline
Parallelism", ICLR 2024, section 6; the V of DualPipeV, deepseek-ai/DualPipe). It is
**bidirectional** (DualPipe, DeepSeek-AI, "DeepSeek-V3 Technical Report", 2024, section
3.2.1) when its ``p`` (even) stages each alternate the GPUs of rank ``s`` and of rank
``p - 1 - s`` (``plans.dualpipe.dual_devices``). On such partitions the planner tries the
schedules' fixed orders (``two_stage_orders``) beside its list scheduling, and refinement
re-runs them when moving cuts, so a baseline's V or DualPipe plan is re-balanced for
heterogeneous GPUs and links (each cut move keeps the stages' GPUs).

The conditions are the papers': a V needs two chunks per rank (``2p`` stages on ``p``
ranks), split backwards (I and W); DualPipe an even number of ranks and, per data-parallel
replica, an even number of microbatches, at least twice the ranks; DualPipeV at least twice
the ranks per replica (the authors' repository asserts both); ZB-V runs any number.

``v_partitions`` proposes dlsched's own V partitions: the planner's device order (recursive
bisection, ``ordering.device_order``) cut into ``p`` groups of ``r`` consecutive GPUs, the
``2p`` stages cut so that every stage takes the same time on its group's slowest GPU
(``partition.balanced_stages``: a faster rank gets more blocks on both its stages).
"""

from __future__ import annotations

from dlsched.errors import ConfigError
from dlsched.pipeline.chains.problem import PipelineProblem
from dlsched.pipeline.planners.partition import balanced_stages
from dlsched.pipeline.plans.actions import Action
from dlsched.pipeline.plans.dualpipe import (
    dual_devices,
    dualpipe_grid_units,
    dualpipev_units,
    flatten,
)
from dlsched.pipeline.plans.plan import Stage
from dlsched.pipeline.plans.schedules import zb_v_orders

TWO_STAGE = ("zb_v", "dualpipev", "dualpipe")
"""dlsched's names of the fixed two-stage orders (``two_stage_orders``)."""
NOTE_NAMES = {"zb-v": "zb_v", "dualpipev": "dualpipev", "dualpipe": "dualpipe"}
"""The baselines' schedule notes of those orders."""
PAIRED_ONLY = ("dualpipe", "dualpipev")
"""Baselines whose plans the planner takes among the two-stage candidates only (step 6)."""

Orders = tuple[tuple[tuple[Action, ...], ...], tuple[frozenset[int], ...]]


def v_groups(stages: tuple[Stage, ...]) -> tuple[tuple[int, ...], ...] | None:
    """The ``p`` rank groups of a V partition (stage ``s`` and ``2p - 1 - s`` on group
    ``s``), or None when ``stages`` is not one."""
    count = len(stages)
    if count < 2 or count % 2:
        return None
    p = count // 2
    groups = tuple(stage.devices for stage in stages[:p])
    if any(stages[count - 1 - s].devices != groups[s] for s in range(p)):
        return None
    return groups if _disjoint_equal(groups) else None


def dual_groups(stages: tuple[Stage, ...]) -> tuple[tuple[int, ...], ...] | None:
    """The ``p`` rank groups of a bidirectional (DualPipe) partition, or None."""
    p = len(stages)
    if p < 2 or p % 2 or any(len(stage.devices) % 2 or stage.split for stage in stages):
        return None
    groups = tuple(stage.devices[0::2] for stage in stages)
    if not _disjoint_equal(groups) or dual_devices(groups) != tuple(s.devices for s in stages):
        return None
    return groups


def _disjoint_equal(groups: tuple[tuple[int, ...], ...]) -> bool:
    gpus = [d for group in groups for d in group]
    return len(set(gpus)) == len(gpus) and len({len(group) for group in groups}) == 1


def two_stage_orders(name: str, stages: tuple[Stage, ...], num_devices: int,
                     num_microbatches: int) -> Orders | None:
    """The fixed orders and joined units of ``name`` (``TWO_STAGE``) on ``stages``, or None
    when the partition has not the schedule's shape or its conditions are unmet."""
    groups = dual_groups(stages) if name == "dualpipe" else v_groups(stages)
    if groups is None or any(stage.split for stage in stages):
        return None
    if name == "zb_v":
        return zb_v_orders(num_microbatches, groups, num_devices), ()
    make = dualpipe_grid_units if name == "dualpipe" else dualpipev_units
    try:
        return flatten(make(num_microbatches, groups, num_devices))
    except ConfigError:
        return None


def v_partitions(problem: PipelineProblem, order: list[int]) -> list[tuple[Stage, ...]]:
    """dlsched's V partitions (module docstring): for every replica count ``r`` (a power of
    two dividing the GPU count, 1 only without replication) with ``p = N / r >= 2`` ranks
    and ``2p`` blocks at least, the balanced V on ``order``'s consecutive groups."""
    n, blocks = len(order), problem.chain.num_blocks
    if problem.chain.input_grad_fraction is None:
        return []
    found = []
    r = 1
    while r <= (n if problem.replicate else 1):
        p = n // r
        if n % r == 0 and p >= 2 and 2 * p <= blocks:
            groups = [tuple(order[k * r:(k + 1) * r]) for k in range(p)]
            stages = balanced_stages(problem, groups + groups[::-1])
            if v_groups(stages) is not None:
                found.append(stages)
        r *= 2
    return found
