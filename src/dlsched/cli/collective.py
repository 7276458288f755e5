"""``dlsched collective``, ``dlsched topologies`` and ``dlsched reproduce themis``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from dlsched.cli.options import (
    PLOT_HELP,
    CsvOption,
    Outputs,
    TraceOption,
    console,
    emit_rows,
    input_files,
    named_by_option,
    refuse_overrides,
    status_console,
)
from dlsched.cli.scenario_runs import Reproduction, reproduction_command
from dlsched.cli.schema_options import Given, options_from
from dlsched.collectives import CollectiveResult
from dlsched.collectives.scenario import CollectiveScenario
from dlsched.errors import ConfigError
from dlsched.experiments import themis
from dlsched.hardware import load_topology, preset_description, preset_names
from dlsched.interop.astra_collective import BASELINE, collective_setup, compare
from dlsched.progress import progress_bar
from dlsched.report import Column, render_table
from dlsched.report.columns import text, three_decimals, times
from dlsched.report.tables import as_percent, as_ratio
from dlsched.units import format_bandwidth, format_bytes, format_time


def _ms(seconds: float) -> str:
    """Seconds as milliseconds with 4 decimals (a 1 MB collective takes microseconds)."""
    return f"{seconds * 1e3:.4f}"


SUMMARY_COLUMNS = [
    *text("policy", "intra"),
    Column("plan_chunks", "chunks used"),
    Column("plan_concurrency", "concurrency used"),
    *times(_ms, time_s="time", ideal_s="ideal", bandwidth_bound_s="BW bound", bound_s="bound"),
    Column("utilization", "BW util (%)", as_percent),
    Column("time_over_bound", "time/bound", three_decimals),
    Column(f"speedup_vs_{BASELINE}", f"speedup vs {BASELINE}", as_ratio),
]


def _dimension_table(result: CollectiveResult) -> Table:
    table = Table(title=f"{result.plan.policy}: per dimension")
    for header in ("dimension", "bytes sent per NPU (MB)", "busy (%)", "BW util (%)"):
        table.add_column(header, justify="right")
    for dim in result.dims:
        table.add_row(dim.name, f"{dim.num_bytes / 1e6:.2f}", as_percent(dim.busy_fraction),
                      as_percent(dim.bandwidth_utilization))
    return table


@options_from(CollectiveScenario)
def collective(
    ctx: typer.Context,
    given: Given[CollectiveScenario],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
    = False,
    csv: CsvOption = None,
    trace: TraceOption = None,
    show_plan: Annotated[bool, typer.Option(help="Print each chunk's size and stage order.")]
    = False,
    plot: Annotated[Path | None, typer.Option(help=PLOT_HELP + " Bars colored by chunk.")]
    = None,
) -> None:
    """Simulate one chunked collective under one or more policies and compare them.

    Prints a summary table (times in ms, speedup = baseline time / policy time) and one
    per-dimension table per policy; --json prints the same rows as JSON. Writes, when asked:
    --csv (rows), --trace (one Chrome-trace file, one process per policy), --plot (PNG).
    dlsched may use more chunks or a higher concurrency than given: the table shows the values
    each policy used.
    """
    inputs = {"--topology": given["topology"], "--astra-network": given["astra_network"],
              "--astra-system": given["astra_system"]}
    outputs = Outputs(json_out, csv, trace, plot, inputs=inputs)
    try:  # an input file's error named by its option
        scenario = given.scenario()
        setup = collective_setup(scenario, given.names("policy"))
    except ConfigError as error:
        raise named_by_option(error, files=input_files(inputs)) from None
    system, net, compat = setup.system, setup.topology, setup.compat
    if system is not None and scenario.astra_system is not None:
        refuse_overrides(ctx, "--astra-system", Path(scenario.astra_system), {
            "chunks": (scenario.chunks, system.chunks, "preferred-dataset-splits"),
            "concurrency": (scenario.concurrency, system.concurrency,
                            "active-chunks-per-dimension"),
            "intra": (scenario.intra, system.intra.value, "intra-dimension-scheduling")})
    if setup.shared_algorithm is not None:
        (status_console if json_out else console).print(f"note: {setup.shared_algorithm}",
                                                        highlight=False)
    if not json_out and compat is None and (system is not None
                                            or scenario.astra_network is not None):
        for note in setup.notes():
            console.print(f"note: {note}", highlight=False)
    compared = compare(scenario, setup.policies, BASELINE,
                       progress_bar("simulating policies", json_out), setup)
    results, rows = compared.results, compared.rows
    op, num_bytes = scenario.op, scenario.size
    if not json_out:
        title = (f"{op} of {format_bytes(num_bytes)} per NPU on {net.name} "
                 f"({net.shape}, {net.num_npus} NPUs); given {setup.chunks} chunks, "
                 f"concurrency {setup.concurrency}; speedup = {BASELINE} time / policy time"
                 + ("; ASTRA-sim 2.x compatibility" if compat else ""))
        render_table(rows, SUMMARY_COLUMNS, title, console)
        for result in results:
            console.print(_dimension_table(result))
            if show_plan:
                console.print(f"{result.plan.policy} plan (stage = phase + 0-based dimension):\n"
                              f"{result.plan}", highlight=False)
    outputs.timelines([(r.plan.policy, f"{net.name} {op} {format_bytes(num_bytes)}: "
                        f"{r.plan.policy}, {len(r.plan.routes)} chunks, {r.plan.concurrency} "
                        "per dimension", r.timeline) for r in results], color_by="chunk")
    outputs.rows(rows)


def topologies(json_out: Annotated[bool, typer.Option(
        "--json", help="Print JSON rows (bandwidth in B/s, latency in s).")] = False) -> None:
    """List the bundled topology presets (bandwidth per NPU, latency per step)."""
    if json_out:
        emit_rows([_topology_row(name) for name in preset_names()], True, None)
        return
    table = Table(title="topology presets (bandwidth: aggregate per NPU; latency: per step)")
    for header in ("name", "shape", "NPUs", "dimensions (kind bandwidth latency algorithm)",
                   "description"):
        table.add_column(header)
    for name in preset_names():
        net = load_topology(name)
        dims = "\n".join(f"{d.kind.value} {format_bandwidth(d.bandwidth)} "
                         f"{format_time(d.latency)} {d.algorithm.value}" for d in net.dims)
        table.add_row(name, net.shape, str(net.num_npus), dims, preset_description(name))
    console.print(table)


def _topology_row(name: str) -> dict[str, object]:
    """One preset as a JSON row: its dimensions in SI units."""
    net = load_topology(name)
    return {"name": name, "shape": net.shape, "npus": net.num_npus,
            "dims": [{"kind": d.kind.value, "size": d.size, "bandwidth": d.bandwidth,
                      "latency_s": d.latency, "algorithm": d.algorithm.value}
                     for d in net.dims],
            "description": preset_description(name)}


@reproduction_command
def reproduce_themis(run: Reproduction) -> None:
    """Six topologies x All-Reduce 100 MB-1 GB and the chunk sweep, with and without latency.

    Prints the summary (speedup = baseline time / variant time), per-topology utilization and
    the chunk sweep; --json prints {"rows", "summary"}; --csv writes the rows."""
    run.show(themis)


def register(app: typer.Typer, reproduce: typer.Typer) -> None:
    """Add this module's commands to the CLI."""
    app.command()(collective)
    app.command()(topologies)
    reproduce.command("themis")(reproduce_themis)
