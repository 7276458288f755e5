"""``dlsched profile``, ``dlsched calibrate`` and ``dlsched run dataparallel``: the torch
runtime (optional extra ``dlsched[torch]``; torch is imported only when these commands run).

``run`` is the group of commands that execute on torch, one subcommand per domain
(``run dataparallel`` here, ``run pipeline`` from ``cli/pipeline_runtime.py``): ``dlsched
dataparallel`` plans and simulates, ``dlsched run dataparallel`` executes the same plans on
torch.distributed and compares. ``dlsched train`` simulates training iterations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from dlsched.cli.options import (
    announce,
    console,
    emit_rows,
    named_by_option,
    parse_names,
    status_console,
)
from dlsched.cli.paths import check_files
from dlsched.dataparallel import (
    FIT_MODELS,
    POLICIES,
    assumed_latency_note,
    network_for_workers,
)
from dlsched.errors import ConfigError
from dlsched.progress import activity
from dlsched.report import Column, plot_timelines, render_table, write_chrome_trace
from dlsched.report.columns import standard, text, times
from dlsched.report.tables import as_percent
from dlsched.runtime import check_load
from dlsched.units import parse_bytes
from dlsched.validation import BATCH, LEARNING_RATE, THREADS, WORKERS

run_app = typer.Typer(help="Execute plans on spawned torch.distributed ranks and compare "
                      "measured with predicted times.", no_args_is_help=True)

ModuleOption = Annotated[str, typer.Option(
    "--module", help="resnet, gpt, or package.module:factory (then give --input-shape).")]
ShapeOption = Annotated[str, typer.Option(
    help="Input batch shape of a factory module, e.g. 8,3,32,32 (float inputs).")]
BatchOption = Annotated[int, typer.Option(help="Samples per rank (built-in models).")]
DeviceOption = Annotated[str, typer.Option(
    help="cpu or cuda (timed with CUDA events; refused in one line when CUDA is not "
         "available).")]
PrecisionOption = Annotated[str, typer.Option(
    help="fp32, tf32 (GPU), bf16 or fp16 (GPU): bf16/fp16 run the forward and loss under "
         "torch.autocast, weights and gradients FP32.")]
ChannelsLastOption = Annotated[bool, typer.Option(
    "--channels-last", help="Module and 4-D inputs in torch.channels_last.")]
UnusedOption = Annotated[str, typer.Option(
    help="Parameters the loss never reaches (e.g. BertModel's pooler): skip (profiled as DDP's "
         "find_unused_parameters runs them: no backward, gradient ready at once) or error.")]
CommNiceOption = Annotated[int | None, typer.Option(
    "--comm-nice", help="Nice value (-20..19) of each rank's communication threads (gloo's "
    "worker and transport), so messages are not held up by compute sharing the cores; -20 "
    "needs root. Default: unchanged.")]

COLUMNS = [
    *text("policy"),
    *times(measured_s="measured", predicted_s="predicted"),
    Column("error", "error (%)", as_percent),
    *times(bound_s="bound"),
    *standard("messages"),
]


def _shape(text: str) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        shape = tuple(int(part) for part in text.split(","))
    except ValueError:
        shape = ()
    if not shape or any(not 1 <= n <= 2**20 for n in shape):
        raise ConfigError(f"input-shape: {text!r} is not understood; accepted: comma-separated "
                          "sizes from 1 to 1048576, e.g. 8,3,32,32")
    return shape


def _spawn_options(ranks: int, field: str, **fields: Any) -> Any:
    """SpawnOptions, checked before torch is needed (the module imports no torch), with
    ``ranks`` within the machine's bound (``field`` names the option). The commands keep the
    ranks in the caller's session, so the scheduler treats them as one job and
    ``--comm-nice`` compares across ranks (see docs/runtime.md)."""
    from dlsched.runtime import SpawnOptions, check_backend, check_ranks

    check_ranks(ranks, field)
    check_backend(fields.get("backend", "gloo"), "--backend")
    return SpawnOptions(**fields)


TORCH_OPTIONS = {"module": "--module", "input-shape": "--input-shape", "network": "--network",
                 "workers": "--workers", "policy": "--policy", "repeats": "--repeats",
                 "optimizer": "--optimizer", "timeout_s": "--timeout", "comm_nice": "--comm-nice",
                 "profile_in": "--profile-in", "rounds": "--rounds"}
"""The torch commands' fields as their options name them (``named_by_option``)."""


