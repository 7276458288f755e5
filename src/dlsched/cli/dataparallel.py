"""``dlsched dataparallel`` and ``dlsched reproduce usbyte``."""

from __future__ import annotations

from typing import Annotated

import typer

from dlsched.cli.options import (
    CsvOption,
    Outputs,
    PlotOption,
    TraceOption,
    console,
    input_files,
    named_by_option,
    parse_names,
    status_console,
)
from dlsched.cli.scenario_runs import Reproduction, reproduction_command
from dlsched.cli.schema_options import Given, options_from
from dlsched.dataparallel import assumed_latency_note
from dlsched.dataparallel.compare import compare
from dlsched.dataparallel.scenario import DataParallelScenario
from dlsched.errors import ConfigError
from dlsched.experiments import usbyte
from dlsched.models import model_names
from dlsched.progress import progress_bar
from dlsched.report import Column, render_table
from dlsched.report.columns import standard, text, times
from dlsched.report.tables import as_ratio

COLUMNS = [
    *text("policy"),
    *times(time_s="iteration", bound_s="bound"),
    *standard("time_over_bound"),
    *text("settings"),
    Column("speedup_vs_wfbp", "speedup vs WFBP", as_ratio),
    *standard("mfu"),
    *standard("messages"),
    Column("peak_in_flight", "peak in flight"),
    *times(comm_busy_s="network busy"),
]


@options_from(DataParallelScenario)
def dataparallel(
    given: Given[DataParallelScenario],
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
    inputs = {"--profile": given["profile"], "--network": given["network"],
              "--device": given["device"]}
    outputs = Outputs(json_out, csv, trace, plot, inputs=inputs)
    names = given.names("policy")
    network = given["network"]
    note = assumed_latency_note(network)
    if note is not None:
        (status_console if json_out else console).print(f"note: {note}", highlight=False)
    try:  # an input file's error named by its option
        scenario = given.scenario()
        compared = compare(scenario, names, progress=progress_bar("scheduling policies",
                                                                   json_out))
    except ConfigError as error:
        raise named_by_option(error, files=input_files(inputs)) from None
    setup, shown = compared.setup, compared.workers_shown
    if not json_out:
        render_table(compared.rows, COLUMNS, f"{setup.problem.model} data-parallel iteration "
                     f"(backward + next forward), {shown}, network {compared.network_name}, up "
                     f"to {scenario.in_flight} all-reduce(s) in flight, {setup.compute_label}, "
                     f"batch {setup.batch_size}; speedup = WFBP time / policy time", console)
    outputs.timelines([(r.plan.policy, f"{setup.problem.model}, {shown}, {network}: "
                        f"{r.plan.policy}", r.timeline) for r in compared.results],
                      color_by="kind")
    outputs.rows(compared.rows)


@reproduction_command
def reproduce_usbyte(
    models: Annotated[str, typer.Option(help="Models, comma-separated.")]
    = ",".join(usbyte.MODELS),
    *,
    run: Reproduction,
) -> None:
    """US-Byte's claims next to our reproduction: the paper's settings (8 workers with its
    fitted constants; 128 GPUs on a 10 GbE ring whose startup grows with it; V100 FP32 at 32
    and 128 samples per GPU, and the authors' own forward times) and ours (10 GbE, 25 Gb,
    128 GPUs at 100 Gb/s, both all-reduce cost models), every policy shipped and tuned.

    Prints the headlines first (US-Byte against the best other policy, then against
    ByteScheduler shipped and tuned, WFBP with its cap, DDP), then a table per model (times
    in ms), knob values and explanations; --json prints {"rows", "summary"}; --csv writes the
    rows."""
    run.show(usbyte, usbyte.Options(tuple(parse_names(models, model_names(), "--models"))))


def register(app: typer.Typer, reproduce: typer.Typer) -> None:
    """Add this module's commands to the CLI."""
    app.command()(dataparallel)
    reproduce.command("usbyte")(reproduce_usbyte)
