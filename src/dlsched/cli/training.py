"""``dlsched train`` and ``dlsched reproduce themis-training``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dlsched.cli import runtime
from dlsched.cli.options import PLOT_HELP, TRACE_HELP, Outputs, console, emit_rows, parse_names
from dlsched.cli.sweep import (
    AddressOption,
    DbOption,
    ExecutorOption,
    ResumeOption,
    WorkersOption,
    reproduction_rows,
)
from dlsched.collectives import CollectiveOp
from dlsched.errors import ConfigError
from dlsched.experiments import themis_training
from dlsched.hardware import load_topology
from dlsched.interop import read_astra_network, read_astra_system, read_astra_workload
from dlsched.report import Column, render_table
from dlsched.report.tables import as_percent, as_ratio, seconds_as_ms
from dlsched.training import (
    POLICY_ALIASES,
    TRAINING_POLICIES,
    WORKLOADS,
    get_workload,
    run_policies,
)
from dlsched.training.astra import workload_from_astra
from dlsched.validation import CHUNKS, CONCURRENCY, check_output_paths, count

LATENCIES = {"table": 1.0, "zero": 0.0}


def _columns(num_dims: int) -> list[Column]:
    return [
        Column("policy", "policy", justify="left"),
        Column("plan", "plan", justify="left"),
        Column("iteration_s", "iteration (ms)", seconds_as_ms),
        Column("compute_s", "compute (ms)", seconds_as_ms),
        Column("exposed_comm_s", "exposed comm (ms)", seconds_as_ms),
        Column("speedup_vs_baseline", "speedup vs baseline", as_ratio),
        *[Column(f"dim{d}_bw_util", f"dim{d} BW util while pending (%)", as_percent)
          for d in range(1, num_dims + 1)],
    ]


def train(
    ctx: typer.Context,
    workload: Annotated[str, typer.Option(help="Workload: " + ", ".join(WORKLOADS))]
    = "resnet152",
    topology: Annotated[str, typer.Option(help="Preset name or YAML/JSON file.")]
    = "3D-FC_Ring_SW",
    policy: Annotated[str, typer.Option(help="Policies, comma-separated: " + ", ".join(
        [*TRAINING_POLICIES, *POLICY_ALIASES]))] = "baseline,themis,dlsched,ideal",
    latency: Annotated[str, typer.Option(help="'table' (the topology's step latencies) or "
                                         "'zero'.")] = "table",
    iterations: Annotated[int, typer.Option(help="Iterations simulated; the last is "
                                            "reported.")] = 2,
    chunks: Annotated[int, typer.Option(help="Chunks per collective.")] = 64,
    concurrency: Annotated[int, typer.Option(help="Chunks a dimension runs at once.")] = 1,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON rows.")] = False,
    csv: Annotated[Path | None, typer.Option(help="Write rows as CSV.")] = None,
    trace: Annotated[Path | None, typer.Option(help=TRACE_HELP + " Threads: compute and every "
                                               "network dimension.")] = None,
    plot: Annotated[Path | None, typer.Option(help=PLOT_HELP)] = None,
    astra_network: Annotated[Path | None, typer.Option(
        help="ASTRA-sim 2.x network YAML instead of --topology.")] = None,
    astra_system: Annotated[Path | None, typer.Option(
        help="ASTRA-sim system JSON: chunks, active chunks per dimension, algorithms.")] = None,
    astra_workload: Annotated[Path | None, typer.Option(
        help="ASTRA-sim 1.0 text workload instead of --workload.")] = None,
) -> None:
    """Simulate whole training iterations of a workload under collective policies (with no
    subcommand); ``train dataparallel`` runs plans on torch.distributed."""
    if ctx.invoked_subcommand is not None:
        return
    outputs = Outputs(json_out, csv, trace, plot)
    CHUNKS.check(chunks, "chunks")
    CONCURRENCY.check(concurrency, "concurrency")
    count("iteration count", 1, 1000).check(iterations, "iterations")
    if latency not in LATENCIES:
        raise ConfigError(f"latency: unknown setting {latency!r}; accepted: 'table', 'zero'")
    net = load_topology(topology) if astra_network is None else read_astra_network(astra_network)
    if astra_system is not None:
        system = read_astra_system(astra_system)
        net = system.apply(net, CollectiveOp.ALL_REDUCE)
        chunks, concurrency = system.chunks, system.concurrency
        for note in system.notes():
            typer.echo(f"note: {astra_system}: {note}", err=True)
    net = net.with_latency_scale(LATENCIES[latency])
    names = parse_names(policy, [*TRAINING_POLICIES, *POLICY_ALIASES], "policy")
    job = get_workload(workload, net.num_npus) if astra_workload is None else \
        workload_from_astra(read_astra_workload(astra_workload), net, astra_workload.stem)
    wanted = names if "baseline" in names else [*names, "baseline"]
    results = run_policies(job, net, wanted, iterations, chunks, concurrency,
                           record=trace is not None or plot is not None)
    baseline = results[wanted.index("baseline")]
    results = results[:len(names)]
    rows = [r.row() | {"latency": latency,
                       "speedup_vs_baseline": baseline.iteration_s / r.iteration_s}
            for r in results]
    title = f"{job.name} on {net.name}"
    outputs.timelines([(r.policy, f"{title}: {r.policy}", r.timeline) for r in results],
                      color_by="kind")
    if not json_out:
        render_table(rows, _columns(len(net.dims)),
                     f"{job.description} on {net.name} ({net.shape}, {latency} latency): "
                     f"steady-state iteration of {iterations}", console)
    outputs.rows(rows)


SUMMARY_COLUMNS = [
    Column("workload", "workload", justify="left"),
    Column("themis_avg", "Themis avg", as_ratio),
    Column("paper_themis_avg", "paper", as_ratio),
    Column("themis_max", "Themis max", as_ratio),
    Column("paper_themis_max", "paper", as_ratio),
    Column("dlsched_avg", "dlsched avg", as_ratio),
    Column("dlsched_max", "dlsched max", as_ratio),
    Column("themis_inflight_avg", "Themis in-flight avg", as_ratio),
    Column("ideal_avg", "Ideal avg", as_ratio),
    Column("paper_ideal_avg", "paper", as_ratio),
    Column("dlsched_over_themis_min", "min dlsched/Themis", as_ratio),
    Column("dlsched_vs_ideal_avg", "dlsched / Ideal time", as_ratio),
]


def reproduce_themis_training(
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON rows only.")] = False,
    csv: Annotated[Path | None, typer.Option(help="Write all rows as CSV.")] = None,
    executor: ExecutorOption = "process",
    workers: WorkersOption = None,
    address: AddressOption = None,
    db: DbOption = None,
    resume: ResumeOption = False,
    compute: Annotated[str, typer.Option(
        help="Compute model: 'a100' (A100-like FP16 roofline, the paper's) or 'comm-only' "
             "(every compute time zero: the iteration is its collectives).")] = "a100",
) -> None:
    """Four workloads x six Themis topologies x baseline/Themis/dlsched/Ideal, both latencies."""
    check_output_paths({"--csv": (csv, (".csv",))})
    todo = themis_training.scenarios(compute)
    rows = reproduction_rows("themis-training", todo,
                             themis_training.run_scenario, executor, workers, address, db,
                             resume, json_out)
    summary = themis_training.summarize(rows)
    if not json_out:
        for latency, title in themis_training.LATENCY_TITLES.items():
            render_table([s for s in summary if s["latency"] == latency], SUMMARY_COLUMNS,
                         f"Training iteration speedup over the baseline (iteration-time ratio), "
                         f"{title}, compute {compute}", console)
            render_table(themis_training.pivot(rows, latency),
                         [Column("workload", "workload", justify="left"),
                          Column("topology", "topology", justify="left"),
                          *[Column(p, f"{p} (ms)", seconds_as_ms)
                            for p in themis_training.POLICIES],
                          Column("compute", "compute (ms)", seconds_as_ms)],
                         f"iteration time per row, {latency} latency", console)
    emit_rows(rows, json_out, csv, {"summary": summary} if json_out else None)


def register(app: typer.Typer, reproduce: typer.Typer) -> None:
    """Add this module's commands to the CLI."""
    runtime.train_app.callback(invoke_without_command=True)(train)
    reproduce.command("themis-training")(reproduce_themis_training)
