"""Reproduce the Themis paper's single All-Reduce results (ISCA 2022, Section 6.1).

Six 1024-NPU topologies x All-Reduce sizes 100 MB..1 GB, 64 chunks, under the hierarchical
baseline, Themis with FIFO and with SCF, dlsched's own policy, and the ideal time; and
the chunk-count sweep. Each is run twice: with the step latencies of the paper's Table 2, and
with zero latency (the published artifact configurations used ~1 ns links).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from statistics import mean
from typing import Any

from dlsched.collectives import run_collective
from dlsched.experiments.scenario_rows import scenario_rows
from dlsched.hardware import load_topology

TOPOLOGIES = (
    "2D-SW_SW", "3D-SW_SW_SW_homo", "3D-SW_SW_SW_hetero",
    "3D-FC_Ring_SW", "4D-Ring_SW_SW_SW", "4D-Ring_FC_Ring_SW",
)
SIZES = (100_000_000, 250_000_000, 500_000_000, 750_000_000, 1_000_000_000)
CHUNK_SWEEP = (4, 8, 16, 32, 64, 128, 256, 512)
CHUNK_SWEEP_TOPOLOGIES = ("3D-SW_SW_SW_hetero", "4D-Ring_FC_Ring_SW")
CHUNK_SWEEP_SIZE = 100_000_000
LATENCY_SETTINGS = {"table": 1.0, "zero": 0.0}

# (label, policy, intra-dimension order)
VARIANTS = (
    ("baseline", "baseline", "fifo"),
    ("themis+fifo", "themis", "fifo"),
    ("themis+scf", "themis", "scf"),
    ("dlsched", "dlsched", "scf"),
)

PAPER_UTILIZATION = {"baseline": 0.5631, "themis+fifo": 0.8767, "themis+scf": 0.9514}
PAPER_SPEEDUP = {"themis+fifo": 1.58, "themis+scf": 1.72}
PAPER_MAX_SPEEDUP = 2.70


@dataclass(frozen=True)
class Scenario:
    """One All-Reduce to run under every variant."""

    topology: str
    latency: str
    size: int
    chunks: int
    sweep: str


def scenarios() -> list[Scenario]:
    """The size sweep and the chunk sweep, under both latency settings."""
    result = []
    for latency in LATENCY_SETTINGS:
        result += [Scenario(t, latency, s, 64, "size") for t in TOPOLOGIES for s in SIZES]
        result += [Scenario(t, latency, CHUNK_SWEEP_SIZE, c, "chunks")
                   for t in CHUNK_SWEEP_TOPOLOGIES for c in CHUNK_SWEEP]
    return result


def run_scenario(scenario: Scenario) -> list[dict[str, Any]]:
    """Rows for every variant of one scenario, plus the ideal (times in seconds)."""
    topology = load_topology(scenario.topology).with_latency_scale(
        LATENCY_SETTINGS[scenario.latency])
    common = {"sweep": scenario.sweep, "latency": scenario.latency,
              "topology": scenario.topology, "size_bytes": scenario.size,
              "chunks": scenario.chunks}
    rows = []
    for label, policy, intra in VARIANTS:
        result = run_collective(topology, "all-reduce", scenario.size, scenario.chunks, policy,
                                intra)
        rows.append(common | {"policy": label, "time_s": result.time_s,
                              "ideal_s": result.ideal_s,
                              "bandwidth_bound_s": result.bandwidth_bound_s,
                              "bound_s": result.bound_s, "utilization": result.utilization,
                              "time_over_bound": result.time_over_bound,
                              "plan_chunks": len(result.plan.routes),
                              "plan_concurrency": result.plan.concurrency})
    ideal = rows[0]["ideal_s"]
    rows.append(common | {"policy": "ideal", "time_s": ideal, "ideal_s": ideal,
                          "bandwidth_bound_s": rows[0]["bandwidth_bound_s"],
                          "bound_s": rows[0]["bound_s"], "utilization": 1.0,
                          "time_over_bound": ideal / rows[0]["bound_s"],
                          "plan_chunks": scenario.chunks, "plan_concurrency": 1})
    return rows


def reproduce(workers: int = 1, progress: Callable[[Iterable[Any], int], Iterable[Any]]
              = lambda items, total: items) -> list[dict[str, Any]]:
    """Run every scenario, in ``workers`` processes when > 1 (results in scenario order either
    way); ``progress(iterable, total)`` wraps the stream of finished scenarios."""
    return scenario_rows(run_scenario, scenarios(), workers, progress, chunksize=4)


def summarize(rows: list[dict[str, Any]], sweep: str = "size") -> list[dict[str, Any]]:
    """Per latency setting and variant: average utilization, average and max speedup over the
    baseline (baseline time / variant time), the smallest speedup over Themis+SCF (time of
    Themis+SCF / time of the variant), and the average and largest time / latency-aware bound."""
    times: dict[tuple, dict[str, float]] = defaultdict(dict)
    for row in rows:
        if row["sweep"] == sweep:
            key = (row["latency"], row["topology"], row["size_bytes"], row["chunks"])
            times[key][row["policy"]] = row["time_s"]
            times[key]["bound"] = row["bound_s"]
    summary = []
    for latency in LATENCY_SETTINGS:
        cases = [v | {"ideal_s": v["ideal"]} for k, v in times.items() if k[0] == latency]
        for label, *_ in VARIANTS:
            speedups = [case["baseline"] / case[label] for case in cases]
            summary.append({
                "latency": latency, "policy": label,
                "utilization": mean(case["ideal"] / case[label] for case in cases),
                "paper_utilization": PAPER_UTILIZATION.get(label),
                "speedup_vs_baseline": mean(speedups),
                "paper_speedup_vs_baseline": PAPER_SPEEDUP.get(label),
                "max_speedup_vs_baseline": max(speedups),
                "min_speedup_vs_themis_scf": min(case["themis+scf"] / case[label]
                                                 for case in cases),
                "time_over_bound": mean(case[label] / case["bound"] for case in cases),
                "max_time_over_bound": max(case[label] / case["bound"] for case in cases),
            })
    return summary
