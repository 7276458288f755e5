"""``dlsched pipeline profile``, ``export`` and ``dlsched run pipeline``: pipeline plans on real
torch ranks.

torch is imported only inside these commands (``dlsched[torch]``), never at CLI start.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich.table import Table

from dlsched.cli.options import announce, console, emit_rows, named_by_option
from dlsched.cli.paths import check_files
from dlsched.cli.runtime import (
    ChannelsLastOption,
    DeviceOption,
    PrecisionOption,
    UnusedOption,
    run_app,
)
from dlsched.errors import ConfigError
from dlsched.pipeline import (
    SavedPlan,
    load_plan,
    mapping_path_for,
    read_torch_export,
    to_torch,
    write_torch_export,
)
from dlsched.progress import activity
from dlsched.report import Column, plot_timelines, render_table, write_chrome_trace, write_text
from dlsched.report.columns import percents, text, times
from dlsched.report.tables import fixed, in_percent
from dlsched.runtime import require_torch
from dlsched.validation import BATCH, DATA_SIZE, THREADS, Limit, count

REPEATS = count("repeat count", 1, 1000)
RANKS = count("rank count", 1, 64)
ITERATIONS = count("iteration count", 1, 10_000)
WARMUP = count("warm-up iteration count", 0, 100)
TIMEOUT = Limit("time limit", 0.0, 86_400.0, low_open=True, show=lambda v: f"{v:g} s")


PROFILE_COLUMNS = [
    *text("block"),
    *times(forward_s="forward", backward_s="backward", backward_input_s="backward-input",
           backward_weight_s="backward-weight"),
    Column("activation_bytes", "activation (B)"),
    Column("param_bytes", "params (B)"),
    Column("stash_bytes", "stash (B)"),
]


def profile(
    model: Annotated[str, typer.Option(help="Built-in model (gpt-tiny, gpt-small) or "
                                       "package.module:function.")] = "gpt-small",
    microbatch_size: Annotated[int, typer.Option(help="Samples per microbatch.")] = 2,
    chain: Annotated[Path, typer.Option(help="Chain YAML to write (pipeline plan --model).")]
    = Path("chain.yaml"),
    repeats: Annotated[int, typer.Option(help="Timed runs per block (median).")] = 5,
    threads: Annotated[int, typer.Option(help="torch threads (1 = as each rank runs).")] = 1,
    devices_out: Annotated[Path | None, typer.Option(
        help="Also calibrate the rank-to-rank link, the runtime's compute factor on --ranks "
             "ranks against this profile and its overheads per compute action and per "
             "transfer, and write a device graph here.")] = None,
    ranks: Annotated[int, typer.Option(help="Ranks in the written device graph.")] = 2,
    memory: Annotated[str, typer.Option(help="Memory per rank in the device graph.")]
    = "16 GiB",
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON rows.")] = False,
    device: DeviceOption = "cpu",
    precision: PrecisionOption = "fp32",
    channels_last: ChannelsLastOption = False,
    unused: UnusedOption = "skip",
) -> None:
    """Measure forward, backward(-input/-weight) time and bytes per block into a chain file."""
    check_files({"--chain": (chain, (".yaml", ".yml", ".json")),
                 "--devices-out": (devices_out, (".yaml", ".yml", ".json"))})
    memory_bytes = DATA_SIZE.parse(memory, "memory")
    BATCH.check(microbatch_size, "microbatch-size")
    REPEATS.check(repeats, "repeats")
    THREADS.check(threads, "threads")
    RANKS.check(ranks, "ranks")
    if devices_out is not None:
        from dlsched.runtime import check_ranks

        check_ranks(ranks, "ranks")
    from dlsched.runtime import Execution

    execution = Execution(device, precision, channels_last, unused)
    if devices_out is not None and execution.cuda:
        raise ConfigError("devices-out: calibrates CPU gloo ranks (loopback link, CPU action "
                          "overhead), not GPUs; with --device cuda give the device graph as a "
                          "file instead")
    require_torch()
    from dlsched.runtime import calibrate_devices, profile_chain

    with activity(f"profiling the blocks of {model}", json_out):
        profiled = profile_chain(model, microbatch_size, repeats, threads, execution,
                                 None if devices_out is None else ranks)
    write_text(chain, yaml.safe_dump(profiled.document, sort_keys=False))
    announce(f"chain file (plan with --microbatch-size {microbatch_size})", chain, json_out)
    rows = profiled.rows()
    extra = {"chain": str(chain)}
    if devices_out is not None:
        with activity("calibrating the link and the runtime's compute factor and overheads",
                      json_out):
            devices = calibrate_devices(model, microbatch_size, profiled, ranks, memory_bytes)
        fit, latency, bandwidth = devices.fit, devices.latency_s, devices.bandwidth
        write_text(devices_out, yaml.safe_dump(devices.document, sort_keys=False))
        announce(f"device graph: link latency {latency * 1e6:.0f} us, bandwidth "
                 f"{bandwidth / 1e9:.3g} GB/s (loopback, measured), runtime compute factor "
                 f"{fit.compute_factor:.3f}, overhead {fit.overhead_s * 1e3:.2f} ms per "
                 f"compute action and {fit.transfer_overhead_s * 1e3:.2f} ms per transfer",
                 devices_out, json_out)
        extra |= {"devices": str(devices_out), "latency_s": latency, "bandwidth": bandwidth,
                  "compute_factor": fit.compute_factor, "overhead_s": fit.overhead_s,
                  "transfer_overhead_s": fit.transfer_overhead_s}
    if json_out:
        emit_rows(rows, True, None, extra)
        return
    render_table(rows, PROFILE_COLUMNS, f"{model}: one microbatch of {microbatch_size} "
                 f"samples, {threads} thread(s), {execution.describe()}", console)


def _load_plan(plan: Path) -> SavedPlan:
    """``load_plan(plan)``, its file's error named by PLAN."""
    try:
        return load_plan(plan)
    except ConfigError as error:
        raise named_by_option(error, files={"PLAN": plan}) from None


