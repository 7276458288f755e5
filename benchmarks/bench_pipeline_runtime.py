"""Pipeline runtime: predicted vs measured iteration time of pipeline plans executed by
torch.distributed.pipelining on CPU gloo ranks (dlsched's plan, GPipe, 1F1B, interleaved 1F1B,
ZB-H1; 2 and 4 ranks by default, ``--ranks 2 4 8`` on a machine with the cores; our
GPT-style ``gpt-small``).

Run: ``python -m benchmarks.bench_pipeline_runtime [--ranks R ...]`` (rewrites its section of
BENCHMARKS.md and writes every plan's measured iterations to
``benchmarks/out/pipeline_runtime-<ranks>.json``; about 5 minutes on 2 cores). Needs torch.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from benchmarks.common import host_facts, host_text, interval_text, ratio_interval, write_section
from dlsched.hardware.device_config import devices_from_data
from dlsched.hardware.device_graph import DeviceGraph
from dlsched.pipeline import PipelineProblem, PipelineResult, run_planner, simulate
from dlsched.pipeline.chains.chain import Chain
from dlsched.pipeline.chains.model_source import ChainSpec
from dlsched.pipeline.plans.plan_file import SavedPlan, saved_from_result
from dlsched.pipeline.plans.torch_export import to_torch
from dlsched.runtime.pipeline.calibrate import (
    RankFit,
    RuntimeFit,
    calibrate_link,
    compute_drift,
    cpu_devices_document,
    measure_ranks,
    measure_runtime,
    rank_calibration_plan,
)
from dlsched.runtime.pipeline.model import GPT_PRESETS, load_model
from dlsched.runtime.pipeline.profile import chain_document, microbatch_seconds, profile_blocks
from dlsched.runtime.pipeline.rank_compute import rank_compute_factor
from dlsched.runtime.pipeline.replay import retimed_chain
from dlsched.runtime.pipeline.run import PipelineRun, run_pipelines
from dlsched.runtime.spawn import SpawnOptions

MODEL, MICROBATCH_SIZE, MICROBATCHES = "gpt-small", 8, 8
PLANNERS = ("dlsched", "gpipe", "1f1b", "interleaved", "zb-h1")
RANKS = (2, 4)
"""Default numbers of ranks."""
ITERATIONS, WARMUP, ROUNDS = 5, 1, 3
ATTEMPTS = 2
"""Times a setting is measured (calibration, plans, runs) while its calibration does not hold
during the plans (``compute_drift``)."""
CONTROL = -1
"""Key of the calibration workload among the plans run."""
MEMORY = 16 * 2**30
OPTIONS = SpawnOptions(timeout_s=300, deadline_s=1800, grace_s=10)


def _plans(problem: PipelineProblem) -> list[PipelineResult]:
    return [run_planner(problem, name) for name in PLANNERS]


def _same_plans(results: list[PipelineResult]) -> list[int]:
    """Per result, the index of the first result whose plan torch runs the same way (stages,
    ranks and every rank's actions in order; the planner's name aside)."""
    keys = [replace(to_torch(result.plan), planner="") for result in results]
    return [keys.index(key) for key in keys]


def _run_all(results: list[PipelineResult], control: SavedPlan
             ) -> tuple[list[PipelineRun], PipelineRun]:
    """Run the distinct plans (``_same_plans``: a plan two planners gave is run once and
    counts for both) and the calibration workload ``control``, one process start per number
    of ranks they use, in ``ROUNDS`` rounds whose order is rotated (a drift of the machine
    spread over every plan), each plan's rounds pooled; (the plans' runs, the control's)."""
    same = _same_plans(results)
    saved = {i: saved_from_result(results[i], MICROBATCH_SIZE) for i in sorted(set(same))}
    saved[CONTROL] = control
    groups: dict[int, list[int]] = defaultdict(list)
    for index, plan in saved.items():
        groups[to_torch(plan.plan).world_size].append(index)
    runs: dict[int, list[PipelineRun]] = defaultdict(list)
    for indices in groups.values():
        order = [indices[(k + r) % len(indices)] for r in range(ROUNDS)
                 for k in range(len(indices))]
        for index, run in zip(order, run_pipelines([saved[i] for i in order], MODEL,
                                                   ITERATIONS, WARMUP, options=OPTIONS),
                              strict=True):
            runs[index].append(run)
    return ([PipelineRun.pooled(runs[same[i]]) for i in range(len(results))],
            PipelineRun.pooled(runs[CONTROL]))


