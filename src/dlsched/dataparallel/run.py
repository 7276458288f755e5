"""Plan, validate, simulate and score a data-parallel iteration: the domain's entry point."""

from __future__ import annotations

from dataclasses import dataclass

from dlsched.dataparallel.bounds import lower_bound
from dlsched.dataparallel.plan import DPPlan, validate_plan
from dlsched.dataparallel.policies import POLICIES
from dlsched.dataparallel.problem import DPProblem
from dlsched.dataparallel.simulate import execute
from dlsched.errors import ConfigError
from dlsched.sim.timeline import Timeline


@dataclass(frozen=True)
class DPResult:
    """One policy on one problem: iteration and bound in seconds, and the timeline."""

    problem: DPProblem
    plan: DPPlan
    timeline: Timeline
    time_s: float
    bound_s: float

    @property
    def time_over_bound(self) -> float:
        """Iteration time / lower bound (>= 1)."""
        return self.time_s / self.bound_s

    def row(self) -> dict[str, object]:
        """A flat record for tables, CSV and JSON (seconds)."""
        comm = [s for s in self.timeline.spans if s.kind == "allreduce"]
        return {"model": self.problem.model, "policy": self.plan.policy,
                "time_s": self.time_s, "bound_s": self.bound_s,
                "time_over_bound": self.time_over_bound,
                "backward_s": self.problem.backward_end,
                "forward_s": sum(self.problem.forward), "messages": len(comm),
                "comm_busy_s": sum(s.duration for s in comm),
                "peak_in_flight": peak_overlap([(s.start, s.end) for s in comm])}


def peak_overlap(intervals: list[tuple[float, float]]) -> int:
    """Most intervals ``(start s, end s)`` open at one moment (an end before a start at the
    same moment): the most all-reduces a simulated plan actually ran at once."""
    events = sorted([(end, -1) for _, end in intervals] + [(start, 1) for start, _ in intervals])
    peak = current = 0
    for _, change in events:
        current += change
        peak = max(peak, current)
    return peak


def run_dataparallel(problem: DPProblem, policy: str) -> DPResult:
    """Plan with ``policy`` (a name in POLICIES), validate, simulate and bound."""
    if policy not in POLICIES:
        raise ConfigError(f"policy: unknown data-parallel policy {policy!r}; accepted: "
                          + ", ".join(POLICIES))
    return simulate_plan(problem, POLICIES[policy](problem))


def simulate_plan(problem: DPProblem, plan: DPPlan) -> DPResult:
    """Validate ``plan`` on ``problem``, simulate it and bound the iteration (seconds)."""
    validate_plan(problem, plan)
    execution = execute(problem, plan)
    return DPResult(problem, plan, execution.timeline, execution.time, lower_bound(problem))
