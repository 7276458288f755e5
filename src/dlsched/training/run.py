"""Simulate and score training iterations in one call: the public entry point of the layer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from dlsched.collectives.astra_compat import AstraCompat
from dlsched.collectives.plan import CollectiveOp
from dlsched.errors import ConfigError
from dlsched.hardware.topology import Topology
from dlsched.sim.timeline import Timeline, _union_length
from dlsched.training.iteration import IterationRun, simulate_iterations
from dlsched.training.policies import (
    DLSCHED_CANDIDATES,
    POLICY_ALIASES,
    TRAINING_POLICIES,
    TrainingPolicy,
)
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
    collective was pending in it); stages crossing the window count pro rata."""
    start, end = run.starts[-2], run.starts[-1]
    pending = _union_length([(max(a, start), min(b, end)) for a, b in run.collectives
                             if b > start and a < end])
    moved = [0.0] * len(topology.dims)
    for dim, a, b, sent in run.transfers:
        if b > start and a < end:
            moved[dim] += sent * ((min(b, end) - max(a, start)) / (b - a) if b > a else 1.0)
    return tuple((f"dim{index + 1} {dim.short_name}",
                  moved[index] / (dim.bandwidth * pending) if pending > 0 else 0.0)
                 for index, dim in enumerate(topology.dims))


def _check(policies: Sequence[str], iterations: int, chunks: int, concurrency: int) -> list[str]:
    names = [POLICY_ALIASES.get(policy, policy) for policy in policies]
    for policy, name in zip(policies, names, strict=True):
        if name not in TRAINING_POLICIES:
            raise ConfigError(f"policy: unknown training policy {policy!r}; accepted: "
                              + ", ".join([*TRAINING_POLICIES, *POLICY_ALIASES]))
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise ConfigError(f"iterations: must be an integer >= 1 (got {iterations!r})")
    if not isinstance(chunks, int) or chunks < 1:
        raise ConfigError(f"chunks: must be an integer >= 1 (got {chunks!r})")
    if not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigError(f"concurrency: must be an integer >= 1 (got {concurrency!r})")
    return names


def run_policies(workload: Workload, topology: Topology, policies: Sequence[str],
                 iterations: int = 2, chunks: int = 64, concurrency: int = 1,
                 record: bool = True, compat: AstraCompat | None = None,
                 op_topologies: Mapping[CollectiveOp, Topology] | None = None,
                 ) -> list[TrainingResult]:
    """``run_training`` for several policies at once; a setting shared by two of them (Themis
    as published is one of ``dlsched``'s candidates) is simulated once. Candidates are
    simulated without a timeline; with ``record`` the kept one is simulated again with it.
    ``compat``: emulate ASTRA-sim 2.x (its view of ``topology``, Themis tracker, stage costs;
    ``collectives.astra_compat``); ``op_topologies``: per collective op, ``topology`` with
    other per-dimension algorithms (an ASTRA system file's per-op implementations)."""
    names = _check(policies, iterations, chunks, concurrency)
    if compat is not None:
        topology = compat.network(topology)
        op_topologies = {op: compat.network(net) for op, net in (op_topologies or {}).items()}
    runs: dict[TrainingPolicy, IterationRun] = {}

    def simulate(candidate: TrainingPolicy) -> IterationRun:
        key = replace(candidate, name="")
        if key not in runs:
            runs[key] = simulate_iterations(workload, topology, candidate, iterations, chunks,
                                            concurrency, False, op_topologies)
        return runs[key]

    results = []
    for name in names:
        candidates = tuple(
            replace(candidate, compat=compat) for candidate in
            (DLSCHED_CANDIDATES if name == "dlsched" else (TRAINING_POLICIES[name],)))
        best = min(candidates, key=lambda candidate: simulate(candidate).periods[-1])
        run = simulate(best)
        if record:
            run = simulate_iterations(workload, topology, best, iterations, chunks, concurrency,
                                      True, op_topologies)
        results.append(TrainingResult(workload, topology, name, run, run.periods[-1],
                                      workload.compute_s, _dimension_utilization(run, topology),
                                      best.name))
    return results


def run_training(workload: Workload, topology: Topology, policy: str = "dlsched",
                 iterations: int = 2, chunks: int = 64, concurrency: int = 1,
                 record: bool = True, compat: AstraCompat | None = None) -> TrainingResult:
    """Simulate ``iterations`` iterations of ``workload`` on ``topology`` under ``policy``
    (``baseline``, ``themis``, ``themis-inflight``, ``dlsched``/``ours`` or ``ideal``) with
    ``chunks`` chunks per collective and ``concurrency`` chunks per dimension at once;
    ``record=False`` leaves the timeline empty (the numbers are the same); ``compat``: emulate
    ASTRA-sim 2.x."""
    return run_policies(workload, topology, [policy], iterations, chunks, concurrency,
                        record, compat)[0]
