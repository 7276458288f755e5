"""``dlsched train`` and ``dlsched reproduce themis-training``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dlsched.cli.options import (
    TRACE_HELP,
    Outputs,
    PlotOption,
    console,
    input_files,
    named_by_option,
    refuse_overrides,
)
from dlsched.cli.scenario_runs import Reproduction, reproduction_command
from dlsched.cli.schema_options import Given, options_from
from dlsched.errors import ConfigError
from dlsched.experiments import themis_training
from dlsched.report import Column, render_table
from dlsched.report.columns import text, times
from dlsched.report.tables import as_percent, as_ratio
from dlsched.training.compare import compare
from dlsched.training.scenario import TrainingScenario


def _columns(num_dims: int) -> list[Column]:
    return [
        *text("policy", "plan"),
        *times(iteration_s="iteration", compute_s="compute", exposed_comm_s="exposed comm"),
        Column("speedup_vs_baseline", "speedup vs baseline", as_ratio),
        Column("mfu", "MFU (%, of A100 312 TFLOP/s)", as_percent),
        *[Column(f"dim{d}_bw_util", f"dim{d} BW util while pending (%)", as_percent)
          for d in range(1, num_dims + 1)],
    ]


@options_from(TrainingScenario)
def train(
    ctx: typer.Context,
    given: Given[TrainingScenario],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON rows.")] = False,
    csv: Annotated[Path | None, typer.Option(help="Write rows as CSV.")] = None,
    trace: Annotated[Path | None, typer.Option(help=TRACE_HELP + " Threads: compute and every "
                                               "network dimension.")] = None,
    plot: PlotOption = None,
) -> None:
    """Simulate whole training iterations of a workload under collective policies."""
    inputs = {"--topology": given["topology"], "--astra-network": given["astra_network"],
              "--astra-system": given["astra_system"],
              "--astra-workload": given["astra_workload"]}
    outputs = Outputs(json_out, csv, trace, plot, inputs=inputs)
    names = given.names("policy")
    try:  # an input file's error named by its option
        scenario = given.scenario()
        setup = scenario.setup()
    except ConfigError as error:
        raise named_by_option(error, files=input_files(inputs)) from None
    system = setup.system
    if system is not None and scenario.astra_system is not None:
        refuse_overrides(ctx, "--astra-system", Path(scenario.astra_system), {
            "chunks": (scenario.chunks, system.chunks, "preferred-dataset-splits"),
            "concurrency": (scenario.concurrency, system.concurrency,
                            "active-chunks-per-dimension")})
    if setup.compat is None and (system is not None or scenario.astra_network is not None):
        for note in setup.notes(names):
            typer.echo(f"note: {note}", err=True)
    compared = compare(scenario, names, record=trace is not None or plot is not None,
                       setup=setup)
    job, net = setup.workload, setup.topology
    title = f"{job.name} on {net.name}"
    outputs.timelines([(r.policy, f"{title}: {r.policy}", r.timeline) for r in compared.results],
                      color_by="kind")
    if not json_out:
        render_table(compared.rows, _columns(len(net.dims)),
                     f"{job.description} on {net.name} ({net.shape}, {scenario.latency} "
                     f"latency): steady-state iteration of {scenario.iterations}", console)
    outputs.rows(compared.rows)


def _workload_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise ConfigError(f"--workload-files: {directory} is not a directory")
    files = sorted(directory.glob("*.txt"))
    if not files:
        raise ConfigError(f"--workload-files: no ASTRA-sim workload (*.txt) in {directory}")
    return files


@reproduction_command
def reproduce_themis_training(
    run: Reproduction,
    method: Annotated[str, typer.Option(
        help="'paper' (the paper's method: FLOP-only A100 compute, fused end-of-backprop "
             "All-Reduce, HOTI'20 DLRM, direct All-to-All) or 'overlap' (dlsched's model: "
             "per-block collectives overlapping back-prop).")] = "paper",
    workload_files: Annotated[Path | None, typer.Option(
        help="Directory of ASTRA-sim 1.0 text workloads (*.txt, 1 cycle = 1 ns) to run on "
             "the six topologies instead of the four workloads.")] = None,
    compute: Annotated[str, typer.Option(
        help="With --method overlap: 'a100' (memory-aware FP16 roofline) or 'comm-only' "
             "(every compute time zero).")] = "a100",
) -> None:
    """Four workloads (or --workload-files) x six Themis topologies x baseline/Themis/dlsched/
    Ideal, both latencies."""
    if method not in ("paper", "overlap"):
        raise ConfigError(f"--method: unknown method {method!r}; accepted: 'paper', 'overlap'")
    if compute != "a100" and method != "overlap":
        raise ConfigError("--compute: only with --method overlap (the paper's method fixes "
                          "its compute model)")
    files = () if workload_files is None else tuple(_workload_files(workload_files))
    run.show(themis_training, themis_training.Options("files" if files else method, compute,
                                                      files))


def register(app: typer.Typer, reproduce: typer.Typer) -> None:
    """Add this module's commands to the CLI."""
    app.command("train")(train)
    reproduce.command("themis-training")(reproduce_themis_training)
