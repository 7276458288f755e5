"""Reproduction for Luo et al., INFOCOM 2022: dlsched's pipeline plans against the baselines.

The paper reports its planner up to 157% faster (2.57x) than the state of the art (DAPPLE,
PipeDream, GPipe) on testbeds and trace-driven simulation; only the abstract is available, so
the rows here are our own scenarios: zoo models on homogeneous and heterogeneous device graphs.
Each row is one planner on one scenario; ``dlsched_speedup`` is that planner's time over
dlsched's (dlsched's speedup over it, > 1 when dlsched is faster).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from dlsched.errors import ConfigError
from dlsched.hardware.device_graph import load_devices
from dlsched.pipeline import BASELINES, PLANNERS, PipelineProblem, run_planner
from dlsched.pipeline.model_source import load_chain
from dlsched.report import Column
from dlsched.report.tables import as_ratio

PAPER_MAX_SPEEDUP = 2.57


@dataclass(frozen=True)
class Scenario:
    """A model at a microbatch size on a device preset with ``microbatches`` per iteration."""

    model: str
    microbatch_size: int
    devices: str
    microbatches: int


SCENARIOS = (
    Scenario("vgg19", 32, "1x8-NVLink", 16),
    Scenario("vgg19", 32, "hetero-islands", 16),
    Scenario("bert-large", 32, "2x8-NVLink-100Gb", 16),
    Scenario("bert-large", 32, "hetero-NVLink-PCIe", 16),
    Scenario("gpt2-xl", 4, "2x8-NVLink-100Gb", 16),
    Scenario("gpt2-xl", 4, "4x4-PCIe-25Gb", 16),
    Scenario("gpt2-xl", 4, "hetero-NVLink-PCIe", 32),
    Scenario("gpt3-175b", 1, "8x8-NVLink-200Gb", 32),
)

SUMMARY_COLUMNS = [
    Column("baseline", "baseline", justify="left"),
    Column("rows", "rows"),
    Column("mean_speedup", "geo-mean speedup", as_ratio),
    Column("max_speedup", "max speedup", as_ratio),
    Column("min_speedup", "min speedup", as_ratio),
    Column("paper_max_speedup", "paper (max)", as_ratio),
]


def run_scenario(scenario: Scenario) -> list[dict[str, Any]]:
    """One row per planner (a planner whose plan does not fit memory gets ``error``)."""
    chain = load_chain(scenario.model, scenario.microbatch_size)
    problem = PipelineProblem(chain, load_devices(scenario.devices), scenario.microbatches)
    rows = []
    for name in PLANNERS:
        try:
            row = run_planner(problem, name).row()
        except ConfigError as error:
            row = {"planner": name, "iteration_s": None, "bound_s": None,
                   "error": str(error).splitlines()[0]}
        rows.append({"model": scenario.model, "devices": scenario.devices,
                     "microbatch_size": scenario.microbatch_size} | row)
    ours = rows[0]["iteration_s"]
    for row in rows:
        row["dlsched_speedup"] = row["iteration_s"] / ours if row["iteration_s"] else None
    return rows


def reproduce(scenarios: tuple[Scenario, ...] | None = None) -> list[dict[str, Any]]:
    """All rows of ``scenarios`` (default: ``SCENARIOS``)."""
    chosen = SCENARIOS if scenarios is None else scenarios
    return [row for scenario in chosen for row in run_scenario(scenario)]


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per baseline: geometric-mean, max and min speedup of dlsched, beside the paper's max."""
    speedups: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        if row["planner"] in BASELINES and row.get("dlsched_speedup"):
            speedups[row["planner"]].append(row["dlsched_speedup"])
    return [{"baseline": name, "rows": len(values),
             "mean_speedup": math.exp(sum(map(math.log, values)) / len(values)),
             "max_speedup": max(values), "min_speedup": min(values),
             "paper_max_speedup": PAPER_MAX_SPEEDUP}
            for name, values in speedups.items()]
