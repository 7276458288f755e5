"""Whether ``simulate`` would refuse a fixed-order plan, found without simulating it: the
plan is valid (``plan.validate_plan``), fits every GPU's memory (``memory.check_memory``),
splits microbatches only where the samples divide, and runs to its end
(``deadlock.stalled_at``)."""

from __future__ import annotations

from weakref import WeakKeyDictionary

from dlsched.hardware.device_graph import DeviceGraph
from dlsched.pipeline.chains.problem import PipelineProblem
from dlsched.pipeline.plans.actions import Action
from dlsched.pipeline.plans.deadlock import stalled_at
from dlsched.pipeline.plans.plan import PipelinePlan, PlanError, Stage, grid, validate_plan
from dlsched.pipeline.simulation.memory import check_memory, peak_memory

# Per planning instance (``PipelineProblem.root``'s graph), the plans (stages, orders,
# microbatches, blocks, GPUs) ``check_plan`` found valid: True once they are also known to
# run to their end.
_CHECKED: WeakKeyDictionary[DeviceGraph, dict[tuple, bool]] = WeakKeyDictionary()


def deadlock_error(orders: tuple[tuple[Action, ...], ...], gpu: int, position: int) -> PlanError:
    """The PlanError of a plan whose ``gpu`` waits forever at ``position`` of its order."""
    return PlanError(f"the plan deadlocks: gpu{gpu} waits forever on {orders[gpu][position]}\n"
                     f"{grid(orders, (gpu, position))}")


def check_split(problem: PipelineProblem, stages: tuple[Stage, ...]) -> None:
    """PlanError when a split stage has a replica count that does not divide the samples."""
    for s, stage in enumerate(stages):
        if stage.split and not problem.chain.can_split(len(stage.devices)):
            raise PlanError(f"stage {s} splits microbatches of {problem.chain.samples} "
                            f"samples across {len(stage.devices)} replicas; the replica "
                            "count must divide the samples")


def check_plan(problem: PipelineProblem, plan: PipelinePlan,
               deadlock: bool = True) -> PipelineProblem:
    """Raise what ``simulate`` would refuse ``plan`` with (PlanError for an invalid or, with
    ``deadlock``, a deadlocking plan, found by ``deadlock.stalled_at`` without simulating;
    ConfigError when it does not fit memory), without running it; the instance it runs on.
    A plan found valid (and running to its end) is not checked for it again (``_CHECKED``:
    grid points of several recomputation modes, and a check before simulating, meet the same
    stages and orders)."""
    problem = problem.for_plan(plan)
    graph = problem.graph
    checked = _CHECKED.setdefault(problem.root.graph, {})
    key = (plan.stages, plan.orders, plan.num_microbatches, problem.chain.num_blocks,
           graph.num_devices, plan.joined)
    runs = checked.get(key)
    if runs is None:
        validate_plan(plan, problem.chain.num_blocks, graph.num_devices)
        checked[key] = runs = False
    check_memory(peak_memory(problem.chain, plan, graph.num_devices),
                 [d.name for d in graph.devices], [d.memory for d in graph.devices])
    check_split(problem, plan.stages)
    if deadlock and not runs:
        stuck = stalled_at(plan.stages, plan.orders, plan.num_microbatches, plan.joined)
        if stuck is not None:
            raise deadlock_error(plan.orders, *stuck)
        checked[key] = True
    return problem
