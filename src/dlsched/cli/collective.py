"""``dlsched collective``, ``dlsched topologies`` and ``dlsched reproduce themis``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from dlsched.cli.columns import text, three_decimals, times
from dlsched.cli.options import (
    PLOT_HELP,
    CsvOption,
    Outputs,
    TraceOption,
    console,
    emit_rows,
    parse_names,
    refuse_overrides,
    status_console,
)
from dlsched.cli.progress import progress_bar
from dlsched.cli.themis_reproduction import reproduce_themis
from dlsched.collectives import POLICIES, CollectiveOp, CollectiveResult, run_collective
from dlsched.collectives.astra_compat import AstraCompat, compat_notes
from dlsched.hardware import Topology, load_topology, preset_description, preset_names
from dlsched.interop import AstraSystem, read_astra_network, read_astra_system
from dlsched.interop.astra_system import IMPLEMENTATION_KEYS
from dlsched.report import Column, render_table
from dlsched.report.tables import as_percent, as_ratio
from dlsched.units import format_bandwidth, format_bytes, format_time
from dlsched.validation import CHUNKS, CONCURRENCY, MAX_CHUNKS, MAX_CONCURRENCY, MESSAGE_SIZE

DEFAULT_TOPOLOGY = "4D-Ring_FC_Ring_SW"
BASELINE = "baseline"


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


def _row(result: CollectiveResult, chunks: int, concurrency: int) -> dict[str, object]:
    """The result's row with ``chunks``/``concurrency`` as given and ``plan_chunks``/
    ``plan_concurrency`` as the policy used them (the keys ``reproduce themis`` uses too)."""
    row = result.row()
    return row | {"chunks": chunks, "concurrency": concurrency,
                  "plan_chunks": row["chunks"], "plan_concurrency": row["concurrency"]}


def _dimension_table(result: CollectiveResult) -> Table:
    table = Table(title=f"{result.plan.policy}: per dimension")
    for header in ("dimension", "bytes sent per NPU (MB)", "busy (%)", "BW util (%)"):
        table.add_column(header, justify="right")
    for dim in result.dims:
        table.add_row(dim.name, f"{dim.num_bytes / 1e6:.2f}", as_percent(dim.busy_fraction),
                      as_percent(dim.bandwidth_utilization))
    return table


def collective(
    ctx: typer.Context,
    topology: Annotated[str, typer.Option(help="Preset name or YAML/JSON file.")]
    = DEFAULT_TOPOLOGY,
    op: Annotated[str, typer.Option(help="all-reduce, reduce-scatter, all-gather, all-to-all")]
    = "all-reduce",
    size: Annotated[str, typer.Option(help="Buffer per NPU, e.g. '1 GB', '256 MiB' (plain "
                                      "number: bytes; 1 B to 1 PiB).")] = "1 GB",
    chunks: Annotated[int, typer.Option(help=f"Number of chunks (1..{MAX_CHUNKS}).")] = 64,
    policy: Annotated[str, typer.Option(help="Policies, comma-separated: "
                                        + ", ".join(POLICIES) + " (ours = dlsched)")]
    = "baseline,themis,dlsched",
    intra: Annotated[str, typer.Option(help="Intra-dimension order: fifo or scf.")] = "scf",
    concurrency: Annotated[int, typer.Option(help="Chunks a dimension runs at once "
                                             f"(1..{MAX_CONCURRENCY}).")] = 1,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
    = False,
    csv: CsvOption = None,
    trace: TraceOption = None,
    show_plan: Annotated[bool, typer.Option(help="Print each chunk's size and stage order.")]
    = False,
    plot: Annotated[Path | None, typer.Option(help=PLOT_HELP + " Bars colored by chunk.")]
    = None,
    astra_network: Annotated[Path | None, typer.Option(
        help="ASTRA-sim network YAML; replaces --topology (docs/interop.md).")] = None,
    astra_system: Annotated[Path | None, typer.Option(
        help="ASTRA-sim system JSON: sets --chunks, --concurrency, --intra (giving another "
             "value is refused) and each dimension's algorithm; its inter-dimension policy "
             "runs first.")] = None,
    astra_compat: Annotated[bool, typer.Option(
        "--astra-compat", help="Emulate ASTRA-sim 2.x: reduction pass (local-mem-bw), "
        "FullyConnected direct on all links, its Themis tracker (docs/interop.md).")] = False,
) -> None:
    """Simulate one chunked collective under one or more policies and compare them.

    Prints a summary table (times in ms, speedup = baseline time / policy time) and one
    per-dimension table per policy; --json prints the same rows as JSON. Writes, when asked:
    --csv (rows), --trace (one Chrome-trace file, one process per policy), --plot (PNG).
    dlsched may use more chunks or a higher concurrency than given: the table shows the values
    each policy used.
    """
    outputs = Outputs(json_out, csv, trace, plot,
                      inputs={"--topology": topology, "--astra-network": astra_network,
                              "--astra-system": astra_system})
    num_bytes = MESSAGE_SIZE.parse(size, "--size")
    CHUNKS.check(chunks, "--chunks")
    CONCURRENCY.check(concurrency, "--concurrency")
    names = parse_names(policy, POLICIES, "--policy")
    net = load_topology(topology) if astra_network is None else read_astra_network(astra_network)
    system = None if astra_system is None else read_astra_system(astra_system)
    compat = None
    if astra_compat:
        compat = AstraCompat() if system is None else system.compat()
    if system is not None and astra_system is not None:
        refuse_overrides(ctx, "--astra-system", astra_system, {
            "chunks": (chunks, system.chunks, "preferred-dataset-splits"),
            "concurrency": (concurrency, system.concurrency, "active-chunks-per-dimension"),
            "intra": (intra, system.intra.value, "intra-dimension-scheduling")})
        if op in set(CollectiveOp):
            _note_shared_algorithm(system, net, CollectiveOp(op), json_out)
            net = system.apply(net, CollectiveOp(op))
        chunks, concurrency, intra = system.chunks, system.concurrency, system.intra.value
        names = [system.policy] + [n for n in names if n != system.policy]
    if not json_out and compat is None and (system is not None or astra_network is not None):
        memory = None if system is None else system.compat().local_mem_bw
        notes = (system.notes() if system is not None else []) + sorted({
            note for name in names if op in set(CollectiveOp)
            for note in compat_notes(net, CollectiveOp(op), name, memory)})
        for note in notes:
            console.print(f"note: {note}", highlight=False)
    runs = names if BASELINE in names else [*names, BASELINE]
    progress = progress_bar("simulating policies", json_out)
    by_name = {name: run_collective(net, op, num_bytes, chunks, name, intra, concurrency, compat)
               for name in progress(runs, len(runs))}
    results = [by_name[name] for name in names]
    reference = by_name[BASELINE].time_s
    rows = [_row(r, chunks, concurrency) | {f"speedup_vs_{BASELINE}": reference / r.time_s}
            for r in results]
    if not json_out:
        title = (f"{op} of {format_bytes(num_bytes)} per NPU on {net.name} "
                 f"({net.shape}, {net.num_npus} NPUs); given {chunks} chunks, concurrency "
                 f"{concurrency}; speedup = {BASELINE} time / policy time"
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


def _note_shared_algorithm(system: AstraSystem, net: Topology, op: CollectiveOp,
                           json_out: bool) -> None:
    """Say so when the system file gives ``op`` one algorithm for a network of several
    dimensions: it replaces every dimension's own algorithm."""
    algorithms = system.algorithms(op)
    if algorithms is None or len(algorithms) != 1 or len(net.dims) == 1:
        return
    own = ", ".join(f"{d.kind.value} {d.algorithm.value}" for d in net.dims)
    (status_console if json_out else console).print(
        f"note: {IMPLEMENTATION_KEYS[op]} gives one algorithm ({algorithms[0].value}) for "
        f"{len(net.dims)} dimensions: every dimension runs it, in place of their own ({own})",
        highlight=False)


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


def register(app: typer.Typer, reproduce: typer.Typer) -> None:
    """Add this module's commands to the CLI."""
    app.command()(collective)
    app.command()(topologies)
    reproduce.command("themis")(reproduce_themis)