def export(
    plan: Annotated[Path, typer.Argument(help="Plan file (pipeline plan --save).")],
    torch_csv: Annotated[Path, typer.Option(help="Per-rank action table to write (CSV).")],
    mapping: Annotated[Path | None, typer.Option(
        help="Stage-to-rank mapping JSON (default: <csv stem>.stages.json).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON rows (a row per stage)."
                                           )] = False,
) -> None:
    """Write a plan as torch.distributed.pipelining's per-rank action table + stage mapping."""
    check_files({"--torch-csv": (torch_csv, (".csv",)),
                 "--mapping": (mapping or mapping_path_for(torch_csv), (".json",))},
                {"PLAN": plan})
    saved = _load_plan(plan)
    schedule = to_torch(saved.plan)
    written = write_torch_export(schedule, saved.device_names, torch_csv, mapping)
    announce(f"per-rank action table ({schedule.world_size} ranks)", torch_csv, json_out)
    announce("stage-to-rank mapping", written, json_out)
    if json_out:
        emit_rows([{"stage": s, "first_block": saved.block_names[first],
                    "last_block": saved.block_names[last - 1], "rank": rank,
                    "gpu": saved.device_names[schedule.rank_devices[rank]]}
                   for s, ((first, last), rank) in enumerate(zip(
                       schedule.stage_blocks, schedule.stage_ranks, strict=True))], True, None,
                  {"planner": saved.plan.planner, "ranks": schedule.world_size,
                   "microbatches": schedule.num_microbatches})
        return
    table = Table(title=f"{saved.plan.planner}: {schedule.world_size} torch ranks, "
                  f"{len(schedule.stage_blocks)} stages, {schedule.num_microbatches} "
                  "microbatches")
    for header in ("stage", "blocks", "rank", "GPU"):
        table.add_column(header)
    for s, ((first, last), rank) in enumerate(zip(schedule.stage_blocks, schedule.stage_ranks,
                                                  strict=True)):
        table.add_row(str(s), f"{saved.block_names[first]}..{saved.block_names[last - 1]}",
                      str(rank), saved.device_names[schedule.rank_devices[rank]])
    console.print(table)


