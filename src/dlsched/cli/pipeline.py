"""``dlsched pipeline plan``, ``dlsched pipeline devices`` and ``dlsched reproduce pipeline``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from dlsched.cli import pipeline_runtime
from dlsched.cli.options import (
    CsvOption,
    Outputs,
    PlotOption,
    TraceOption,
    announce,
    console,
    emit_rows,
    named_by_option,
    status_console,
    suffixed,
)
from dlsched.cli.scenario_runs import Reproduction, reproduction_command
from dlsched.cli.schema_options import Given, options_from
from dlsched.errors import ConfigError
from dlsched.experiments import pipeline as experiment
from dlsched.hardware import device_preset_description, device_preset_names
from dlsched.hardware import load_devices as load_graph
from dlsched.pipeline import (
    NETWORK_MODES,
    PipelineResult,
    check_network,
    save_plan,
    saved_from_result,
)
from dlsched.pipeline.compare import compare
from dlsched.pipeline.scenario import LINK_SHARING_HELP, PipelineScenario
from dlsched.progress import progress_bar
from dlsched.report import Column, render_table
from dlsched.report.columns import standard, text, three_decimals, times
from dlsched.report.tables import as_percent, as_ratio, fixed

SUMMARY_COLUMNS = [
    *text("planner", "schedule"),
    Column("stages", "stages"),
    *standard("gpus_used", "dp", "tp"),
    *text("recompute"),
    *times(iteration_s="iteration", bound_s="bound"),
    *standard("time_over_bound"),
    Column("bubble", "bubble (%)", as_percent),
    Column("mfu", "MFU (%)", as_percent),
    Column("peak_memory_gib", "peak mem incl. reserve (GiB)", fixed(2)),
    Column("planning_s", "planning (s)", three_decimals),
    Column("speedup_vs_first", "speedup vs first planner", as_ratio),
]
ORDER_PREVIEW = 16

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


def _write_outputs(results: list[PipelineResult], outputs: Outputs) -> None:
    outputs.timelines([(r.plan.planner, f"{r.problem.chain.name} on {r.problem.graph.name}: "
                        f"{r.plan.planner}, {r.sim.iteration_s * 1e3:.2f} ms", r.sim.timeline)
                       for r in results], color_by="kind")


@options_from(PipelineScenario)
def plan(
    given: Given[PipelineScenario],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
    = False,
    csv: CsvOption = None,
    trace: TraceOption = None,
    plot: PlotOption = None,
    save: Annotated[Path | None, typer.Option(help="Save the plan(s) as JSON (pipeline export/"
                                              "run read it); several planners: one file each, "
                                              "named <stem>-<planner>.json.")] = None,
) -> None:
    """Plan a synchronous pipeline: stages, GPUs, per-GPU order, time, memory and bound.

    Prints the summary (times in ms; speedup = first planner's time / this planner's time),
    the first planner's stages and per-GPU order; --json prints rows, stages and orders.
    Writes, when asked: --csv (rows), --trace (one Chrome-trace file, one process per planner
    and GPU), --plot (PNG, a panel per planner), --save (plan JSON).
    """
    names = given.names("planner")
    saves = {name: suffixed(save, name, len(names) > 1) for name in names
             if save is not None}
    outputs = Outputs(json_out, csv, trace, plot,
                      others={f"--save ({name})" if len(saves) > 1 else "--save": (path, (".json",))
                              for name, path in saves.items()},
                      inputs={"--model": given["model"], "--devices": given["devices"],
                              "--gpu": given["gpu"]})
    scenario = given.scenario()
    try:
        problem = scenario.problem()
        problem.check_state_fits()
    except ConfigError as error:
        raise named_by_option(error, ("model", "devices", "gpu"),
                              {"--model": given["model"], "--gpu": given["gpu"]}) from None
    chain, modes = problem.chain, scenario.recompute_modes()
    compared = compare(problem, names, progress_bar("planning", json_out))
    planned, skipped, rows = compared.results, compared.skipped, compared.rows
    for name, reason in skipped.items():
        (status_console if json_out else console).print(
            f"note: {name} skipped (no plan; the others are compared): {reason}",
            highlight=False)
    results = list(planned.values())
    for name, result in planned.items():
        if name in saves:
            save_plan(saved_from_result(result, scenario.microbatch_size), saves[name])
            announce("plan JSON", saves[name], json_out)
    if json_out:
        _write_outputs(results, outputs)
        outputs.rows(rows, {"stages": results[0].plan.stages_text(),
                            "orders": results[0].plan.schedule_text(),
                            "skipped": [{"planner": name, "reason": reason}
                                        for name, reason in skipped.items()]})
        return
    render_table(rows, SUMMARY_COLUMNS, f"{problem.chain.name} ({problem.chain.num_blocks} "
                 f"blocks), {scenario.microbatches} microbatches of {scenario.microbatch_size}, on "
                 f"{problem.graph.describe()}; memory: {chain.memory_note or 'chain file'}, "
                 f"recomputation allowed: {', '.join(modes)}; tensor parallelism: "
                 f"{', '.join(map(str, problem.degrees()))}; link sharing: {scenario.link_sharing}",
                 console)
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


@reproduction_command
def reproduce_pipeline(
    run: Reproduction,
    link_sharing: Annotated[str, typer.Option(help=LINK_SHARING_HELP + " Or both (the "
                                              "default): every scenario under each.")] = "both",
) -> None:
    """Zoo models on homogeneous and heterogeneous GPUs, every planner, speedup of dlsched
    over the best baseline of each scenario beside the paper's "up to 157%" (2.57x).

    Prints first the speedup over each scenario's best baseline (named) and among plans an
    existing runtime executes, then one row per (scenario, planner) and the per-baseline
    summary; --json prints {"rows", "headline", "per_scenario", "summary"}; --csv writes the
    rows."""
    networks = NETWORK_MODES if link_sharing == "both" else \
        (check_network(link_sharing, "--link-sharing"),)
    run.show(experiment, experiment.Options(networks))


def register(app: typer.Typer, reproduce: typer.Typer) -> None:
    """Add this module's commands to the CLI."""
    pipeline_app.command("plan")(plan)
    pipeline_app.command("devices")(devices_command)
    pipeline_runtime.register(pipeline_app)
    app.add_typer(pipeline_app, name="pipeline")
    reproduce.command("pipeline")(reproduce_pipeline)
