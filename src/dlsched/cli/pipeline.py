"""``dlsched pipeline plan``, ``dlsched pipeline devices`` and ``dlsched reproduce pipeline``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from dlsched.cli import pipeline_runtime
from dlsched.cli.aliases import renamed_option
from dlsched.cli.columns import standard, text, three_decimals, times
from dlsched.cli.options import (
    CsvOption,
    Outputs,
    PlotOption,
    TraceOption,
    announce,
    console,
    emit_rows,
    parse_names,
    scenario_from_options,
    status_console,
    suffixed,
)
from dlsched.cli.progress import progress_bar
from dlsched.cli.scenario_runs import Reproduction, reproduction_command
from dlsched.errors import ConfigError
from dlsched.experiments import pipeline as experiment
from dlsched.hardware.device_config import device_preset_description, device_preset_names
from dlsched.hardware.device_config import load_devices as load_graph
from dlsched.pipeline import PLANNERS, PipelineProblem, PipelineResult, run_planner
from dlsched.pipeline.memory_model import (
    CONTEXT_BYTES,
    FRAGMENTATION,
    MemoryModel,
)
from dlsched.pipeline.network import NETWORK_MODES, check_network
from dlsched.pipeline.plan_file import save_plan, saved_from_result
from dlsched.pipeline.utilization import plan_mfu
from dlsched.report import Column, render_table
from dlsched.report.tables import as_percent, as_ratio
from dlsched.sweep.scenarios import PipelineScenario
from dlsched.validation import MAX_BATCH, MAX_MICROBATCHES

SUMMARY_COLUMNS = [
    *text("planner", "schedule"),
    Column("stages", "stages"),
    *standard("gpus_used", "dp", "tp"),
    *text("recompute"),
    *times(iteration_s="iteration", bound_s="bound"),
    *standard("time_over_bound"),
    Column("bubble", "bubble (%)", as_percent),
    Column("mfu", "MFU (%)", as_percent),
    Column("peak_memory_gib", "peak mem incl. reserve (GiB)", lambda v: f"{v:.2f}"),
    Column("planning_s", "planning (s)", three_decimals),
    Column("speedup_vs_first", "speedup vs first planner", as_ratio),
]
ORDER_PREVIEW = 16
NETWORK_HELP = ("How transfers share links and per-GPU NICs: fifo (one transfer at a time per "
                "stream, as NCCL) or ps (processor sharing).")
OLD_NETWORK = typer.Option("--network", hidden=True,
                           help="Deprecated spelling of --link-sharing.")

pipeline_app = typer.Typer(help="Synchronous pipeline planning (partition, mapping, schedule).",
                           no_args_is_help=True)


def _stage_table(result: PipelineResult) -> Table:
    plan = result.plan
    problem = result.problem.for_plan(plan)
    group = (f"; a device is a TP group of {plan.tensor_parallel} GPUs, params per GPU"
             if plan.tensor_parallel > 1 else "")
    table = Table(title=f"{plan.planner}: stages (forward and backward: one action on its "
                  f"slowest GPU{group})")
    for header in ("stage", "blocks", "GPUs", "forward (ms)", "backward (ms)", "params (MB)",
                   "all-reduce (ms)"):
        table.add_column(header, justify="right")
    names = problem.chain.block_names
    for s, stage in enumerate(plan.stages):
        times = problem.stage_times(stage).max(axis=0)
        params = problem.chain.param_bytes[stage.first:stage.last].sum()
        gpus = ",".join(problem.graph.devices[d].name for d in stage.devices) + (
            f" (split: 1/{len(stage.devices)} of each microbatch per GPU)" if stage.split else "")
        table.add_row(str(s), f"{names[stage.first]}..{names[stage.last - 1]} "
                      f"({stage.last - stage.first})", gpus, f"{times[0] * 1e3:.3f}",
                      f"{times[1] * 1e3:.3f}", f"{params / 1e6:.1f}",
                      f"{problem.allreduce_time(stage) * 1e3:.3f}")
    return table


def _order_table(result: PipelineResult) -> Table:
    table = Table(title=f"{result.plan.planner}: per-GPU order (first {ORDER_PREVIEW} actions; "
                  "2F0 = stage 2 forward of microbatch 0, B backward, I/W split backward)")
    table.add_column("GPU")
    table.add_column("actions", justify="left")
    devices = result.problem.for_plan(result.plan).graph.devices
    for device, order in enumerate(result.plan.orders):
        if order:
            more = f" … ({len(order)} in all)" if len(order) > ORDER_PREVIEW else ""
            table.add_row(devices[device].name,
                          " ".join(map(str, order[:ORDER_PREVIEW])) + more)
    return table


def _rows(results: list[PipelineResult]) -> list[dict]:
    """Result rows; ``speedup_vs_first`` = the first planner's time / this planner's time."""
    first = results[0].sim.iteration_s
    return [r.row() | {"peak_memory_gib": r.row()["peak_memory_bytes"] / 2**30,
                       "speedup_vs_first": first / r.sim.iteration_s,
                       "mfu": plan_mfu(r.problem, r.plan, r.sim.iteration_s)} for r in results]


def _write_outputs(results: list[PipelineResult], outputs: Outputs) -> None:
    outputs.timelines([(r.plan.planner, f"{r.problem.chain.name} on {r.problem.graph.name}: "
                        f"{r.plan.planner}, {r.sim.iteration_s * 1e3:.2f} ms", r.sim.timeline)
                       for r in results], color_by="kind")


def _plan_each(problem: PipelineProblem, names: list[str], progress: Any
               ) -> tuple[dict[str, PipelineResult], dict[str, str]]:
    """Each planner's result by name, and why each planner that found no plan (e.g. no
    configuration fits memory) was skipped; with a single planner, or when none finds a
    plan, the (first) planner's error stands."""
    results: dict[str, PipelineResult] = {}
    skipped: dict[str, str] = {}
    first: ConfigError | None = None
    for name in progress(names, len(names)):
        try:
            results[name] = run_planner(problem, name)
        except ConfigError as error:
            if len(names) == 1:
                raise
            first = first or error
            skipped[name] = str(error)
    if not results and first is not None:
        raise first
    return results, skipped


