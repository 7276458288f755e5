"""``dlsched dataparallel`` (and the registration of ``dlsched reproduce usbyte``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dlsched.cli.columns import standard, text, times
from dlsched.cli.options import (
    CsvOption,
    Outputs,
    PlotOption,
    TraceOption,
    console,
    parse_names,
    scenario_from_options,
    status_console,
)
from dlsched.cli.progress import progress_bar
from dlsched.cli.usbyte import reproduce_usbyte
from dlsched.dataparallel import POLICIES, run_dataparallel
from dlsched.dataparallel.network_spec import assumed_latency_note
from dlsched.models import training_flops
from dlsched.report import Column, render_table
from dlsched.report.tables import as_ratio
from dlsched.sweep.scenarios import DataParallelScenario
from dlsched.validation import MAX_BATCH, MAX_WORKERS

COLUMNS = [
    *text("policy"),
    *times(time_s="iteration", bound_s="bound"),
    *standard("time_over_bound"),
    *text("settings"),
    Column("speedup_vs_wfbp", "speedup vs WFBP", as_ratio),
    Column("mfu", "MFU (%)", lambda v: f"{v * 100:.1f}"),
    *standard("messages"),
    Column("peak_in_flight", "peak in flight"),
    *times(comm_busy_s="network busy"),
]


def dataparallel(
    model: Annotated[str, typer.Option(help="Zoo model name.")] = "resnet50",
    profile: Annotated[Path | None, typer.Option(help="Per-layer profile CSV/JSON instead.")]
    = None,
    workers: Annotated[int | None, typer.Option(
        help=f"Data-parallel ranks (1..{MAX_WORKERS}); default: the network's own count "
        "(usbyte-8: 8, topology: its NPUs, a network file's), 8 for ring|tree|nccl:...; "
        "refused for ALPHA,BETA.", show_default=False)] = None,
    network: Annotated[str, typer.Option(help="usbyte-2/4/8, 10gbe-8, 'ALPHA,BETA', "
                                         "'ring|tree|nccl:BW,LAT', 'topology:PRESET' or a "
                                         "fitted network file (.yaml/.json).")] = "usbyte-8",
    in_flight: Annotated[int, typer.Option(help="All-reduces the network carries at once, "
                                           "sharing bandwidth (1: serial).")] = 1,
    device: Annotated[str, typer.Option(help="Calibrated GPU: v100, a100, h100 or a GPU file, "
                                        "optionally -PRECISION (v100-fp32, h100-tf32; "
                                        "v100-amp = v100-fp16).")] = "v100-fp32",
    efficiency: Annotated[float | None, typer.Option(
        help="Instead of the calibrated model: this fraction of the precision's peak for "
        "every layer.")] = None,
    backward_ratio: Annotated[float, typer.Option(
        help="Backward time / forward time (with --efficiency or params-proportional).")]
    = 2.0,
    compute: Annotated[str, typer.Option(
        help="device: the --device model; params-proportional: the US-Byte authors' forward "
        "times, proportional to parameter count (vgg16, resnet50, resnet152; scaled from "
        "their batch size).")] = "device",
    batch_size: Annotated[int | None, typer.Option(
        help=f"Samples per worker (1..{MAX_BATCH}); default 32, or the authors' batch size "
        "with --compute params-proportional.", show_default=False)] = None,
    policy: Annotated[str, typer.Option(help="Policies, comma-separated: "
                                        + ", ".join(POLICIES) + " (ours = dlsched)")]
    = ",".join(POLICIES),
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON rows.")] = False,
    csv: CsvOption = None,
    trace: TraceOption = None,
    plot: PlotOption = None,
) -> None:
    """Schedule one data-parallel iteration's gradient all-reduces under each policy.

    Prints one row per policy (times in ms; speedup = WFBP time / policy time); --json prints
    the rows as JSON. Writes, when asked: --csv (rows), --trace (one Chrome-trace file, one
    process per policy), --plot (PNG, a panel per policy).
    """
    outputs = Outputs(json_out, csv, trace, plot, inputs={
        "--profile": profile, "--network": network, "--device": device})
    names = parse_names(policy, POLICIES, "--policy")
    note = assumed_latency_note(network)
    if note is not None:
        (status_console if json_out else console).print(f"note: {note}", highlight=False)
    setup = scenario_from_options(DataParallelScenario, locals() | {"policy": names[0]}).setup()
    problem, comm, workers, batch_size = setup.problem, setup.comm, setup.workers, \
        setup.batch_size
    step_flops = training_flops(setup.trained, batch_size)
    peak = getattr(setup.times, "peak_flops", None)
    runs = names if "wfbp" in names else [*names, "wfbp"]
    progress = progress_bar("scheduling policies", json_out)
    by_name = {name: run_dataparallel(problem, name) for name in progress(runs, len(runs))}
    results = [by_name[name] for name in names]
    wfbp = by_name["wfbp"].time_s
    rows = [r.row() | {"workers": workers, "network": comm.name or network,
                       "compute": compute if compute != "device" else device,
                       "batch_size": batch_size,
                       "in_flight": r.plan.in_flight, "settings": r.plan.settings,
                       "speedup_vs_wfbp": wfbp / r.time_s,
                       "mfu": step_flops / (r.time_s * peak) if peak and step_flops else None}
            for r in results]
    shown = f"{workers} workers" if workers is not None else "workers as measured"
    if not json_out:
        render_table(rows, COLUMNS, f"{problem.model} data-parallel iteration (backward + next "
                     f"forward), {shown}, network {comm.name or network}, up to "
                     f"{in_flight} all-reduce(s) in flight, {setup.compute_label}, batch "
                     f"{batch_size}; speedup = WFBP time / policy time", console)
    outputs.timelines([(r.plan.policy, f"{problem.model}, {shown}, {network}: {r.plan.policy}",
                        r.timeline) for r in results], color_by="kind")
    outputs.rows(rows)


def register(app: typer.Typer, reproduce: typer.Typer) -> None:
    """Add this module's commands to the CLI."""
    app.command()(dataparallel)
    reproduce.command("usbyte")(reproduce_usbyte)
