"""``dlsched dataparallel`` and ``dlsched reproduce usbyte``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from dlsched.cli.options import console, emit_rows, parse_names
from dlsched.cli.progress import progress_bar
from dlsched.dataparallel import POLICIES, parse_network, problem_from_model, run_dataparallel
from dlsched.errors import ConfigError
from dlsched.experiments import usbyte
from dlsched.models import ComputeModel, device_compute, get_model, load_profile
from dlsched.report import Column, plot_timelines, render_table, write_chrome_trace
from dlsched.report.tables import as_ratio, seconds_as_ms

COLUMNS = [
    Column("policy", "policy", justify="left"),
    Column("time_s", "iteration (ms)", seconds_as_ms),
    Column("bound_s", "bound (ms)", seconds_as_ms),
    Column("time_over_bound", "time/bound", as_ratio),
    Column("speedup_vs_wfbp", "speedup vs WFBP", as_ratio),
    Column("messages", "all-reduces"),
    Column("comm_busy_s", "network busy (ms)", seconds_as_ms),
]


def _load_model(model: str, profile: Path | None) -> Any:
    return load_profile(profile) if profile is not None else get_model(model)


def dataparallel(
    model: Annotated[str, typer.Option(help="Zoo model name.")] = "resnet50",
    profile: Annotated[Path | None, typer.Option(help="Per-layer profile CSV/JSON instead.")]
    = None,
    workers: Annotated[int, typer.Option(help="Data-parallel workers.")] = 8,
    network: Annotated[str, typer.Option(help="usbyte-2/4/8, 10gbe-8, 'ALPHA,BETA', "
                                         "'ring:BW,LAT' or 'topology:PRESET'.")] = "usbyte-8",
    device: Annotated[str, typer.Option(help="v100, a100, h100, rtx3090.")] = "v100",
    efficiency: Annotated[float, typer.Option(help="Fraction of peak FLOP/s achieved.")] = 0.4,
    batch_size: Annotated[int, typer.Option(help="Samples per worker.")] = 32,
    policy: Annotated[str, typer.Option(help="Policies, comma-separated: "
                                        + ", ".join(POLICIES))] = ",".join(POLICIES),
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON rows.")] = False,
    csv: Annotated[Path | None, typer.Option(help="Write rows as CSV.")] = None,
    trace: Annotated[Path | None, typer.Option(help="Chrome trace of the last policy.")] = None,
    plot: Annotated[Path | None, typer.Option(help="PNG timeline, a panel per policy.")] = None,
) -> None:
    """Schedule one data-parallel iteration's gradient all-reduces under each policy."""
    if workers < 1:
        raise ConfigError(f"workers: must be >= 1 (got {workers})")
    compute: ComputeModel = device_compute(device, efficiency)
    comm = parse_network(network, workers)
    problem = problem_from_model(_load_model(model, profile), compute, batch_size, comm)
    results = [run_dataparallel(problem, name) for name in parse_names(policy, POLICIES, "policy")]
    wfbp = run_dataparallel(problem, "wfbp").time_s
    rows = [r.row() | {"workers": workers, "network": network,
                       "speedup_vs_wfbp": wfbp / r.time_s} for r in results]
    if trace is not None:
        write_chrome_trace(results[-1].timeline, trace)
    if plot is not None:
        plot_timelines([(f"{problem.model}, {workers} workers, {network}: {r.plan.policy}",
                         r.timeline) for r in results], plot)
    if not json_out:
        render_table(rows, COLUMNS, f"{problem.model} data-parallel iteration (backward + next "
                     f"forward), {workers} workers, network {network}", console)
    emit_rows(rows, json_out, csv)


def reproduce_usbyte(
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
    csv: Annotated[Path | None, typer.Option(help="Write rows as CSV.")] = None,
) -> None:
    """Every policy on VGG-16, ResNet-50/152 and BERT-base at 2/4/8 workers and 128 GPUs."""
    rows = usbyte.reproduce(progress_bar("scheduling", json_out))
    summary = usbyte.summarize(rows)
    if not json_out:
        for name in usbyte.MODELS:
            render_table([r for r in rows if r["model"] == name], [
                Column("workers", "workers"), *COLUMNS[:4],
                Column("speedup_vs_wfbp", "vs WFBP", as_ratio),
                Column("speedup_vs_bytescheduler", "vs ByteScheduler", as_ratio)],
                f"{name}: iteration time per policy (ms)", console)
        console.print(
            f"US-Byte speedup over WFBP: max {summary['usbyte_over_wfbp_max']:.2f}x, mean "
            f"{summary['usbyte_over_wfbp_mean']:.2f}x (paper: up to 1.56x); over ByteScheduler: "
            f"max {summary['usbyte_over_bytescheduler_max']:.2f}x, mean "
            f"{summary['usbyte_over_bytescheduler_mean']:.2f}x (paper: up to 1.26x; 1.69x at 128 "
            f"GPUs). Best of US-Byte and dlsched: time/bound mean "
            f"{summary['best_time_over_bound_mean']:.3f}, max "
            f"{summary['best_time_over_bound_max']:.3f}. Rows where US-Byte loses to a "
            f"baseline: {len(summary['usbyte_losses'])} (per-tensor messages pay one startup "
            f"each; fusing baselines avoid that).", highlight=False)
    emit_rows(rows, json_out, csv, {"summary": summary} if json_out else None)


def register(app: typer.Typer, reproduce: typer.Typer) -> None:
    """Add this module's commands to the CLI."""
    app.command()(dataparallel)
    reproduce.command("usbyte")(reproduce_usbyte)
