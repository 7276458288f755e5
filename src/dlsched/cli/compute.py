"""``dlsched compute`` (predicted step time and MFU), ``dlsched compute calibrate``,
``dlsched compute measure`` and ``dlsched reproduce megatron``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from dlsched.cli.options import announce, console, parse_names
from dlsched.cli.paths import check_files
from dlsched.cli.progress import progress_bar
from dlsched.errors import ConfigError
from dlsched.report import Column, render_table, write_text
from dlsched.validation import BATCH, MAX_BATCH

compute_app = typer.Typer(help="Predicted compute time and MFU of a zoo model on a GPU.",
                          invoke_without_command=True)

STEP_COLUMNS = [Column("model", "model", justify="left"), Column("batch_size", "batch"),
                Column("device", "device", justify="left"),
                Column("precision", "precision", justify="left"),
                Column("forward_s", "forward (ms)", lambda v: f"{v * 1e3:.2f}"),
                Column("backward_s", "backward (ms)", lambda v: f"{v * 1e3:.2f}"),
                Column("step_s", "step (ms)", lambda v: f"{v * 1e3:.2f}"),
                Column("launch_bound", "GPU waits (%)", lambda v: f"{v * 100:.0f}"),
                Column("mfu", "MFU (%)", lambda v: f"{v * 100:.1f}")]


def _batch(value: float) -> int:
    """The batch size as an int, refusing NaN, infinities, fractions and out-of-range."""
    if not isinstance(value, int | float) or not math.isfinite(value) or value != int(value):
        raise ConfigError(f"batch-size: {value!r} is not a whole number; accepted: "
                          f"1..{MAX_BATCH}")
    BATCH.check(int(value), "batch-size")
    return int(value)


def step_row(model: str, batch_size: int, device: str, precision: str | None,
             channels_last: bool = False, lm_head: bool = True) -> dict[str, Any]:
    """One prediction: forward, backward and step seconds and MFU (model FLOP / step time /
    the precision's peak)."""
    from dlsched.models.compute import calibrated, mfu, training_flops
    from dlsched.models.zoo import get_model

    compute = calibrated(device, precision, channels_last=channels_last)
    zoo = get_model(model, lm_head=lm_head)
    timed = compute.step(zoo, batch_size)
    step = timed.step_s
    return {"model": model, "batch_size": batch_size, "device": compute.gpu.name,
            "precision": compute.precision, "channels_last": channels_last, "lm_head": lm_head,
            "forward_s": sum(timed.forward), "backward_s": sum(timed.backward), "step_s": step,
            "gpu_busy_s": timed.gpu_busy_s, "launch_bound": timed.launch_bound,
            "mfu": mfu(training_flops(zoo, batch_size), step, 1, compute.peak_flops)}


STARVED = 0.1  # a step whose GPU waits for launches this fraction of the time gets a note


def starved_note(row: dict[str, Any]) -> str | None:
    """A note when the GPU waits for the host's kernel launches much of the step."""
    if row["launch_bound"] < STARVED:
        return None
    return (f"the GPU waits for kernel launches {row['launch_bound']:.0%} of the step (eager "
            "PyTorch's host launches are the bottleneck: a larger batch, CUDA graphs or "
            "torch.compile would hide them)")


@compute_app.callback()
def compute(
    ctx: typer.Context,
    model: Annotated[str | None, typer.Option(help="Zoo model name (resnet50, gpt2, ...).")]
    = None,
    batch_size: Annotated[float | None, typer.Option(
        help=f"Samples per step (1..{MAX_BATCH}).")] = None,
    device: Annotated[str, typer.Option(
        help="GPU preset (v100, a100, h100, h200) or GPU file.")] = "h100",
    precision: Annotated[str | None, typer.Option(
        help="fp32 (TF32 off), tf32, bf16 or fp16 (autocast), fp8 (h100/h200: Transformer "
        "Engine GEMMs, the rest bf16); default bf16 (fp16 on v100).")] = None,
    channels_last: Annotated[bool, typer.Option(
        help="Convolutions in channels-last (NHWC) layout.")] = False,
    lm_head: Annotated[bool, typer.Option(
        help="Count a GPT's tied LM head (--no-lm-head: GPT2Model).")] = True,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON rows.")] = False,
) -> None:
    """Predicted forward, backward and step (forward + backward) seconds of one training step
    and its model FLOPs utilization, from the calibrated GPU model (docs/compute.md)."""
    if ctx.invoked_subcommand is not None:
        return
    if model is None or batch_size is None:
        raise ConfigError("compute: --model and --batch-size are needed (or a subcommand: "
                          "calibrate)")
    row = step_row(model, _batch(batch_size), device, precision, channels_last, lm_head)
    note = starved_note(row)
    if json_out:
        print(json.dumps({"rows": [row], "notes": [note] if note else []}))
        return
    render_table([row], STEP_COLUMNS, f"{row['model']} training step (forward + backward, no "
                 f"optimizer) on one {row['device']}, {row['precision']}; MFU = 3 x forward "
                 "FLOP / step / peak", console)
    if note:
        console.print(f"note: {note}")


FIT_COLUMNS = [Column("case", "case", justify="left"),
               Column("measured_s", "measured (ms)", lambda v: f"{v * 1e3:.1f}"),
               Column("predicted_s", "predicted (ms)", lambda v: f"{v * 1e3:.1f}"),
               Column("error", "error (%)", lambda v: f"{v * 100:+.1f}")]


@compute_app.command("calibrate")
def calibrate_command(
    measurements: Annotated[Path | None, typer.Argument(
        help="Measurements YAML/JSON (device, cases); default: the bundled H100 steps.")]
    = None,
    out: Annotated[Path | None, typer.Option(help="Write the fitted GPU file here (.yaml).")]
    = None,
    force: Annotated[bool, typer.Option(
        help="Fit and write even with too few cases or a worst error above 25%.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON rows.")] = False,
) -> None:
    """Fit a GPU's launch overheads, memory and transpose efficiencies and per-kind
    efficiencies to measured training steps; prints measured vs predicted per case; --out
    writes a GPU file that --device accepts. Refused (exit 2): fewer cases than constants
    fitted + 2, a measured step faster than the GPU's peak allows, a fit whose worst error
    exceeds 25% (unless --force)."""
    from dlsched.models.calibration import (
        check_cases,
        check_fit,
        fit_constants,
        gpu_document,
        load_measurements,
    )

    check_files({"--out": (out, (".yaml", ".yml"))}, {"MEASUREMENTS": measurements})
    data = load_measurements(measurements)
    check_cases(data, force)
    fit = fit_constants(data.gpu, data.cases, data.source, data.constants)
    check_fit(fit, force)
    rows = [{"case": label, "measured_s": measured, "predicted_s": predicted,
             "error": predicted / measured - 1} for label, measured, predicted in fit.steps]
    if out is not None:
        write_text(out, yaml.safe_dump(gpu_document(fit.gpu), sort_keys=False))
    if json_out:
        print(json.dumps({"rows": rows, "gpu": gpu_document(fit.gpu),
                          "fitted": list(fit.fitted), "worst_error": fit.worst_error()}))
    else:
        render_table(rows, FIT_COLUMNS, f"{fit.gpu.name}: fitted {', '.join(fit.fitted)} "
                     f"(worst error {fit.worst_error():.1%})", console)
    if out is not None:
        announce("GPU file", out, json_out)


MEASURE_COLUMNS = [Column("case", "kernel", justify="left"),
                   Column("measured_s", "measured (us)", lambda v: f"{v * 1e6:.1f}"),
                   Column("predicted_s", "fitted (us)", lambda v: f"{v * 1e6:.1f}"),
                   Column("error", "error (%)", lambda v: f"{v * 100:+.1f}")]
DEVICES = ("cuda", "cpu")


@compute_app.command("measure")
def measure_command(
    out: Annotated[Path, typer.Option(help="Write the measured GPU file here (.yaml).")],
    device: Annotated[str, typer.Option(
        help="cuda (the GPU to calibrate) or cpu (runs the mechanics on torch's CPU build).")]
    = "cuda",
    base: Annotated[str | None, typer.Option(
        help="Preset whose peaks, SMs and bandwidth are kept (default: from the CUDA device "
        "name; h100 on cpu).")] = None,
    tiny: Annotated[bool, typer.Option(
        help="A few small kernels of every class (seconds; for tests), not the zoo's shapes.")]
    = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON rows.")] = False,
) -> None:
    """Time GEMM, convolution (NCHW and channels-last), attention, elementwise and launch
    kernels at the zoo's shapes on this machine (a few minutes on a GPU), fit the GPU's
    constants kernel class by kernel class, print measured vs fitted per kernel, and write a
    GPU file every --device accepts (docs/compute.md)."""
    from dlsched.hardware.gpu import KEY, get_gpu, preset_for
    from dlsched.models.calibration import gpu_document
    from dlsched.models.measure import fit_grid, grid, rows
    from dlsched.models.measure_torch import device_name, measure_grid

    if device not in DEVICES:
        raise ConfigError(f"--device: {device!r}; accepted: " + ", ".join(DEVICES))
    check_files({"--out": (out, (".yaml", ".yml"))})
    name = device_name(device)
    chosen = base or ("h100" if device == "cpu" else preset_for(name))
    if chosen is None:
        raise ConfigError(f"--base: no bundled preset for {name!r}; accepted: --base with a "
                          "preset (v100, a100, h100, h200) or a GPU file of this GPU's peaks")
    gpu = get_gpu(chosen)
    precisions = tuple(p for p in gpu.precisions() if p != "fp16" and KEY[p] != "fp8"
                       and (device == "cuda" or p in ("fp32", "bf16")))
    kernels = grid(precisions, tiny)
    progress = progress_bar(f"timing {len(kernels)} kernels on {name}", json_out)
    timed = measure_grid(kernels, device, progress)
    fitted, names = fit_grid(gpu, timed, f"{name}, {len(kernels)} kernels")
    document = gpu_document(fitted)
    document["name"] = out.stem
    document["description"] = f"{name}, measured by dlsched compute measure (base {chosen})"
    table = rows(fitted, timed)
    write_text(out, yaml.safe_dump(document, sort_keys=False))
    if json_out:
        print(json.dumps({"rows": table, "gpu": document, "fitted": names}))
    else:
        render_table(table, MEASURE_COLUMNS, f"{name}: measured vs fitted per kernel (fitted "
                     f"{', '.join(names)})", console)
    announce("GPU file", out, json_out)


MEGATRON_COLUMNS = [
    Column("model", "model", justify="left"), Column("gpus", "GPUs"),
    Column("config", "TP x PP x DP, mb, v", justify="left"),
    Column("published_tflops_per_gpu", "published (TFLOP/s/GPU)", lambda v: f"{v:.0f}"),
    Column("predicted_tflops_per_gpu", "predicted (TFLOP/s/GPU)", lambda v: f"{v:.1f}"),
    Column("error", "error (%)", lambda v: f"{v * 100:+.1f}"),
    Column("mfu", "MFU (%)", lambda v: f"{v * 100:.1f}"),
    Column("ours_config", "dlsched plan", justify="left"),
    Column("ours_mfu", "dlsched MFU (%)", lambda v: f"{v * 100:.1f}"),
    Column("speedup", "speedup (x)", lambda v: f"{v:.2f}"),
]


def _megatron_rows(results: list[dict[str, Any]], limit: float,
                   max_plan_gpus: int) -> tuple[list[dict], list[str]]:
    rows, notes = [], []
    for r in results:
        if r["fitted"]:
            notes.append(f"{r['model']}: the row the a100 GEMM efficiency was fitted to; the "
                         "other rows are held out")
        ours = r["ours"] or {}
        row = {**r, "config": f"{r['tp']}x{r['pp']}x{r['dp']}, {r['microbatch']}, "
                              f"{r['chunks']}",
               "ours_config": (f"{ours['schedule']} {ours['tp']}x{ours['pp']}x{ours['dp']} "
                               f"{ours['recompute']}") if ours else None,
               "ours_mfu": ours.get("mfu"), "speedup": ours.get("speedup")}
        rows.append(row)
        if r["hfu"] > limit:
            notes.append(f"{r['model']}: Megatron's configuration predicted at {r['hfu']:.0%} "
                         f"of peak (recomputation counted), above the best published "
                         f"{limit:.0%}: the model over-predicts this row by {r['error']:.1%}")
        if not ours:
            notes.append(f"{r['model']}: dlsched's own plan not run ({r['gpus']} GPUs > "
                         f"--max-plan-gpus {max_plan_gpus}: planning this many GPUs takes "
                         "too long here)")
        elif ours["hfu"] > limit:
            notes.append(f"{r['model']}: dlsched's plan runs {ours['hfu']:.0%} of peak (FLOP "
                         f"executed), above the best published {limit:.0%} on this GPU: the "
                         "model, not a measurement, says it is faster")
    return rows, notes


def reproduce_megatron(
    rows: Annotated[str, typer.Option(
        help="Rows, comma-separated (gpt-1.7b, gpt-39.1b, ...), or all.")] = "all",
    max_plan_gpus: Annotated[int, typer.Option(
        help="Run dlsched's own planner only on rows with at most this many GPUs (0: "
        "none); 32 plans the 1.7B row only (minutes; 64 GPUs take about 8).")] = 32,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON rows.")] = False,
) -> None:
    """Megatron-LM SC21 Table 1: predicted TFLOP/s per GPU for Megatron's own configuration
    beside the published one, and dlsched's own plan (same GPUs, batch and model). All rows
    take about 10-15 minutes on 2 cores (the 530B and 1T rows simulate over half a million
    actions each; planning the 32-GPU row takes 2-4 minutes)."""
    from dlsched.experiments import megatron
    from dlsched.hardware.gpu import get_gpu

    by_name = {row.name: row for row in megatron.ROWS}
    chosen = list(by_name) if rows == "all" else parse_names(rows, list(by_name), "--rows")
    if max_plan_gpus < 0:
        raise ConfigError(f"--max-plan-gpus: {max_plan_gpus} must be >= 0")
    progress = progress_bar("pricing Table 1 rows", json_out)
    results = megatron.reproduce([by_name[name] for name in chosen],
                                 max_plan_gpus=max_plan_gpus, progress=progress)
    limit = get_gpu("a100").spec.best_published_utilization or 1.0
    rows, notes = _megatron_rows(results, limit, max_plan_gpus)
    if json_out:
        print(json.dumps({"notes": notes, "rows": [{key: r[key] for key in (
            "model", "gpus", "tp", "pp", "dp", "chunks", "microbatch", "global_batch",
            "published_tflops_per_gpu", "predicted_tflops_per_gpu", "error", "iteration_s",
            "mfu", "hfu", "fitted", "ours")} for r in rows]}))
        return
    render_table(rows, MEGATRON_COLUMNS, "Megatron-LM SC21 Table 1 on the calibrated a100 "
                 "preset (TFLOP/s per GPU by the paper's Eq. 3, recomputation counted; MFU "
                 "without it; speedup = Megatron's time / dlsched plan's, same model)", console)
    console.print(f"source: {megatron.SOURCE}")
    for note in notes:
        console.print(f"note: {note}")


def register(app: typer.Typer, reproduce: typer.Typer) -> None:
    """Add ``compute`` and ``reproduce megatron``."""
    app.add_typer(compute_app, name="compute")
    reproduce.command("megatron")(reproduce_megatron)
