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

The headline is per scenario (``per_scenario``, ``headline``): dlsched against the fastest
baseline of that scenario, named, and beside it the same among plans an existing runtime can
execute (``pipeline.runtimes``: dlsched's best plan may, e.g., put several replicated stages
on every GPU, which neither Megatron-LM nor torch runs). A reproduction module
(``experiments.reproduction``) whose ``Options`` are the network modes.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

from dlsched.errors import ConfigError
from dlsched.hardware.device_config import load_devices
from dlsched.pipeline import BASELINES, PipelineProblem, PipelineResult, run_planner
from dlsched.pipeline.chains.memory_model import RECOMPUTE_MODES, MemoryModel
from dlsched.pipeline.chains.model_source import load_chain
from dlsched.pipeline.planners.collection import fewer_collections
from dlsched.pipeline.planners.planner import plan_dlsched
from dlsched.pipeline.plans.runtimes import runtime_for
from dlsched.pipeline.simulation.network import NETWORK_MODES
from dlsched.report import Column
from dlsched.report.averages import geomean
from dlsched.report.columns import standard, text, times
from dlsched.report.sections import Section, Table
from dlsched.report.tables import as_ratio, seconds_as_ms

NAME = "pipeline"
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


@dataclass(frozen=True)
class Options:
    """The network modes every scenario runs under (``--link-sharing``; default both)."""

    networks: tuple[str, ...] = NETWORK_MODES


def scenarios(options: Options | None = None) -> tuple[Scenario, ...]:
    """``SCENARIOS`` under each network mode of ``options``."""
    return with_networks((options or Options()).networks)


def with_networks(networks: tuple[str, ...],
                  scenarios: tuple[Scenario, ...] | None = None) -> tuple[Scenario, ...]:
    """Every scenario (default: ``SCENARIOS``) under each network mode, mode by mode."""
    return tuple(replace(scenario, network=network) for network in networks
                 for scenario in (SCENARIOS if scenarios is None else scenarios))


SCENARIO_COLUMNS = [
    Column("network", "network", justify="left"),
    Column("model", "model", justify="left"),
    Column("devices", "devices", justify="left"),
    Column("recompute_allowed", "recompute allowed", justify="left"),
    Column("best_baseline", "best baseline", justify="left"),
    Column("best_baseline_s", "its time (ms)", seconds_as_ms),
    Column("dlsched_s", "dlsched (ms)", seconds_as_ms),
    Column("speedup", "speedup over best baseline", as_ratio),
    Column("origin", "dlsched's plan from", justify="left"),
    Column("dlsched_runtime", "runtime for dlsched's plan", justify="left"),
    Column("best_runnable_baseline", "best runnable baseline", justify="left"),
    Column("dlsched_runnable_s", "dlsched runnable (ms)", seconds_as_ms),
    Column("runnable_speedup", "speedup among runnable plans", as_ratio),
]
HEADLINE_COLUMNS = [
    Column("network", "network", justify="left"),
    Column("scenarios", "scenarios"),
    Column("mean_speedup", "geo-mean speedup over best baseline", as_ratio),
    Column("min_speedup", "min", as_ratio),
    Column("max_speedup", "max", as_ratio),
    Column("ties", "at 1.00x"),
    Column("baseline_plans", "dlsched plan = a baseline's"),
    Column("unrunnable", "dlsched plan runnable by no runtime"),
    Column("mean_runnable_speedup", "geo-mean among runnable plans", as_ratio),
    Column("min_runnable_speedup", "min", as_ratio),
    Column("max_runnable_speedup", "max", as_ratio),
]
SUMMARY_COLUMNS = [
    Column("network", "network", justify="left"),
    Column("baseline", "baseline", justify="left"),
    Column("rows", "rows"),
    Column("mean_speedup", "geo-mean speedup", as_ratio),
    Column("max_speedup", "max speedup", as_ratio),
    Column("min_speedup", "min speedup", as_ratio),
    Column("paper_max_speedup", "paper (max)", as_ratio),
]


def _baselines(problem: PipelineProblem, names: list[str]) -> dict[str, PipelineResult | str]:
    """Each baseline in ``names``; one that finds no plan gets its error's first line."""
    results: dict[str, PipelineResult | str] = {}
    for name in names:
        try:
            results[name] = run_planner(problem, name)
        except ConfigError as error:
            results[name] = str(error).splitlines()[0]
    return results