@dataclass(frozen=True)
class Setting:
    """One number of ranks measured: the calibration the plans were made with, the plans,
    their runs, the calibration workload's factor measured among them, and the drifts that
    made earlier attempts measure again (the last one's too when none held)."""

    measured: RankFit
    fit: RuntimeFit
    problem: PipelineProblem
    results: list[PipelineResult]
    runs: list[PipelineRun]
    factor_during: float
    drifts: list[str]

    @property
    def held(self) -> bool:
        """Whether the calibration still described the machine during the plans."""
        return compute_drift(self.measured.compute_factor, self.factor_during) is None


def measure_setting(ranks: int, chain: Chain, profiled_s: float, overhead_s: float,
                    latency_s: float, bandwidth: float) -> Setting:
    """Calibrate ``ranks`` ranks (``measure_ranks``), plan, run the plans with the
    calibration workload among them; while its factor there drifts from the calibration's
    (``compute_drift``), measure the whole setting again, at most ``ATTEMPTS`` times."""
    drifts: list[str] = []
    for _ in range(ATTEMPTS):
        measured = measure_ranks(MODEL, MICROBATCH_SIZE, ranks, profiled_s, overhead_s,
                                 latency_s, bandwidth, MICROBATCHES)
        fit = measured.runtime_fit(overhead_s)
        graph = devices_from_data(cpu_devices_document(ranks, latency_s, bandwidth, MEMORY,
                                                       fit=fit), "benchmark")
        problem = PipelineProblem(chain, graph, MICROBATCHES, replicate=False)
        results = _plans(problem)
        names = saved_from_result(results[0], MICROBATCH_SIZE).device_names
        control = rank_calibration_plan(MODEL, MICROBATCH_SIZE, ranks, MICROBATCHES, names)
        runs, control_run = _run_all(results, control)
        during, _ = rank_compute_factor(control_run.timeline, MICROBATCHES, profiled_s)
        drift = compute_drift(measured.compute_factor, during)
        drifts += [drift] if drift else []
        setting = Setting(measured, fit, problem, results, runs, during, list(drifts))
        if drift is None:
            break
    return setting


def _simulated_s(result: PipelineResult, graph: DeviceGraph,
                 run: PipelineRun | None = None) -> float:
    """The plan simulated on ``graph``, with the run's own median action times when a ``run``
    is given (a replay: ``graph`` then runs at the reference speed), seconds."""
    problem = result.problem
    chain = problem.chain if run is None else retimed_chain(problem.chain, result.plan,
                                                            run.timeline)
    return simulate(PipelineProblem(chain, graph, problem.num_microbatches),
                    result.plan).iteration_s


def drift_text(setting: Setting) -> str:
    """The calibration workload's factor before and among the plans, and the drifts that made
    the setting be measured again."""
    again = setting.drifts if setting.held else setting.drifts[:-1]
    again_text = f" (measured again after: {'; '.join(again)})" if again else ""
    verdict = ("held" if setting.held
               else f"did not hold after {ATTEMPTS} attempts, predictions marked *drift*")
    return (f"compute factor {setting.measured.compute_factor:.3f} at calibration, "
            f"{setting.factor_during:.3f} for the same workload among the plans: "
            f"{verdict}{again_text}")


def _row(ranks: int, result: PipelineResult, run: PipelineRun, cores: int,
         replay_s: float, concurrent_s: float, held: bool) -> str:
    """One table row; with more ranks than ``cores`` no prediction (the simulator's devices
    run in parallel, ranks waiting for a core do not); an error marked *drift* when the
    calibration did not hold during the plans (``compute_drift``); ``concurrent_s``: the
    plan predicted with the calibration workload's factor measured among the plans."""
    plan = result.plan
    measured = run.median_iteration_s
    used = to_torch(plan).world_size
    busy = sum(span.duration for span in run.timeline.spans)
    idle = 1 - busy / (used * sum(run.iteration_s))
    schedule = plan.notes.get("schedule", plan.planner)
    shared = used > cores
    predicted = result.sim.iteration_s
    mark = "" if held else " *drift*"
    prediction = ("not predicted | - | - | -" if shared
                  else f"{predicted * 1e3:.0f} | {(predicted / measured - 1) * 100:+.0f}%{mark} "
                  f"| {concurrent_s * 1e3:.0f} | {(concurrent_s / measured - 1) * 100:+.0f}%")
    return (f"| {ranks} | {plan.planner} | {used} | {plan.num_stages} "
            f"| {schedule} | {measured * 1e3:.0f} "
            f"({min(run.iteration_s) * 1e3:.0f}-{max(run.iteration_s) * 1e3:.0f}) "
            f"| {prediction} | {replay_s * 1e3:.0f} "
            f"| {(replay_s / measured - 1) * 100:+.0f}% "
            f"| {'-' if shared else f'{result.sim.bubble_fraction * 100:.0f}%'} "
            f"| {idle * 100:.0f}% |")


