"""Simulate and score training iterations in one call: the public entry point of the layer."""

from __future__ import annotations

from dataclasses import dataclass

from dlsched.errors import ConfigError
from dlsched.hardware.topology import Topology
from dlsched.sim.timeline import Timeline, _union_length
from dlsched.training.iteration import COLLECTIVES, IterationRun, simulate_iterations
from dlsched.training.policies import DLSCHED_CANDIDATES, POLICY_ALIASES, TRAINING_POLICIES
from dlsched.training.workload import Workload


@dataclass(frozen=True)
class TrainingResult:
    """One workload under one policy: the reported (last) iteration's time, the compute-only
    time and exposed communication (seconds), per-dimension bandwidth utilization while any
    collective is pending in that iteration, and the whole run's timeline."""

    workload: Workload
    topology: Topology
    policy: str
    run: IterationRun
    iteration_s: float
    compute_s: float
    dims: tuple[tuple[str, float], ...]
    plan: str = ""

    @property
    def timeline(self) -> Timeline:
        """Every span of the run: compute, collectives and each network dimension."""
        return self.run.timeline

    @property
    def exposed_comm_s(self) -> float:
        """Iteration time minus compute-only time, seconds."""
        return max(0.0, self.iteration_s - self.compute_s)

    def row(self) -> dict[str, object]:
        """A flat record for tables, CSV and JSON (seconds, fractions)."""
        record: dict[str, object] = {
            "workload": self.workload.name, "topology": self.topology.name,
            "policy": self.policy, "plan": self.plan, "iteration_s": self.iteration_s,
            "compute_s": self.compute_s,
            "exposed_comm_s": self.exposed_comm_s,
            "comm_fraction": self.exposed_comm_s / self.iteration_s,
        }
        for index, (_, utilization) in enumerate(self.dims, start=1):
            record[f"dim{index}_bw_util"] = utilization
        return record


def _dimension_utilization(run: IterationRun, topology: Topology) -> tuple[tuple[str, float], ...]:
    """Bytes each dimension moved in the last iteration / (bandwidth x time during which some
    collective was pending in it); spans crossing the window count pro rata."""
    start, end = run.starts[-2], run.starts[-1]
    pending = _union_length([(max(s.start, start), min(s.end, end))
                             for s in run.timeline.spans
                             if s.resource == COLLECTIVES and s.end > start and s.start < end])
    result = []
    for index, dim in enumerate(topology.dims):
        name = f"dim{index + 1} {dim.short_name}"
        moved = 0.0
        for span in run.timeline.spans:
            if span.resource == name and span.end > start and span.start < end:
                inside = min(span.end, end) - max(span.start, start)
                moved += span.num_bytes * (inside / span.duration if span.duration > 0 else 1)
        result.append((name, moved / (dim.bandwidth * pending) if pending > 0 else 0.0))
    return tuple(result)


def run_training(workload: Workload, topology: Topology, policy: str = "dlsched",
                 iterations: int = 2, chunks: int = 64, concurrency: int = 1) -> TrainingResult:
    """Simulate ``iterations`` iterations of ``workload`` on ``topology`` under ``policy``
    (``baseline``, ``themis``, ``themis-inflight``, ``dlsched``/``ours`` or ``ideal``) with
    ``chunks`` chunks per collective and ``concurrency`` chunks per dimension at once."""
    name = POLICY_ALIASES.get(policy, policy)
    if name not in TRAINING_POLICIES:
        raise ConfigError(f"policy: unknown training policy {policy!r}; accepted: "
                          + ", ".join([*TRAINING_POLICIES, *POLICY_ALIASES]))
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise ConfigError(f"iterations: must be an integer >= 1 (got {iterations!r})")
    if not isinstance(chunks, int) or chunks < 1:
        raise ConfigError(f"chunks: must be an integer >= 1 (got {chunks!r})")
    if not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigError(f"concurrency: must be an integer >= 1 (got {concurrency!r})")
    candidates = DLSCHED_CANDIDATES if name == "dlsched" else (TRAINING_POLICIES[name],)
    runs = [(simulate_iterations(workload, topology, candidate, iterations, chunks, concurrency),
             candidate.name) for candidate in candidates]
    run, plan = min(runs, key=lambda pair: pair[0].periods[-1])
    return TrainingResult(workload, topology, name, run, run.periods[-1], workload.compute_s,
                          _dimension_utilization(run, topology), plan)
