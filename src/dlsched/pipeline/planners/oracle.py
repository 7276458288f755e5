"""Exact oracle for small instances: every partition and every mapping of stages to disjoint
GPU sets, and for each an optimal schedule from a MILP (``scipy.optimize.milp``, HiGHS).

The MILP is the disjunctive job-shop model of one iteration: a start time per action, one
binary per pair of actions on the same GPU (which runs first), precedence along each
microbatch's forward and backward path with the uncontended transfer time between GPUs, and the
makespan after every action and after each replicated stage's all-reduce. Transfers never slow
each other down in it, so its optimum is a lower bound on the best simulated schedule of that
mapping (equal when links are not shared). Memory limits are not modelled: use instances whose
GPUs have room for every microbatch. Mappings are visited in order of ``plan_bound`` and
pruned once their bound reaches the best makespan found.

The solver's status is checked: a mapping whose MILP stops at its time limit contributes its
best schedule and the solver's dual bound, so the result says whether the optimum is proven
(``proven``) or only the best found, with its lower bound and relative ``gap``.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np

from dlsched.pipeline.chains.problem import PipelineProblem
from dlsched.pipeline.planners.enumeration import all_partitions
from dlsched.pipeline.plans.actions import Action
from dlsched.pipeline.plans.plan import PipelinePlan, Stage, host_transfers
from dlsched.pipeline.plans.schedules import gpipe_orders
from dlsched.pipeline.simulation.action_times import ActionTimes
from dlsched.pipeline.simulation.bounds import plan_bound


@dataclass(frozen=True)
class OracleResult:
    """Best makespan found (seconds) in the contention-free model, its plan, mappings
    solved, a proven lower bound on the optimum (seconds) and whether the optimum is proven."""

    iteration_s: float
    plan: PipelinePlan
    solved: int
    lower_bound_s: float
    proven: bool

    @property
    def gap(self) -> float:
        """Relative gap between the best makespan found and the lower bound (0 if proven)."""
        return 0.0 if self.proven else (self.iteration_s - self.lower_bound_s) / self.iteration_s


@dataclass(frozen=True)
class MilpSchedule:
    """One mapping's MILP: best makespan (s), its orders, the solver's dual bound (s) and
    whether HiGHS proved optimality (status 0) rather than stopping at its time limit."""

    makespan: float
    orders: tuple[tuple[Action, ...], ...]
    lower_bound: float
    optimal: bool


def _candidates(problem: PipelineProblem) -> list[tuple[float, tuple[Stage, ...]]]:
    n, m = problem.graph.num_devices, problem.num_microbatches
    found = []
    for stages in all_partitions(problem.chain.num_blocks, n, every_order=True):
        plan = PipelinePlan("oracle", stages, gpipe_orders(stages, n, m), m)
        found.append((plan_bound(problem, plan), stages))
    return sorted(found, key=lambda item: item[0])


def oracle(problem: PipelineProblem, time_limit_s: float = 20.0) -> OracleResult:
    """The best schedule over all partitions, mappings and (full-backward) schedules;
    ``proven`` when every MILP it relied on was solved to optimality."""
    best_time, best_plan, solved, lower = np.inf, None, 0, np.inf
    for bound, stages in _candidates(problem):
        if bound >= best_time * (1 - 1e-9):
            lower = min(lower, bound)
            break
        milp_result = schedule_milp(problem, stages, time_limit_s)
        solved += 1
        lower = min(lower, max(bound, milp_result.lower_bound))
        if milp_result.makespan < best_time:
            best_time = milp_result.makespan
            best_plan = PipelinePlan("oracle", stages, milp_result.orders,
                                     problem.num_microbatches)
    lower = min(lower, best_time)
    proven = lower >= best_time * (1 - 1e-6)
    return OracleResult(float(best_time), best_plan, solved, float(lower), proven)


def _actions(problem: PipelineProblem, stages: tuple[Stage, ...],
             split: bool = False) -> dict[Action, tuple]:
    """Each action -> (device, duration in seconds, the simulator's: compute, overhead and
    host time of its transfers); with ``split`` the backwards as I and W
    (``ActionTimes.duration``)."""
    result = {}
    if split:
        times = ActionTimes(problem, stages)
        for s, stage in enumerate(stages):
            for j in range(problem.num_microbatches):
                for kind in "FIW":
                    action = Action(s, kind, j)
                    result[action] = (stage.device_for(j),
                                      times.duration(action, stage.device_for(j)))
        return result
    for s, stage in enumerate(stages):
        forward, backward = problem.stage_flops(stage)
        for j in range(problem.num_microbatches):
            device = stage.device_for(j)
            gpu = problem.graph.devices[device]
            for kind, work in (("F", forward), ("B", backward)):
                action = Action(s, kind, j)
                result[action] = (device, work / gpu.flops + gpu.overhead
                                  + gpu.transfer_overhead * host_transfers(stages, action,
                                                                           device))
    return result


def _edges(problem: PipelineProblem, stages: tuple[Stage, ...],
           actions: dict[Action, tuple]) -> list[tuple[Action, Action, float]]:
    """Precedences (before, after, delay seconds) along every microbatch's path; with split
    backwards the input gradients (I) carry the path and each W follows its I."""
    edges, last = [], len(stages) - 1
    back = "I" if Action(last, "I", 0) in actions else "B"
    for j in range(problem.num_microbatches):
        edges.append((Action(last, "F", j), Action(last, back, j), 0.0))
        if back == "I":
            edges.extend((Action(s, "I", j), Action(s, "W", j), 0.0) for s in range(last + 1))
        for s in range(last):
            size = float(problem.chain.activation_bytes[stages[s].last - 1])
            a, b = actions[Action(s, "F", j)][0], actions[Action(s + 1, "F", j)][0]
            edges.append((Action(s, "F", j), Action(s + 1, "F", j),
                          problem.graph.transfer_time(a, b, size)))
            edges.append((Action(s + 1, back, j), Action(s, back, j),
                          problem.graph.transfer_time(b, a, size)))
    return edges


def schedule_milp(problem: PipelineProblem, stages: tuple[Stage, ...],
                  time_limit_s: float = 20.0, split: bool = False) -> MilpSchedule:
    """Best makespan (s) of one mapping in the contention-free model, its orders and the
    solver's proof status and dual bound; ``split``: backwards as I and W (every schedule of
    the mapping with split backwards, ZB-V's and DualPipe's among them: their joined units
    and memory only restrict it, so its optimum bounds them from below)."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    actions = _actions(problem, stages, split)
    names = list(actions)
    index = {a: i for i, a in enumerate(names)}
    pairs = [(a, b) for a, b in combinations(names, 2) if actions[a][0] == actions[b][0]]
    n_start, n_var = len(names), len(names) + 1 + len(pairs)
    big = sum(d for _, d in actions.values()) + sum(
        delay for _, _, delay in _edges(problem, stages, actions))
    big = big * 1.01 + max(problem.allreduce_time(stage) for stage in stages) + 1e-9
    rows, lower, upper = [], [], []
    unit = big / 1000.0  # times in the MILP are in units of big/1000 for solver tolerances

    def add(coefficients: dict[int, float], low: float, high: float) -> None:
        row = np.zeros(n_var)
        for k, v in coefficients.items():
            row[k] += v / unit if k > n_start else v
        rows.append(row)
        lower.append(low / unit)
        upper.append(high)

    for a, b, delay in _edges(problem, stages, actions):
        add({index[b]: 1, index[a]: -1}, actions[a][1] + delay, np.inf)
    for k, (a, b) in enumerate(pairs):
        y = n_start + 1 + k
        add({index[b]: 1, index[a]: -1, y: -big}, actions[a][1] - big, np.inf)
        add({index[a]: 1, index[b]: -1, y: big}, actions[b][1], np.inf)
    for a in names:
        tail = actions[a][1] + (problem.allreduce_time(stages[a.stage]) if a.kind in "BW"
                                else 0)
        add({n_start: 1, index[a]: -1}, tail, np.inf)
    cost = np.zeros(n_var)
    cost[n_start] = 1.0
    integrality = np.r_[np.zeros(n_start + 1), np.ones(len(pairs))]
    problem_data = {"c": cost, "integrality": integrality,
                    "constraints": LinearConstraint(np.array(rows), lower, upper),
                    "bounds": Bounds(np.zeros(n_var), np.r_[np.full(n_start + 1, 1000.0),
                                                            np.ones(len(pairs))])}
    options = {"time_limit": time_limit_s, "mip_rel_gap": 1e-7}
    result = milp(**problem_data, options=options)
    if result.x is None:  # HiGHS occasionally fails in presolve; solve again without it
        result = milp(**problem_data, options=options | {"presolve": False})
    if result.x is None:
        raise RuntimeError(f"oracle MILP failed: {result.message}")
    starts = result.x[:n_start]
    orders: list[list[Action]] = [[] for _ in range(problem.graph.num_devices)]
    for a in sorted(names, key=lambda a: (starts[index[a]], a.kind != "F", a)):
        orders[actions[a][0]].append(a)
    makespan = float(result.x[n_start] * unit)
    optimal = result.status == 0
    dual = getattr(result, "mip_dual_bound", None)
    lower = makespan if optimal else float(dual * unit) if dual is not None and \
        np.isfinite(dual) else 0.0
    return MilpSchedule(makespan, tuple(tuple(o) for o in orders), min(lower, makespan), optimal)
