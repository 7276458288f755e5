"""``dlsched reproduce themis``: the Themis paper's single All-Reduce results beside ours."""

from __future__ import annotations

from collections import defaultdict
from statistics import mean
from typing import Any

from dlsched.cli.columns import beside_paper, text, three_decimals
from dlsched.cli.options import console
from dlsched.cli.scenario_runs import Reproduction, reproduction_command
from dlsched.experiments import themis
from dlsched.report import Column, render_table
from dlsched.report.tables import as_percent, as_ratio

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


def _pivot(rows: list[dict[str, Any]], sweep: str, latency: str, key: str | None,
           metric: str = "utilization", combine: Any = mean) -> list[dict[str, Any]]:
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
                    formatter: Any = as_percent) -> list[Column]:
    labels = [label for label, *_ in themis.VARIANTS]
    return [*text("topology"), *first] + [
        Column(label, f"{label} ({unit})", formatter) for label in labels]


def _print_tables(rows: list[dict[str, Any]]) -> None:
    summary = themis.summarize(rows)
    for latency, description in LATENCY_TITLES.items():
        render_table([s for s in summary if s["latency"] == latency], SUMMARY_COLUMNS,
                     f"All-Reduce 100 MB-1 GB, 64 chunks, 6 topologies x {len(themis.SIZES)} "
                     f"sizes, {description}", console)
        render_table(_pivot(rows, "size", latency, None), _policy_columns([]),
                     f"bandwidth utilization per topology (mean over sizes), {latency} latency",
                     console)
        render_table(_pivot(rows, "size", latency, None, "time_over_bound", max),
                     _policy_columns([], "max", three_decimals),
                     f"time / latency-aware lower bound per topology (worst over sizes), "
                     f"{latency} latency", console)
        render_table(_pivot(rows, "chunks", latency, "chunks"),
                     _policy_columns([Column("value", "chunks")]),
                     f"chunk sweep, 100 MB All-Reduce, {latency} latency: bandwidth utilization",
                     console)


@reproduction_command
def reproduce_themis(run: Reproduction) -> None:
    """Six topologies x All-Reduce 100 MB-1 GB and the chunk sweep, with and without latency.

    Prints the summary (speedup = baseline time / variant time), per-topology utilization and
    the chunk sweep; --json prints {"rows", "summary"}; --csv writes the rows."""
    rows = run.rows("themis", themis.scenarios(), themis.run_scenario)
    if not run.json_out:
        _print_tables(rows)
    run.emit(rows, {"summary": themis.summarize(rows)})
