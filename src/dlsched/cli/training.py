"""``dlsched train`` and ``dlsched reproduce themis-training``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dlsched.cli import runtime
from dlsched.cli.columns import beside_paper, text, three_decimals, times
from dlsched.cli.options import (
    TRACE_HELP,
    Outputs,
    PlotOption,
    console,
    parse_names,
    refuse_overrides,
    scenario_from_options,
)
from dlsched.cli.scenario_runs import Reproduction, reproduction_command
from dlsched.collectives.astra_compat import compat_notes
from dlsched.errors import ConfigError
from dlsched.experiments import themis_training
from dlsched.hardware import Topology
from dlsched.hardware.gpu import get_gpu
from dlsched.interop import (
    AstraSystem,
)
from dlsched.report import Column, render_table
from dlsched.report.tables import as_percent, as_ratio
from dlsched.sweep.scenarios import TrainingScenario
from dlsched.training import (
    POLICY_ALIASES,
    TRAINING_POLICIES,
    WORKLOADS,
    Workload,
    run_policies,
)
from dlsched.training.workloads import model_flops_per_npu


def _columns(num_dims: int) -> list[Column]:
    return [
        *text("policy", "plan"),
        *times(iteration_s="iteration", compute_s="compute", exposed_comm_s="exposed comm"),
        Column("speedup_vs_baseline", "speedup vs baseline", as_ratio),
        Column("mfu", "MFU (%, of A100 312 TFLOP/s)", as_percent),
        *[Column(f"dim{d}_bw_util", f"dim{d} BW util while pending (%)", as_percent)
          for d in range(1, num_dims + 1)],
    ]


def _astra_notes(job: Workload, net: Topology, names: list[str],
                 system: AstraSystem | None) -> None:
    """On stderr: the system file's unmodelled settings and the ASTRA-sim behaviours that
    would change this run (``--astra-compat`` emulates them)."""
    memory = None if system is None else system.compat().local_mem_bw
    ops = {comm.op for layer in job.layers for comm in layer.comms().values()}
    notes = (system.notes() if system is not None else []) + sorted({
        note for op in ops for name in names for note in compat_notes(net, op, name, memory)})
    for note in notes:
        typer.echo(f"note: {note}", err=True)


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
    plot: PlotOption = None,
    astra_network: Annotated[Path | None, typer.Option(
        help="ASTRA-sim 2.x network YAML instead of --topology.")] = None,
    astra_system: Annotated[Path | None, typer.Option(
        help="ASTRA-sim system JSON: chunks, active chunks per dimension, algorithms.")] = None,
    astra_workload: Annotated[Path | None, typer.Option(
        help="ASTRA-sim 1.0 text workload instead of --workload.")] = None,
    astra_compat: Annotated[bool, typer.Option(
        "--astra-compat", help="Emulate ASTRA-sim 2.x: reduction pass (local-mem-bw), "
        "FullyConnected direct on all links, its Themis tracker (docs/interop.md).")] = False,
) -> None:
    """Simulate whole training iterations of a workload under collective policies (with no
    subcommand); ``run dataparallel`` runs plans on torch.distributed (``train dataparallel``
    is its deprecated spelling)."""
    if ctx.invoked_subcommand is not None:
        return
    outputs = Outputs(json_out, csv, trace, plot, inputs={
        "--topology": topology, "--astra-network": astra_network,
        "--astra-system": astra_system, "--astra-workload": astra_workload})
    names = parse_names(policy, [*TRAINING_POLICIES, *POLICY_ALIASES], "policy")
    setup = scenario_from_options(TrainingScenario, locals() | {"policy": names[0]}).setup()
    job, net, system = setup.workload, setup.topology, setup.system
    if system is not None and astra_system is not None:
        refuse_overrides(ctx, "--astra-system", astra_system, {
            "chunks": (chunks, system.chunks, "preferred-dataset-splits"),
            "concurrency": (concurrency, system.concurrency, "active-chunks-per-dimension")})
    if setup.compat is None and (system is not None or astra_network is not None):
        _astra_notes(job, net, names, system)
    wanted = names if "baseline" in names else [*names, "baseline"]
    results = run_policies(job, net, wanted, iterations, setup.chunks, setup.concurrency,
                           trace is not None or plot is not None, setup.compat,
                           setup.op_topologies)
    baseline = results[wanted.index("baseline")]
    results = results[:len(names)]
    flops = model_flops_per_npu(workload, net.num_npus) if astra_workload is None else 0.0
    peak = get_gpu("a100").peak_flops("bf16")
    rows = [r.row() | {"latency": latency,
                       "speedup_vs_baseline": baseline.iteration_s / r.iteration_s,
                       "mfu": flops / (r.iteration_s * peak) if flops else None}
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
    *text("workload"),
    *beside_paper("themis_avg", "Themis avg", as_ratio),
    *beside_paper("themis_max", "Themis max", as_ratio),
    *beside_paper("ideal_avg", "Ideal avg", as_ratio),
    *beside_paper("themis_over_ideal_time", "Themis/Ideal time", three_decimals),
    Column("baseline_exposed_over_compute", "baseline exposed/compute", three_decimals),
    Column("exposed_factor_for_paper", "exposed x for paper avg",
           lambda v: "none" if v is None else f"{v:.2f}"),
    Column("dlsched_avg", "dlsched avg", as_ratio),
    Column("themis_inflight_avg", "Themis in-flight avg", as_ratio),
    Column("dlsched_over_themis_min", "min Themis/dlsched time", as_ratio),
    Column("dlsched_vs_ideal_avg", "dlsched/Ideal time", three_decimals),
]
METHOD_TITLES = {
    "paper": "the paper's method (FLOP-only A100 compute, fused gradients exposed at the end "
             "of back-prop, HOTI'20 DLRM, direct All-to-All)",
    "overlap": "dlsched's overlap model (per-block gradient collectives hidden behind "
               "back-prop; not the paper's method)",
    "files": "ASTRA-sim 1.0 workload files (direct All-to-All)",
}


def _workload_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise ConfigError(f"--workload-files: {directory} is not a directory")
    files = sorted(directory.glob("*.txt"))
    if not files:
        raise ConfigError(f"--workload-files: no ASTRA-sim workload (*.txt) in {directory}")
    return files


def _print_reproduction(rows: list[dict], summary: list[dict], method: str) -> None:
    for comparable in (True, False):
        chosen = [s for s in summary if s["paper_comparable"] is comparable]
        if not chosen:
            continue
        title = ("zero step latency: compare with the paper" if comparable else
                 "Table 2 step latencies, 64 chunks per collective: NOT comparable with the "
                 "paper (kept out of the paper summary)")
        render_table(chosen, SUMMARY_COLUMNS,
                     f"{METHOD_TITLES[method]}; speedup = baseline iteration time / policy "
                     f"iteration time; {title}", console)
    for latency in themis_training.LATENCY_SETTINGS:
        render_table(themis_training.pivot(rows, latency),
                     [*text("workload", "topology"),
                      *times(**{p: p for p in themis_training.POLICIES}, compute="compute")],
                     f"iteration time per row, {latency} latency", console)


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
    files = [] if workload_files is None else _workload_files(workload_files)
    if files:
        method = "files"
    todo = themis_training.scenarios(compute, method, files)
    rows = run.rows("themis-training", todo, themis_training.run_scenario)
    summary = themis_training.summarize(rows)
    if not run.json_out:
        _print_reproduction(rows, summary, method)
    run.emit(rows, {"summary": summary})


def register(app: typer.Typer, reproduce: typer.Typer) -> None:
    """Add this module's commands to the CLI."""
    runtime.train_app.callback(invoke_without_command=True)(train)
    reproduce.command("themis-training")(reproduce_themis_training)