def _config(module: str, input_shape: str, batch_size: int, **rest: Any) -> Any:
    from dlsched.runtime import TrainConfig

    try:
        return TrainConfig(model=module, input_shape=_shape(input_shape),
                           batch_size=BATCH.check(batch_size, "--batch-size"), **rest)
    except ConfigError as error:
        raise named_by_option(error, TORCH_OPTIONS) from None


def profile_command(
    module: ModuleOption = "resnet",
    input_shape: ShapeOption = "",
    batch_size: BatchOption = 8,
    out: Annotated[Path, typer.Option(help="Profile to write (.csv or .json).")]
    = Path("profile.csv"),
    warmup: Annotated[int, typer.Option(help="Untimed iterations first.")] = 3,
    repeats: Annotated[int, typer.Option(help="Timed iterations (median).")] = 10,
    optimizer: Annotated[str, typer.Option(help="Optimizer whose per-module step is added to "
                                           "the forward: sgd, adam, none.")] = "sgd",
    threads: Annotated[int, typer.Option(help="torch CPU threads.")] = 1,
    device: DeviceOption = "cpu",
    precision: PrecisionOption = "fp32",
    channels_last: ChannelsLastOption = False,
    unused: UnusedOption = "skip",
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON: a row per parameter "
                                           "tensor (seconds, bytes) and the totals.")] = False,
) -> None:
    """Profile a torch module: per-parameter forward/backward seconds and gradient sizes, in
    the format ``dlsched dataparallel --profile`` reads."""
    check_files({"--out": (out, (".csv", ".json"))})
    THREADS.check(threads, "--threads")
    if not 0 <= warmup <= 1000 or not 1 <= repeats <= 1000:
        raise ConfigError(f"--repeats: need 0 <= --warmup <= 1000 and 1 <= --repeats <= 1000 "
                          f"(got {warmup}, {repeats})")
    if optimizer not in ("sgd", "adam", "none"):
        raise ConfigError(f"--optimizer: {optimizer!r}; accepted: sgd, adam, none")
    from dlsched.runtime import Execution, require_torch

    execution = Execution(device, precision, channels_last, unused)
    config = _config(module, input_shape, batch_size)  # checked before torch is needed
    require_torch()
    from dlsched.runtime import profile_module, write_profile

    with activity(f"profiling {module} ({warmup} + {repeats} iterations)", json_out):
        try:
            profiled = profile_module(config, execution, warmup, repeats, optimizer, threads)
        except ConfigError as error:  # the module built and run: named by --module
            raise named_by_option(error, TORCH_OPTIONS) from None
    result, skipped = profiled.profile, profiled.skipped
    forward, backward = profiled.forward_s, profiled.backward_s
    write_profile(result, out)
    announce(f"profile ({len(result.layers)} parameter tensors, {profiled.params:,} "
             f"parameters, forward {forward * 1e3:.3f} ms, backward {backward * 1e3:.3f} ms; "
             f"medians of {repeats}, batch {batch_size}, {execution.describe()})", out, json_out)
    if skipped:
        (status_console if json_out else console).print(
            f"{len(skipped)} parameter tensor(s) get no gradient from the loss, profiled with "
            f"no backward (--unused skip): {', '.join(skipped)}", highlight=False)
    if json_out:
        emit_rows([layer.model_dump() for layer in result.layers], True, None,
                  {"out": str(out), "forward_s": forward, "backward_s": backward,
                   "unused": list(skipped)})


calibrate_app = typer.Typer(invoke_without_command=True)


