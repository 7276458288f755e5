"""Reproduce the Themis paper's end-to-end training results (ISCA 2022, Section 6.3).

Four workloads (ResNet-152, GNMT, DLRM, Transformer-1T) x the six 1024-NPU topologies of
Table 2, under the baseline, Themis as published, the in-flight-aware Themis variant, dlsched
and the Ideal network; with zero step latency and with the table's latencies. ``reproduce``
maps ``run_scenario`` over any list of scenarios (so sweeps can wrap it) and returns rows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from statistics import mean
from typing import Any

from dlsched.errors import ConfigError
from dlsched.experiments.themis import TOPOLOGIES
from dlsched.hardware import load_topology
from dlsched.training import get_workload, run_policies

WORKLOADS = ("resnet152", "gnmt", "dlrm", "transformer-1t")
POLICIES = ("baseline", "themis", "themis-inflight", "dlsched", "ideal")
LATENCY_SETTINGS = {"zero": 0.0, "table": 1.0}
# Compute model: ``a100`` is the A100-like FP16 roofline the paper names (the default);
# ``comm-only`` sets every compute and update time to zero, the limit in which an iteration
# is its collectives alone (the paper's ResNet-152/GNMT speedups lie between the two).
COMPUTE_SETTINGS = {"a100": 1.0, "comm-only": 0.0}
LATENCY_TITLES = {
    "zero": "zero step latency (compare with the paper)",
    "table": "the step latencies of the paper's Table 2",
}
# Themis speedup over the baseline: average (max); Ideal average (paper, Section 6.3).
PAPER = {
    "resnet152": (1.49, 2.25, 1.54), "gnmt": (1.30, 1.78, 1.32),
    "dlrm": (1.30, 1.77, 1.33), "transformer-1t": (1.25, 1.53, 1.26),
}
CHUNKS = 64


@dataclass(frozen=True)
class Scenario:
    """One workload on one topology under one latency setting."""

    workload: str
    topology: str
    latency: str
    chunks: int = CHUNKS
    iterations: int = 2
    compute: str = "a100"


def scenarios(compute: str = "a100") -> list[Scenario]:
    """Every workload x topology x latency setting under one compute setting."""
    if compute not in COMPUTE_SETTINGS:
        raise ConfigError(f"compute: unknown setting {compute!r}; accepted: "
                          + ", ".join(COMPUTE_SETTINGS))
    return [Scenario(w, t, lat, compute=compute) for lat in LATENCY_SETTINGS
            for w in WORKLOADS for t in TOPOLOGIES]


def run_scenario(scenario: Scenario) -> list[dict[str, Any]]:
    """One row per policy (times in seconds)."""
    net = load_topology(scenario.topology).with_latency_scale(
        LATENCY_SETTINGS[scenario.latency])
    workload = get_workload(scenario.workload, net.num_npus).with_compute_scale(
        COMPUTE_SETTINGS[scenario.compute])
    rows = [result.row() | {"topology": scenario.topology, "latency": scenario.latency,
                            "chunks": scenario.chunks, "compute": scenario.compute}
            for result in run_policies(workload, net, POLICIES, scenario.iterations,
                                       scenario.chunks, record=False)]
    baseline = rows[0]["iteration_s"]
    for row in rows:
        row["speedup_vs_baseline"] = baseline / row["iteration_s"]
    return rows


def reproduce(todo: Sequence[Scenario], workers: int = 1,
              progress: Callable[[Iterable[Any], int], Iterable[Any]]
              = lambda items, total: items) -> list[dict[str, Any]]:
    """Rows of every scenario in order, in ``workers`` processes when > 1."""
    rows: list[dict[str, Any]] = []
    if workers <= 1:
        for scenario_rows in progress(map(run_scenario, todo), len(todo)):
            rows += scenario_rows
        return rows
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for scenario_rows in progress(pool.map(run_scenario, todo), len(todo)):
            rows += scenario_rows
    return rows


def _times(rows: list[dict[str, Any]]) -> dict[tuple, dict[str, float]]:
    times: dict[tuple, dict[str, float]] = defaultdict(dict)
    for row in rows:
        times[(row["latency"], row["workload"], row["topology"])][row["policy"]] = \
            row["iteration_s"]
        times[(row["latency"], row["workload"], row["topology"])]["compute"] = row["compute_s"]
    return times


def pivot(rows: list[dict[str, Any]], latency: str) -> list[dict[str, Any]]:
    """One row per workload and topology, one iteration-time column per policy (s)."""
    return [{"workload": w, "topology": t} | policies
            for (lat, w, t), policies in _times(rows).items() if lat == latency]


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per latency setting and workload: average and max speedup over the baseline of each
    policy, the paper's numbers, the worst ratio Themis time / dlsched time and the average
    dlsched / Ideal time ratio."""
    times = _times(rows)
    summary = []
    for latency in LATENCY_SETTINGS:
        for workload in WORKLOADS:
            cases = [v for (lat, w, _), v in times.items() if lat == latency and w == workload]
            if not cases:
                continue
            entry: dict[str, Any] = {"latency": latency, "workload": workload}
            for policy in POLICIES[1:]:
                speedups = [c["baseline"] / c[policy] for c in cases]
                key = policy.replace("-", "_")
                entry[f"{key}_avg"], entry[f"{key}_max"] = mean(speedups), max(speedups)
            paper = PAPER[workload]
            entry |= {"paper_themis_avg": paper[0], "paper_themis_max": paper[1],
                      "paper_ideal_avg": paper[2],
                      "dlsched_over_themis_min": min(c["themis"] / c["dlsched"] for c in cases),
                      "dlsched_vs_ideal_avg": mean(c["dlsched"] / c["ideal"] for c in cases)}
            summary.append(entry)
    return summary