def plan(
    model: Annotated[str, typer.Option(help="Zoo model name or chain YAML/JSON file.")]
    = "gpt2-xl",
    devices: Annotated[str, typer.Option(help="Device preset or YAML/JSON file.")]
    = "2x8-NVLink-100Gb",
    microbatches: Annotated[int, typer.Option(
        help=f"Microbatches per iteration (1..{MAX_MICROBATCHES}).")] = 16,
    microbatch_size: Annotated[int, typer.Option(
        help=f"Samples per microbatch (1..{MAX_BATCH}).")] = 1,
    planner: Annotated[str, typer.Option(help="Planner(s), comma-separated, or all: "
                                         + ", ".join(PLANNERS) + " (ours = dlsched)")]
    = "dlsched",
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
    = False,
    csv: CsvOption = None,
    trace: TraceOption = None,
    plot: PlotOption = None,
    save: Annotated[Path | None, typer.Option(help="Save the plan(s) as JSON (pipeline export/"
                                              "run read it); several planners: one file each, "
                                              "named <stem>-<planner>.json.")] = None,
    for_torch: Annotated[bool, typer.Option(help="Keep every planner to one GPU per stage, "
                                            "as torch.distributed.pipelining runs (no "
                                            "replicated stages).")] = False,
    recompute: Annotated[str, typer.Option(help="Activation recomputation the planners may "
                                           "choose, comma-separated: none, selective, full, "
                                           "or all.")] = "all",
    tensor_parallel: Annotated[str, typer.Option(help="Tensor-parallel degrees the planners "
                                                 "may choose, comma-separated (e.g. 1,2,4,8), "
                                                 "or auto: every degree the model (zoo "
                                                 "transformers) and GPUs allow.")] = "auto",
    precision: Annotated[str, typer.Option(help="Training precision of zoo models' weights "
                                           "and activations: fp32, bf16, fp16.")] = "bf16",
    grad_precision: Annotated[str, typer.Option(help="Gradient precision of zoo models: fp32 "
                                                "(Megatron-LM's default with bf16: 18 B/param "
                                                "with Adam), bf16, fp16 (16 B/param).")]
    = "fp32",
    state_bytes: Annotated[float | None, typer.Option(help="Weights+gradients+optimizer "
                                                      "state, bytes per parameter of zoo "
                                                      "models; default: weights + gradients "
                                                      "+ fp32 master weights + Adam's 8.")]
    = None,
    sequence_parallel: Annotated[bool, typer.Option(help="Sequence parallelism with tensor "
                                                    "parallelism (Korthikanti et al. 2022): "
                                                    "every activation split over the TP "
                                                    "group.")] = True,
    memory_reserve: Annotated[str, typer.Option(help="Per-GPU memory the model cannot use "
                                                "(CUDA context, kernels), e.g. '4 GiB'; "
                                                "default: the 1343 MiB Hugging Face measured.")]
    = f"{CONTEXT_BYTES // 2**20} MiB",
    memory_fragmentation: Annotated[float, typer.Option(help="Share of the rest lost to "
                                                        "allocator fragmentation, [0, 1); "
                                                        "default: GMLake's 15% (A100-80GB).")]
    = FRAGMENTATION,
    link_sharing: Annotated[str, typer.Option(help=NETWORK_HELP)] = "fifo",
    network: Annotated[str | None, OLD_NETWORK] = None,
    gpu: Annotated[str | None, typer.Option(help="Price a zoo model's blocks on a calibrated "
                                            "GPU (v100, a100, h100, h100-tf32, a GPU file; "
                                            "docs/compute.md) instead of FLOP / the device "
                                            "file's sustained FLOP/s.")] = None,
) -> None:
    """Plan a synchronous pipeline: stages, GPUs, per-GPU order, time, memory and bound.

    Prints the summary (times in ms; speedup = first planner's time / this planner's time),
    the first planner's stages and per-GPU order; --json prints rows, stages and orders.
    Writes, when asked: --csv (rows), --trace (one Chrome-trace file, one process per planner
    and GPU), --plot (PNG, a panel per planner), --save (plan JSON).
    """
    names = list(PLANNERS) if planner == "all" else parse_names(planner, PLANNERS, "--planner")
    saves = {name: suffixed(save, name, len(names) > 1) for name in names
             if save is not None}
    outputs = Outputs(json_out, csv, trace, plot,
                      others={f"--save ({name})" if len(saves) > 1 else "--save": (path, (".json",))
                              for name, path in saves.items()},
                      inputs={"--model": model, "--devices": devices, "--gpu": gpu})
    link_sharing = check_network(renamed_option(link_sharing, network, "--link-sharing",
                                                "--network", "fifo"), "--link-sharing")
    scenario = scenario_from_options(PipelineScenario, locals() | {"planner": names[0]})
    problem = scenario.problem()
    chain, modes = problem.chain, scenario.recompute_modes()
    planned, skipped = _plan_each(problem, names, progress_bar("planning", json_out))
    for name, reason in skipped.items():
        (status_console if json_out else console).print(
            f"note: {name} skipped (no plan; the others are compared): {reason}",
            highlight=False)
    results = list(planned.values())
    rows = _rows(results)
    for name, result in planned.items():
        if name in saves:
            save_plan(saved_from_result(result, microbatch_size), saves[name])
            announce("plan JSON", saves[name], json_out)
    if json_out:
        _write_outputs(results, outputs)
        outputs.rows(rows, {"stages": results[0].plan.stages_text(),
                            "orders": results[0].plan.schedule_text(),
                            "skipped": [{"planner": name, "reason": reason}
                                        for name, reason in skipped.items()]})
        return
    render_table(rows, SUMMARY_COLUMNS, f"{problem.chain.name} ({problem.chain.num_blocks} "
                 f"blocks), {microbatches} microbatches of {microbatch_size}, on "
                 f"{problem.graph.describe()}; memory: {chain.memory_note or 'chain file'}, "
                 f"recomputation allowed: {', '.join(modes)}; tensor parallelism: "
                 f"{', '.join(map(str, problem.degrees()))}; link sharing: {link_sharing}", console)
    for result in results:
        if result.plan.notes.get("skipped"):
            console.print(f"{result.plan.planner}: {result.plan.notes['skipped']}",
                          highlight=False)
    console.print(_stage_table(results[0]))
    console.print(_order_table(results[0]))
    _write_outputs(results, outputs)
    outputs.rows(rows)