def calibrate_command(
    ctx: typer.Context,
    workers: Annotated[int, typer.Option(help="Ranks to spawn.")] = 2,
    out: Annotated[Path, typer.Option(help="Network file to write (.yaml or .json).")]
    = Path("network.yaml"),
    min_size: Annotated[str, typer.Option(help="Smallest all-reduce.")] = "4 KiB",
    max_size: Annotated[str, typer.Option(help="Largest all-reduce.")] = "64 MiB",
    points: Annotated[int, typer.Option(help="Sizes, geometric from min to max.")] = 8,
    repeats: Annotated[int, typer.Option(help="Timed all-reduces per size and measurement "
                                         "(mean; sizes whose mean is uncertain are measured "
                                         "again).")] = 15,
    model: Annotated[str, typer.Option(help="Fit --network uses: alpha-beta, ring, "
                                       "piecewise.")] = "piecewise",
    backend: Annotated[str, typer.Option(help="gloo (CPU) or nccl (CUDA).")] = "gloo",
    timeout: Annotated[float, typer.Option(help="Seconds per collective before failing.")]
    = 120.0,
    load: Annotated[str, typer.Option(help="What runs beside the timed all-reduces on every "
                                      "rank: none (idle ranks), compute (a thread busy "
                                      "with matrix products, as during backward) or both "
                                      "(idle fit + under_load fit + the cost of messages "
                                      "queued back to back under load: the simulator "
                                      "charges each message by what overlaps it).")] = "none",
    comm_nice: CommNiceOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON: a row per timed size "
                                           "and load (seconds, bytes) and the fits.")] = False,
) -> None:
    """Time all-reduces across spawned ranks and fit alpha-beta, ring and piecewise models;
    write the network file ``dlsched dataparallel --network`` reads.

    ``dlsched calibrate runs RUNS --out GPU.yaml`` instead fits a GPU file to measured
    training runs (``cli/calibration.py``)."""
    if ctx.invoked_subcommand is not None:
        return
    check_files({"--out": (out, (".yaml", ".yml", ".json"))})
    WORKERS.check(workers, "--workers")
    low, high = parse_bytes(min_size), parse_bytes(max_size)
    for option, value, ok, accepted in (
            ("--min-size", low, 4 <= low < high,
             f"4 B to 4 GiB, below --max-size ({high:,} B)"),
            ("--max-size", high, low < high <= 2**32,
             f"above --min-size ({low:,} B), at most 4 GiB"),
            ("--points", points, 2 <= points <= 64, "2 to 64"),
            ("--repeats", repeats, 1 <= repeats <= 1000, "1 to 1000")):
        if not ok:
            unit = " B" if option.endswith("size") else ""
            raise ConfigError(f"{option}: {value:,}{unit} is out of range; accepted: {accepted}")
    if model not in FIT_MODELS:
        raise ConfigError(f"--model: {model!r} is not a fit; accepted: {', '.join(FIT_MODELS)}")
    try:
        check_load(load)
        options = _spawn_options(workers, "--workers", backend=backend, timeout_s=timeout,
                                 comm_nice=comm_nice, own_sessions=False)
    except ConfigError as error:
        raise named_by_option(error, {"load": "--load", "comm_nice": "--comm-nice",
                                      "timeout_s": "--timeout"}) from None
    from dlsched.runtime import calibrate_network, calibration_sizes, write_network

    sizes = calibration_sizes(low, high, points)
    with activity(f"timing all-reduces on {workers} ranks (load {load})", json_out):
        document = calibrate_network(sizes, workers, repeats, load, backend, model, comm_nice,
                                     options)
    write_network(document, out)
    fit = document["alpha_beta"]
    announce(f"network file ({len(sizes)} sizes on {workers} ranks, load {load}; alpha-beta "
             f"fit alpha {fit['alpha'] * 1e6:.1f} us, bandwidth {fit['bandwidth'] / 1e9:.3f} "
             f"GB/s; --network uses the {model} fit)", out, json_out)
    if json_out:
        emit_rows(_calibration_rows(document, "under load" if load == "compute" else "idle"),
                  True, None,
                  {"out": str(out), "workers": workers, "model": model,
                   "fits": {key: document[key] for key in ("alpha_beta", "ring", "piecewise")}})


def _calibration_rows(document: dict[str, Any], top: str) -> list[dict[str, Any]]:
    """A row per timed size and load (``top``: the load of the top-level samples; under load,
    queued under load, queued idle): bytes, seconds."""
    loaded = document.get("under_load") or {}
    blocks = ((top, document), ("under load", loaded),
              ("queued under load", loaded.get("stream") or {}),
              ("queued idle", document.get("stream") or {}))
    return [{"load": name, "bytes": sample["bytes"], "seconds": sample["seconds"]}
            for name, block in blocks for sample in block.get("samples", [])]