RUN_COLUMNS = [
    *text("planner"),
    Column("ranks", "ranks"),
    *times(predicted_s="predicted", measured_median_s="measured median", measured_min_s="min",
           measured_max_s="max"),
    *percents(in_percent(1, signed=True), error="error"),  # render_table shows None as -
    Column("final_loss", "loss", fixed(4)),
]


def run(
    plan: Annotated[Path, typer.Argument(help="Plan file (pipeline plan --save).")],
    torch_csv: Annotated[Path | None, typer.Option(
        help="Run this exported table (with its .stages.json) instead of the plan's orders.")]
    = None,
    model: Annotated[str | None, typer.Option(
        help="Model to train (default: the plan's model name).")] = None,
    iterations: Annotated[int, typer.Option(help="Measured iterations.")] = 5,
    warmup: Annotated[int, typer.Option(help="Unmeasured first iterations.")] = 1,
    seed: Annotated[int, typer.Option(help="Seed of weights and batches.")] = 0,
    timeout: Annotated[float, typer.Option(help="Seconds any one communication may wait.")]
    = 120.0,
    deadline: Annotated[float, typer.Option(help="Seconds for the whole run.")] = 600.0,
    trace: Annotated[Path | None, typer.Option(help="Chrome-trace JSON of the run.")] = None,
    plot: Annotated[Path | None, typer.Option(help="PNG of the median iteration.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON rows.")] = False,
) -> None:
    """Train with a plan on one CPU gloo process per rank; measured vs predicted iteration."""
    check_files({"--trace": (trace, (".json",)), "--plot": (plot, (".png",))},
                {"PLAN": plan, "--torch-csv": torch_csv,
                 "--torch-csv's mapping": None if torch_csv is None
                 else mapping_path_for(torch_csv)})
    ITERATIONS.check(iterations, "iterations")
    WARMUP.check(warmup, "warmup")
    TIMEOUT.check(timeout, "timeout")
    TIMEOUT.check(deadline, "deadline")
    saved = _load_plan(plan)
    schedule = None
    if torch_csv is not None:
        schedule = read_torch_export(torch_csv, mapping_path_for(torch_csv))
        if schedule.stage_blocks != to_torch(saved.plan).stage_blocks:
            raise ConfigError(f"torch-csv: {torch_csv} cuts the blocks differently from {plan}")
    require_torch()
    from dlsched.runtime import SpawnOptions, check_plan_run, run_plan

    check_plan_run(saved, schedule, str(torch_csv or plan))
    options = SpawnOptions(timeout_s=timeout, deadline_s=deadline)
    with activity(f"running {warmup + iterations} iterations on torch ranks", json_out):
        ran = run_plan(saved, schedule, model or saved.model, iterations, warmup, seed, options)
    result, rows = ran.run, ran.rows()
    if trace is not None:
        write_chrome_trace(result.timeline, trace)
        announce(f"Chrome trace ({iterations} measured iterations)", trace, json_out)
    if plot is not None:
        index, median = ran.median_iteration()
        plot_timelines([(f"{saved.plan.planner} measured on CPU ranks, iteration {index}: "
                         f"{result.iteration_s[index] * 1e3:.1f} ms", median)], plot,
                       color_by="kind")
        announce(f"PNG plot (median iteration {index})", plot, json_out)
    if json_out:
        emit_rows(rows, True, None, {"iteration_s": list(result.iteration_s)})
        return
    render_table(rows, RUN_COLUMNS, f"{saved.model}: {iterations} iterations of "
                 f"{saved.plan.num_microbatches} microbatches of {saved.microbatch_size} "
                 "(error = predicted / measured - 1)", console)
    if ran.edited:
        console.print(f"{torch_csv} differs from the plan's orders: no prediction for it "
                      "(the plan file's prediction is for its own orders)")
    if ran.shared:
        console.print(f"{ran.ranks} ranks share {ran.cores} usable cores: no prediction (the "
                      "plan's devices run in parallel; ranks waiting for a core do not)")


def register(pipeline_app: typer.Typer) -> None:
    """Add the runtime commands: ``dlsched run pipeline`` and ``dlsched pipeline
    profile|export``."""
    pipeline_app.command("profile")(profile)
    pipeline_app.command("export")(export)
    run_app.command("pipeline")(run)
