"""Reproduce the Themis paper's single All-Reduce results (ISCA 2022, Section 6.1).

Six 1024-NPU topologies x All-Reduce sizes 100 MB..1 GB, 64 chunks, under the hierarchical
baseline, Themis with FIFO and with SCF, dlsched's own policy, and the ideal time; and
the chunk-count sweep. Each is run twice: with the step latencies of the paper's Table 2, and
with zero latency (the published artifact configurations used ~1 ns links). A reproduction
module (``experiments.reproduction``): it takes no options.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from statistics import mean
from typing import Any

from dlsched.collectives import run_collective
from dlsched.hardware import load_topology
from dlsched.report import Column
from dlsched.report.columns import beside_paper, text, three_decimals
from dlsched.report.sections import Section, Table
from dlsched.report.tables import as_percent, as_ratio

NAME = "themis"
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
ROW_KEYS = ("time_s", "ideal_s", "bandwidth_bound_s", "bound_s", "utilization",
            "time_over_bound", "plan_chunks", "plan_concurrency")
"""What a variant's row keeps of the collective's row (seconds, fractions, plan used)."""


@dataclass(frozen=True)
class Scenario:
    """One All-Reduce to run under every variant."""

    topology: str
    latency: str
    size: int
    chunks: int
    sweep: str


def scenarios(options: None = None) -> list[Scenario]:
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
        row = run_collective(topology, "all-reduce", scenario.size, scenario.chunks, policy,
                             intra).row(scenario.chunks, 1)
        rows.append(common | {"policy": label} | {key: row[key] for key in ROW_KEYS})
    ideal = rows[0]["ideal_s"]
    rows.append(common | {"policy": "ideal", "time_s": ideal, "ideal_s": ideal,
                          "bandwidth_bound_s": rows[0]["bandwidth_bound_s"],
                          "bound_s": rows[0]["bound_s"], "utilization": 1.0,
                          "time_over_bound": ideal / rows[0]["bound_s"],
                          "plan_chunks": scenario.chunks, "plan_concurrency": 1})
    return rows


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


def document(rows: list[dict[str, Any]], options: None = None) -> dict[str, Any]:
    """What ``--json`` prints: the rows and their ``summarize``."""
    return {"rows": rows, "summary": summarize(rows)}


SUMMARY_COLUMNS = [
    *text("policy"),
    *beside_paper("utilization", "avg BW util (%)", as_percent, "paper (%)"),
    *beside_paper("speedup_vs_baseline", "avg speedup vs baseline", as_ratio),
    Column("max_speedup_vs_baseline", "max speedup vs baseline", as_ratio),
    Column("min_speedup_vs_themis_scf", "min speedup vs Themis+SCF", as_ratio),
    Column("time_over_bound", "avg time/bound", three_decimals),
    Column("max_time_over_bound", "max time/bound", three_decimals),
]
LATENCY_TITLES = {
    "table": "with the step latencies of the paper's Table 2",
    "zero": "with zero step latency (as the published artifact's ~1 ns links)",
}


def pivot(rows: list[dict[str, Any]], sweep: str, latency: str, key: str | None,
          metric: str = "utilization",
          combine: Callable[[list[float]], float] = mean) -> list[dict[str, Any]]:
    """One row per topology (and ``key`` value), one ``metric`` column per policy, combined
    over the group's rows with ``combine`` (mean by default)."""
    cells: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if row["sweep"] == sweep and row["latency"] == latency:
            group = (row["topology"], row[key] if key else None)
            cells[group][row["policy"]].append(row[metric])
    return [{"topology": topo, "value": value} | {p: combine(u) for p, u in policies.items()}
            for (topo, value), policies in cells.items()]


def _policy_columns(first: list[Column], unit: str = "%",
                    formatter: Callable[[Any], str] = as_percent) -> list[Column]:
    return [*text("topology"), *first] + [
        Column(label, f"{label} ({unit})", formatter) for label, *_ in VARIANTS]


def sections(document: dict[str, Any], options: None = None) -> list[Section]:
    """Per latency setting: the summary (speedup = baseline time / variant time), mean
    utilization and worst time / bound per topology, and the chunk sweep."""
    rows, summary = document["rows"], document["summary"]
    printed: list[Section] = []
    for latency, description in LATENCY_TITLES.items():
        printed += [
            Table([s for s in summary if s["latency"] == latency], SUMMARY_COLUMNS,
                  f"All-Reduce 100 MB-1 GB, 64 chunks, 6 topologies x {len(SIZES)} sizes, "
                  f"{description}"),
            Table(pivot(rows, "size", latency, None), _policy_columns([]),
                  f"bandwidth utilization per topology (mean over sizes), {latency} latency"),
            Table(pivot(rows, "size", latency, None, "time_over_bound", max),
                  _policy_columns([], "max", three_decimals),
                  f"time / latency-aware lower bound per topology (worst over sizes), "
                  f"{latency} latency"),
            Table(pivot(rows, "chunks", latency, "chunks"),
                  _policy_columns([Column("value", "chunks")]),
                  f"chunk sweep, 100 MB All-Reduce, {latency} latency: bandwidth utilization")]
    return printed