def train_dataparallel(
    module: ModuleOption = "resnet",
    input_shape: ShapeOption = "",
    batch_size: BatchOption = 8,
    workers: Annotated[int | None, typer.Option(
        help="Ranks to spawn; default: the count --network describes (a calibrated file's or "
             "a preset's), else 2. Must match it, as in `dlsched dataparallel`.")] = None,
    network: Annotated[str, typer.Option(help="Network model for the prediction: a file from "
                                         "`dlsched calibrate` or any `dataparallel --network` "
                                         "value.")] = "network.yaml",
    policy: Annotated[str, typer.Option(help="Policies, comma-separated: "
                                        + ", ".join([*POLICIES, "torch-ddp"]))]
    = ",".join([*POLICIES, "torch-ddp"]),
    iterations: Annotated[int, typer.Option(help="Training iterations per policy.")] = 12,
    warmup: Annotated[int, typer.Option(help="Iterations not measured.")] = 4,
    rounds: Annotated[int, typer.Option(help="Rounds: each profiles again and trains every "
                                        "policy ITERATIONS steps, the policies' order rotated; "
                                        "measurements and profile pooled over the rounds.")]
    = 1,
    optimizer: Annotated[str, typer.Option(help="sgd (momentum 0.9) or adam.")] = "sgd",
    lr: Annotated[float, typer.Option(help="Learning rate.")] = 0.01,
    timeout: Annotated[float, typer.Option(help="Seconds per collective before failing.")]
    = 120.0,
    comm_nice: CommNiceOption = None,
    profile_in: Annotated[str, typer.Option(help="Where the prediction's compute times are "
                                            "measured, on every rank at once: training "
                                            "(iterations through the executor with one "
                                            "all-reduce after backward) or passes (plain "
                                            "forward/backward passes).")] = "training",
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON rows.")] = False,
    csv: Annotated[Path | None, typer.Option(help="Write rows as CSV.")] = None,
    trace: Annotated[Path | None, typer.Option(help="Chrome trace of the last executor "
                                               "policy's measured iteration (rank 0).")] = None,
    plot: Annotated[Path | None, typer.Option(help="PNG: measured and predicted timeline per "
                                              "policy.")] = None,
) -> None:
    """Train ITERATIONS steps per policy through the plan executor (and real DDP as
    torch-ddp) on spawned gloo ranks; print measured vs predicted iteration time."""
    check_files({"--csv": (csv, (".csv",)), "--trace": (trace, (".json",)),
                 "--plot": (plot, (".png",))}, {"--network": network})
    if workers is not None:
        WORKERS.check(workers, "--workers")
    LEARNING_RATE.check(lr, "--lr")
    names = tuple(parse_names(policy, [*POLICIES, "torch-ddp"], "--policy"))
    if (trace or plot) and names == ("torch-ddp",):
        raise ConfigError("--policy: --trace and --plot show the plan executor's measured "
                          "timeline; add a dlsched policy (torch-ddp is not recorded)")
    try:
        workers = network_for_workers(network, workers, default=2)[1] or 2
        options = _spawn_options(workers, "--workers", timeout_s=timeout, deadline_s=3600,
                                 comm_nice=comm_nice, own_sessions=False)
    except ConfigError as error:
        raise named_by_option(error, TORCH_OPTIONS) from None
    if (note := assumed_latency_note(network)) is not None:
        (status_console if json_out else console).print(f"note: {note}", highlight=False)
    from dlsched.runtime import require_torch

    require_torch()
    from dlsched.runtime import train_policies

    config = _config(module, input_shape, batch_size, policies=names, network=network,
                     iterations=iterations, warmup=warmup, optimizer=optimizer, lr=lr,
                     profile_in=profile_in, rounds=rounds)
    with activity(f"training {len(names)} policies on {workers} ranks", json_out):
        try:
            trained = train_policies(config, workers, options)
        except ConfigError as error:  # the module checked before any rank: named by option
            raise named_by_option(error, TORCH_OPTIONS) from None
    rows, runs = trained.rows, trained.runs
    if trace is not None:
        last = [run for run in runs if run.plan is not None][-1]
        write_chrome_trace(last.timeline, trace)
        announce(f"Chrome trace ({last.policy}, measured on rank 0)", trace, json_out)
    if plot is not None:
        panels = trained.panels()
        plot_timelines(panels, plot)
        announce(f"PNG plot ({len(panels)} panels: measured and predicted per policy)", plot,
                 json_out)
    if not json_out:
        render_table(rows, COLUMNS, f"{module}: data-parallel iteration on {workers} ranks "
                     f"(backward + next forward; median of {rounds} x {iterations - warmup}), "
                     f"predicted on {network}; error = predicted / measured - 1", console)
    emit_rows(rows, json_out, csv)


def register(app: typer.Typer, reproduce: typer.Typer) -> None:
    """Add this module's commands to the CLI."""
    app.command("profile")(profile_command)
    calibrate_app.callback()(calibrate_command)
    app.add_typer(calibrate_app, name="calibrate")
    run_app.command("dataparallel")(train_dataparallel)
    app.add_typer(run_app, name="run")