def _dlsched(problem: PipelineProblem, baselines: dict[str, PipelineResult | str]
             ) -> PipelineResult | str:
    """dlsched with the baselines' plans as candidates (not planned twice); its
    ``planning_s`` includes theirs."""
    found = {name: r for name, r in baselines.items() if isinstance(r, PipelineResult)}
    planned = {name: (lambda _, r=r: r.plan) for name, r in found.items()}
    try:
        ours = run_planner(problem, "dlsched", lambda p: plan_dlsched(p, planned))
    except ConfigError as error:
        return str(error).splitlines()[0]
    return replace(ours, planning_s=ours.planning_s + sum(r.planning_s for r in found.values()))


def _runnable(result: PipelineResult | str | None) -> bool:
    return isinstance(result, PipelineResult) and runtime_for(result.plan) is not None


def run_scenario(scenario: Scenario) -> list[dict[str, Any]]:
    """One row per planner, dlsched first (a planner whose plan does not fit memory gets
    ``error``). Each row also names the runtime that can execute its plan and gives, in
    ``runnable_iteration_s``, the planner's best plan that some runtime executes: its own, or
    when no runtime executes that, the planner run again keeping to runnable plans
    (``PipelineProblem.runnable_only``; dlsched then with the runnable baselines' plans).
    Full garbage collections are put off for the whole scenario
    (``collection.fewer_collections``), not only within each planner."""
    with fewer_collections():
        return _scenario_rows(scenario)


def _scenario_rows(scenario: Scenario) -> list[dict[str, Any]]:
    chain = load_chain(scenario.model, scenario.microbatch_size)
    problem = PipelineProblem(chain, load_devices(scenario.devices), scenario.microbatches,
                              scenario.recompute, scenario.network)
    baselines = _baselines(problem, list(BASELINES))
    results = {"dlsched": _dlsched(problem, baselines), **baselines}
    runnable = {name: r for name, r in results.items() if _runnable(r)}
    strict = replace(problem, runnable_only=True)
    runnable |= _baselines(strict, [name for name, r in baselines.items()
                                    if isinstance(r, PipelineResult) and name not in runnable])
    if "dlsched" not in runnable:
        runnable["dlsched"] = _dlsched(strict, {name: r for name, r in runnable.items()
                                                if name in BASELINES})
    rows = []
    for name, result in results.items():
        row = result.row() if isinstance(result, PipelineResult) else {
            "planner": name, "iteration_s": None, "bound_s": None, "error": result}
        best = runnable.get(name)
        rows.append({"network": scenario.network, "model": scenario.model,
                     "devices": scenario.devices,
                     "microbatch_size": scenario.microbatch_size,
                     "recompute_allowed": scenario.label, "memory": chain.memory_note}
                    | row | {"origin": result.plan.notes.get("origin", name)
                             if isinstance(result, PipelineResult) else "",
                             "runnable_iteration_s": best.sim.iteration_s
                             if isinstance(best, PipelineResult) else None,
                             "runnable_config": _config_text(best),
                             "note": _note(row)})
    ours = rows[0]["iteration_s"]
    for row in rows:
        row["dlsched_speedup"] = row["iteration_s"] / ours if row["iteration_s"] else None
    return rows


def _note(row: dict[str, Any]) -> str:
    """Why a planner has no plan, else the configurations its search skipped ('' if none)."""
    error = row.get("error")
    if error:
        return "no plan fits memory" if "memory" in error else error
    return row.get("skipped", "")


def _config_text(result: PipelineResult | str | None) -> str:
    """``PP x DP x TP, schedule`` of a result ('' without one)."""
    if not isinstance(result, PipelineResult):
        return ""
    row = result.row()
    return f"PP {row['pp']} x DP {row['dp']} x TP {row['tp']}, {row['schedule']}"


def _key(row: dict[str, Any]) -> tuple:
    return (row.get("network", "fifo"), row["model"], row["devices"], row["recompute_allowed"])