def measured_rank(results: list[PipelineResult], runs: list[PipelineRun]) -> str:
    """dlsched's plan's measured rank among the distinct measured plans (1 = fastest), the
    planners whose plan it is, and its gap to the fastest other plan with a bootstrap 95%
    interval of the ratio of median iterations."""
    same = _same_plans(results)
    mine = same[next(i for i, r in enumerate(results) if r.plan.planner == "dlsched")]
    times = {i: runs[i].median_iteration_s for i in sorted(set(same))}
    rank = 1 + sum(t < times[mine] for t in times.values())
    twins = [r.plan.planner for i, r in enumerate(results) if same[i] == mine and i != mine]
    twin_text = f"; the same plan as {', '.join(twins)}" if twins else ""
    others = [i for i in times if i != mine]
    if not others:
        return f"dlsched's plan measured rank 1 of 1{twin_text}"
    fastest = min(others, key=times.__getitem__)
    gap = interval_text(ratio_interval(list(runs[mine].iteration_s),
                                       list(runs[fastest].iteration_s)))
    return (f"dlsched's plan measured rank {rank} of {len(times)} distinct plans "
            f"({times[mine] * 1e3:.0f} ms{twin_text}); against the fastest other, "
            f"{results[fastest].plan.planner} {times[fastest] * 1e3:.0f} ms: {gap}")


def record(ranks: int, results: list[PipelineResult], runs: list[PipelineRun],
           replays_s: list[float]) -> dict:
    """The setting's plans and measurements for ``benchmarks/out`` (seconds)."""
    same = _same_plans(results)
    return {"ranks": ranks, "plans": [
        {"planner": r.plan.planner, "schedule": r.plan.notes.get("schedule", r.plan.planner),
         "stages": r.plan.stages_text(), "same_as": results[same[i]].plan.planner,
         "predicted_s": r.sim.iteration_s, "replayed_s": replay,
         "iterations_s": list(run.iteration_s)}
        for i, (r, run, replay) in enumerate(zip(results, runs, replays_s, strict=True))]}


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=list(RANKS),
                        choices=range(2, 11), help="numbers of ranks (2..10, the blocks)")
    return parser.parse_args()


