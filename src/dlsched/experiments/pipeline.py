"""Reproduction for Luo et al., INFOCOM 2022: dlsched's pipeline plans against the baselines.

The paper reports its planner up to 157% faster (2.57x) than the state of the art (DAPPLE,
PipeDream, GPipe) on testbeds and trace-driven simulation; only the abstract is available, so
the rows here are our own scenarios: zoo models on homogeneous and heterogeneous device graphs.
Each row is one planner on one scenario; ``dlsched_speedup`` is that planner's time over
dlsched's (dlsched's speedup over it, > 1 when dlsched is faster).
Every baseline searches its own configuration space (``pipeline.baselines``) and its row names
the configuration it chose; dlsched's candidates include the baselines' plans (so it is never
slower by construction), which ``run_scenario`` hands it instead of planning them twice.
Scenarios with ``recompute`` restricted force that recomputation mode on every planner. Every
scenario runs under a network mode (``pipeline.network``): FIFO streams (default) or processor
sharing; ``with_networks`` makes the rows for both.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

from dlsched.errors import ConfigError
from dlsched.hardware.device_graph import load_devices
from dlsched.pipeline import BASELINES, PipelineProblem, PipelineResult, run_planner
from dlsched.pipeline.memory_model import RECOMPUTE_MODES
from dlsched.pipeline.model_source import load_chain
from dlsched.pipeline.planner import plan_dlsched
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
    recompute: tuple[str, ...] = RECOMPUTE_MODES
    network: str = "fifo"

    @property
    def label(self) -> str:
        """The recomputation modes allowed, for tables."""
        return "any" if self.recompute == RECOMPUTE_MODES else "/".join(self.recompute)


SCENARIOS = (
    Scenario("vgg19", 32, "1x8-NVLink", 16),
    Scenario("vgg19", 32, "hetero-islands", 16),
    Scenario("vgg19", 32, "hetero-islands", 16, ("full",)),
    Scenario("bert-large", 32, "2x8-NVLink-100Gb", 16),
    Scenario("bert-large", 32, "hetero-NVLink-PCIe", 16),
    Scenario("bert-large", 32, "2x8-NVLink-100Gb", 16, ("selective",)),
    Scenario("gpt2-xl", 4, "2x8-NVLink-100Gb", 16),
    Scenario("gpt2-xl", 4, "4x4-PCIe-25Gb", 16),
    Scenario("gpt2-xl", 4, "hetero-NVLink-PCIe", 32),
    Scenario("gpt2-xl", 4, "4x4-PCIe-25Gb", 16, ("full",)),
    Scenario("gpt3-175b", 1, "8x8-NVLink-200Gb", 32),
)



def with_networks(networks: tuple[str, ...],
                  scenarios: tuple[Scenario, ...] | None = None) -> tuple[Scenario, ...]:
    """Every scenario (default: ``SCENARIOS``) under each network mode, mode by mode."""
    return tuple(replace(scenario, network=network) for network in networks
                 for scenario in (SCENARIOS if scenarios is None else scenarios))


SUMMARY_COLUMNS = [
    Column("network", "network", justify="left"),
    Column("baseline", "baseline", justify="left"),
    Column("rows", "rows"),
    Column("mean_speedup", "geo-mean speedup", as_ratio),
    Column("max_speedup", "max speedup", as_ratio),
    Column("min_speedup", "min speedup", as_ratio),
    Column("paper_max_speedup", "paper (max)", as_ratio),
]


def run_scenario(scenario: Scenario) -> list[dict[str, Any]]:
    """One row per planner, dlsched first (a planner whose plan does not fit memory gets
    ``error``). dlsched's ``planning_s`` includes the baselines' planning."""
    chain = load_chain(scenario.model, scenario.microbatch_size)
    problem = PipelineProblem(chain, load_devices(scenario.devices), scenario.microbatches,
                              scenario.recompute, scenario.network)
    results: dict[str, PipelineResult | str] = {}
    for name in BASELINES:
        try:
            results[name] = run_planner(problem, name)
        except ConfigError as error:
            results[name] = str(error).splitlines()[0]
    found = {name: r for name, r in results.items() if isinstance(r, PipelineResult)}
    planned = {name: (lambda _, r=r: r.plan) for name, r in found.items()}
    ours = run_planner(problem, "dlsched", lambda p: plan_dlsched(p, planned))
    ours = replace(ours, planning_s=ours.planning_s + sum(r.planning_s for r in found.values()))
    rows = []
    for name, result in {"dlsched": ours, **results}.items():
        row = result.row() if isinstance(result, PipelineResult) else {
            "planner": name, "iteration_s": None, "bound_s": None, "error": result}
        rows.append({"network": scenario.network, "model": scenario.model,
                     "devices": scenario.devices,
                     "microbatch_size": scenario.microbatch_size,
                     "recompute_allowed": scenario.label, "memory": chain.memory_note} | row)
    ours = rows[0]["iteration_s"]
    for row in rows:
        row["dlsched_speedup"] = row["iteration_s"] / ours if row["iteration_s"] else None
    return rows


def reproduce(scenarios: tuple[Scenario, ...] | None = None) -> list[dict[str, Any]]:
    """All rows of ``scenarios`` (default: ``SCENARIOS``)."""
    chosen = SCENARIOS if scenarios is None else scenarios
    return [row for scenario in chosen for row in run_scenario(scenario)]


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per network mode and baseline: geometric-mean, max and min speedup of dlsched, beside
    the paper's max."""
    speedups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for row in rows:
        if row["planner"] in BASELINES and row.get("dlsched_speedup"):
            speedups[(row.get("network", "fifo"), row["planner"])].append(row["dlsched_speedup"])
    return [{"network": network, "baseline": name, "rows": len(values),
             "mean_speedup": math.exp(sum(map(math.log, values)) / len(values)),
             "max_speedup": max(values), "min_speedup": min(values),
             "paper_max_speedup": PAPER_MAX_SPEEDUP}
            for (network, name), values in speedups.items()]