def per_scenario(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per scenario: dlsched against the fastest baseline of that scenario (named), and the
    same among plans an existing runtime executes (``runnable_iteration_s``): speedup =
    that baseline's time / dlsched's. ``origin`` says whose plan dlsched's is (its own search
    or a baseline's, which dlsched takes when none of its own is faster)."""
    scenarios: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        scenarios[_key(row)].append(row)
    table = []
    for key, group in scenarios.items():
        ours = next(row for row in group if row["planner"] == "dlsched")
        baselines = [row for row in group if row["planner"] in BASELINES]
        best = min((r for r in baselines if r["iteration_s"]), key=lambda r: r["iteration_s"],
                   default=None)
        runnable = min((r for r in baselines if r["runnable_iteration_s"]),
                       key=lambda r: r["runnable_iteration_s"], default=None)
        if best is None or not ours["iteration_s"]:
            continue
        table.append({
            "network": key[0], "model": key[1], "devices": key[2], "recompute_allowed": key[3],
            "best_baseline": best["planner"], "best_baseline_s": best["iteration_s"],
            "dlsched_s": ours["iteration_s"],
            "speedup": best["iteration_s"] / ours["iteration_s"],
            "origin": ours["origin"], "dlsched_runtime": ours["runtime"],
            "best_runnable_baseline": runnable["planner"] if runnable else "",
            "best_runnable_baseline_s": runnable["runnable_iteration_s"] if runnable else None,
            "dlsched_runnable_s": ours["runnable_iteration_s"],
            "runnable_speedup": runnable["runnable_iteration_s"] / ours["runnable_iteration_s"]
            if runnable and ours["runnable_iteration_s"] else None})
    return table


def headline(table: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per network mode: geometric mean, min and max over the scenarios of dlsched's speedup
    over the best baseline, the scenarios at 1.00x (within 0.5%), those where dlsched's plan
    is a baseline's, and the same speedups among runnable plans."""
    modes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in table:
        modes[row["network"]].append(row)
    result = []
    for network, group in modes.items():
        speedups = [row["speedup"] for row in group]
        runnable = [row["runnable_speedup"] for row in group if row["runnable_speedup"]]
        result.append({
            "network": network, "scenarios": len(group),
            "mean_speedup": geomean(speedups), "min_speedup": min(speedups),
            "max_speedup": max(speedups),
            "ties": sum(1 for value in speedups if value < 1.005),
            "baseline_plans": sum(1 for row in group if row["origin"] in BASELINES),
            "unrunnable": sum(1 for row in group if row["dlsched_runtime"] == "none"),
            "mean_runnable_speedup": geomean(runnable) if runnable else None,
            "min_runnable_speedup": min(runnable, default=None),
            "max_runnable_speedup": max(runnable, default=None)})
    return result


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per network mode and baseline: geometric-mean, max and min speedup of dlsched, beside
    the paper's max."""
    speedups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for row in rows:
        if row["planner"] in BASELINES and row.get("dlsched_speedup"):
            speedups[(row.get("network", "fifo"), row["planner"])].append(row["dlsched_speedup"])
    return [{"network": network, "baseline": name, "rows": len(values),
             "mean_speedup": geomean(values),
             "max_speedup": max(values), "min_speedup": min(values),
             "paper_max_speedup": PAPER_MAX_SPEEDUP}
            for (network, name), values in speedups.items()]


def document(rows: list[dict[str, Any]], options: Options | None = None) -> dict[str, Any]:
    """What ``--json`` prints: the rows, the per-network ``headline``, ``per_scenario`` and
    the per-baseline ``summary``."""
    scenarios = per_scenario(rows)
    return {"rows": rows, "headline": headline(scenarios), "per_scenario": scenarios,
            "summary": summarize(rows)}


ROW_COLUMNS = [
    *text("network", "model", "devices", "recompute_allowed", "planner", "schedule"),
    *standard("pp", "dp", "tp"),
    *text("recompute"),
    *standard("gpus_used"),
    *times(iteration_s="iteration", bound_s="bound"),
    *standard("time_over_bound"),
    Column("dlsched_speedup", "dlsched speedup (this / dlsched time)", as_ratio),
    *text("runtime"),
    *times(runnable_iteration_s="best runnable"),
    Column("note", "note (no plan / configurations skipped)", str, justify="left"),
]


def sections(document: dict[str, Any], options: Options | None = None) -> list[Section]:
    """The headline first (dlsched over each scenario's best baseline, and among runnable
    plans), then per scenario, one row per (scenario, planner), and per baseline."""
    return [
        Table(document["headline"], HEADLINE_COLUMNS, "dlsched's speedup over the best "
              "baseline of each scenario (that baseline's time / dlsched's), and among plans an "
              "existing runtime executes (paper: up to 2.57x over the state of the art)"),
        Table(document["per_scenario"], SCENARIO_COLUMNS, "per scenario: the fastest baseline, "
              "named, against dlsched; runnable: each planner's best plan that Megatron-LM, "
              "torch, PipeDream or DAPPLE can execute"),
        Table(document["rows"], ROW_COLUMNS, "synchronous pipeline planning: iteration time "
              "per planner, each baseline at its best configuration (dlsched speedup = planner "
              "time / dlsched time; bound: memory-aware plan bound); memory model: "
              f"{MemoryModel().describe()}"),
        Table(document["summary"], SUMMARY_COLUMNS, "dlsched speedup over each baseline in turn "
              "(paper: up to 2.57x, i.e. +157%)")]