def devices_command(json_out: Annotated[bool, typer.Option(
        "--json", help="Print JSON rows.")] = False) -> None:
    """List the bundled device-graph presets."""
    if json_out:
        emit_rows([{"name": name, "gpus": load_graph(name).num_devices,
                    "summary": load_graph(name).describe(),
                    "description": device_preset_description(name)}
                   for name in device_preset_names()], True, None)
        return
    table = Table(title="device presets (link bandwidth one direction, GPU sustained FLOP/s)")
    for header in ("name", "summary", "description"):
        table.add_column(header)
    for name in device_preset_names():
        table.add_row(name, load_graph(name).describe(), device_preset_description(name))
    console.print(table)


REPRODUCE_COLUMNS = [
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


@reproduction_command
def reproduce_pipeline(
    run: Reproduction,
    link_sharing: Annotated[str, typer.Option(help=NETWORK_HELP + " Or both (the default): "
                                              "every scenario under each.")] = "both",
    network: Annotated[str | None, OLD_NETWORK] = None,
) -> None:
    """Zoo models on homogeneous and heterogeneous GPUs, every planner, speedup of dlsched
    over the best baseline of each scenario beside the paper's "up to 157%" (2.57x).

    Prints first the speedup over each scenario's best baseline (named) and among plans an
    existing runtime executes, then one row per (scenario, planner) and the per-baseline
    summary; --json prints {"rows", "headline", "per_scenario", "summary"}; --csv writes the
    rows."""
    network = renamed_option(link_sharing, network, "--link-sharing", "--network", "both")
    networks = NETWORK_MODES if network == "both" else (check_network(network, "--link-sharing"),)
    rows = run.rows("pipeline", experiment.with_networks(networks), experiment.run_scenario)
    summary = experiment.summarize(rows)
    scenarios = experiment.per_scenario(rows)
    headline = experiment.headline(scenarios)
    if not run.json_out:
        render_table(headline, experiment.HEADLINE_COLUMNS, "dlsched's speedup over the best "
                     "baseline of each scenario (that baseline's time / dlsched's), and among "
                     "plans an existing runtime executes (paper: up to 2.57x over the state of "
                     "the art)", console)
        render_table(scenarios, experiment.SCENARIO_COLUMNS, "per scenario: the fastest "
                     "baseline, named, against dlsched; runnable: each planner's best plan "
                     "that Megatron-LM, torch, PipeDream or DAPPLE can execute", console)
        render_table(rows, REPRODUCE_COLUMNS, "synchronous pipeline planning: iteration time "
                     "per planner, each baseline at its best configuration (dlsched speedup = "
                     "planner time / dlsched time; bound: memory-aware plan bound); memory "
                     f"model: {MemoryModel().describe()}", console)
        render_table(summary, experiment.SUMMARY_COLUMNS,
                     "dlsched speedup over each baseline in turn (paper: up to 2.57x, i.e. "
                     "+157%)", console)
    run.emit(rows, {"headline": headline, "per_scenario": scenarios, "summary": summary})


def register(app: typer.Typer, reproduce: typer.Typer) -> None:
    """Add this module's commands to the CLI."""
    pipeline_app.command("plan")(plan)
    pipeline_app.command("devices")(devices_command)
    pipeline_runtime.register(pipeline_app)
    app.add_typer(pipeline_app, name="pipeline")
    reproduce.command("pipeline")(reproduce_pipeline)