def main() -> None:
    """Profile, calibrate, plan, run and write the table."""
    ranks_list = _arguments().ranks
    out = Path("benchmarks/out") / f"pipeline_runtime-{'-'.join(map(str, ranks_list))}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    before = host_facts()
    cores = before["usable_cores"]
    profiles = profile_blocks(load_model(MODEL), MICROBATCH_SIZE, repeats=7)
    chain = ChainSpec.model_validate(chain_document(MODEL, profiles)).build()
    latency, bandwidth, _ = calibrate_link()
    rows, notes, records = [], [], []
    runtime = measure_runtime(MODEL, MICROBATCH_SIZE, MICROBATCHES)
    overhead = max(0.0, runtime.overhead_s)
    profiled = microbatch_seconds(profiles)
    fits = {}
    for ranks in ranks_list:
        setting = measure_setting(ranks, chain, profiled, overhead, latency, bandwidth)
        fits[ranks] = setting.measured
        fit, results, runs = setting.fit, setting.results, setting.runs
        bare, during = (devices_from_data(cpu_devices_document(
            ranks, latency, bandwidth, MEMORY, fit=replace(fit, compute_factor=factor)), name)
            for factor, name in ((1.0, "replay"), (setting.factor_during, "concurrent")))
        replays = [_simulated_s(result, bare, run) for result, run in zip(results, runs,
                                                                         strict=True)]
        concurrent = [_simulated_s(result, during) for result in results]
        rows += [_row(ranks, result, run, cores, replay, now, setting.held)
                 for result, run, replay, now in zip(results, runs, replays, concurrent,
                                                     strict=True)]
        records.append(record(ranks, results, runs, replays) | {
            "predicted_concurrent_s": concurrent,
            "compute_factor": fit.compute_factor, "overhead_s": fit.overhead_s,
            "transfer_overhead_s": fit.transfer_overhead_s,
            "compute_factor_during_plans": setting.factor_during,
            "calibration_held": setting.held, "drifts": setting.drifts})
        free = run_planner(replace(setting.problem, replicate=True), "dlsched")
        notes.append(f"{ranks} ranks: {drift_text(setting)}; {measured_rank(results, runs)}; "
                     f"unrestricted dlsched plan {free.sim.iteration_s * 1e3:.0f} ms "
                     f"predicted, stages {free.plan.stages_text().replace(chr(10), '; ')}")
    after = host_facts()
    out.write_text(json.dumps({"machine": host_text(before), "settings": records}, indent=1))
    config = GPT_PRESETS[MODEL]
    forward = sum(p.forward_s for p in profiles)
    backward = sum(p.backward_s for p in profiles)
    split = sum(p.backward_input_s + p.backward_weight_s for p in profiles)
    markdown = "\n".join([
        "## Pipeline runtime: predicted vs measured (torch.distributed.pipelining, CPU)",
        "",
        f"`{MODEL}` (ours: {config.layers} decoder layers, hidden {config.hidden}, "
        f"{config.heads} heads, {config.sequence} tokens, vocabulary {config.vocab}; 10 blocks "
        f"= embedding, layers, head), {MICROBATCHES} microbatches of {MICROBATCH_SIZE} "
        f"sequences, one gloo process per rank with 1 torch thread and freed host memory "
        "kept in the process (`runtime/host_memory.py`), the distinct plans (one that two "
        f"planners gave runs once and counts for both) measured in {ROUNDS} rounds (the "
        f"plans' order rotated) of {WARMUP} warm-up and {ITERATIONS} measured iterations "
        "each, pooled (median, min-max). Plans are made from a profile "
        "of the blocks in one idle process (`dlsched pipeline profile`: forward "
        f"{forward * 1e3:.1f} ms, backward {backward * 1e3:.1f} ms, split backward I+W "
        f"{split * 1e3:.1f} ms per microbatch over all blocks) on CPU 'devices' whose link is "
        f"calibrated by gloo ping-pong between two ranks: latency {latency * 1e6:.0f} us, "
        f"bandwidth {bandwidth / 1e9:.2f} GB/s (loopback TCP; a nominal bandwidth would mean "
        "nothing here), whose overhead per compute action is calibrated by one rank "
        "running the whole model as one GPipe stage with every action stamped "
        "(`measure_runtime`: 36 rounds of two iterations, median time between actions, three "
        "parts of the rounds agreeing within 15% of a predicted action or 0.2 ms): "
        f"{overhead * 1e3:.2f} "
        "ms per action (that run's own factor against blocks profiled in the same process: "
        f"{runtime.compute_factor:.3f}), and whose compute factor against this profile and "
        "host time per activation or gradient sent or received are measured on the ranks "
        "themselves: as many ranks as the setting running the model cut into that many GPipe "
        "stages of consecutive blocks, 12 stamped iterations after one warm-up "
        "(`measure_ranks`: factor = the median over iterations of the ranks' summed action "
        "time / (microbatches x profile); transfer = wait-free gaps between actions minus the "
        "overhead, per transfer, median; three interleaved parts of the iterations agreeing): "
        + "; ".join(f"{r} ranks: factor {f.compute_factor:.3f} (parts "
                    + ", ".join(f"{p:.3f}" for p in f.factor_parts)
                    + f"), {f.runtime_fit(overhead).transfer_overhead_s * 1e3:.2f} ms per "
                    "transfer"
                    for r, f in fits.items())
        + ". That calibration workload (GPipe, even cut) is fixed and is none of the plans "
        "compared; it also runs among the plans, in every round with them, and when its "
        "factor there differs from the calibration's by more than 10% (`compute_drift`: the "
        "machine's speed moved between calibration and plans) the setting is measured again "
        f"from its calibration, at most {ATTEMPTS} times; errors of a setting whose "
        "calibration still did not hold are marked *drift*. *predicted, factor among the "
        "plans* simulates the same plans with the factor that workload gave among them (the "
        "machine's speed while the plans ran, from none of the plans' own times): it tests "
        "the model apart from the machine's drift, the first prediction tests the workflow "
        "a user has (calibrate, then plan and run). Every planner "
        "is kept to one GPU per stage "
        "(`--for-torch`: torch runs one rank per stage; the grid baselines search PP with "
        "DP = 1); error = predicted / measured - 1. "
        "*replayed* simulates the same plan with the run's own median action times and the "
        "calibrated overheads, which separates compute-time misprediction from what the "
        "schedule, overhead and link model miss. "
        "*idle* is the share of the used ranks' time outside compute actions (bubble, waits "
        "for activations and gradients, runtime overhead between actions).",
        "",
        "| ranks | planner | ranks used | stages | schedule | measured (ms) "
        "| predicted (ms) | error | predicted, factor among the plans (ms) | error "
        "| replayed (ms) | replay error | predicted idle | measured idle |",
        "|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        *[f"- {note} (replicated stages: not runnable by torch.distributed.pipelining)"
          for note in notes],
        f"- Machine: {host_text(before)} before; load {after['load']:.1f} after. Plans "
        f"using more ranks than the {cores} usable cores are measured but not predicted: "
        "the simulator's devices run in parallel, ranks waiting for a core do not (the "
        "replay, from the run's own action times, is still shown).",
    ])
    write_section("pipeline-runtime", markdown)


if __name__ == "__main__":
    main()
