"""``dlsched compute`` (predicted step time and MFU), ``dlsched compute calibrate``,
``dlsched compute measure`` and ``dlsched reproduce megatron``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer
import yaml

from dlsched.cli.options import announce, console, named_by_option, parse_names
from dlsched.cli.paths import check_files
from dlsched.cli.scenario_runs import Reproduction, reproduction_command
from dlsched.errors import ConfigError
from dlsched.progress import progress_bar
from dlsched.report import Column, render_table, write_text
from dlsched.report.columns import percents, standard, text, times
from dlsched.report.tables import in_ms, in_percent, in_us
from dlsched.validation import BATCH, MAX_BATCH

compute_app = typer.Typer(help="Predicted compute time and MFU of a zoo model on a GPU.",
                          invoke_without_command=True)

STEP_COLUMNS = [*text("model"), Column("batch_size", "batch"), *text("device", "precision"),
                *times(in_ms(2), forward_s="forward", backward_s="backward", step_s="step"),
                *percents(in_percent(0), launch_bound="GPU waits"), *standard("mfu")]


def _batch(value: float) -> int:
    """The batch size as an int, refusing NaN, infinities, fractions and out-of-range."""
    if not isinstance(value, int | float) or not math.isfinite(value) or value != int(value):
        raise ConfigError(f"--batch-size: {value!r} is not a whole number; accepted: "
                          f"1..{MAX_BATCH}")
    BATCH.check(int(value), "--batch-size")
    return int(value)


@compute_app.callback()
def compute(
    ctx: typer.Context,
    model: Annotated[str | None, typer.Option(help="Zoo model name (resnet50, gpt2, ...).")]
    = None,
    batch_size: Annotated[float | None, typer.Option(
        help=f"Samples per step (1..{MAX_BATCH}).")] = None,
    device: Annotated[str, typer.Option(
        help="GPU preset (v100, a100, h100, h100-hbm2e-96gb, h800, h200, b200, gb200, b300, "
             "gb300, mi300x) or GPU file.")] = "h100",
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
    from dlsched.training import starved_note, step_row

    try:
        row = step_row(model, _batch(batch_size), device, precision, channels_last, lm_head)
    except ConfigError as error:
        raise named_by_option(error, ("model", "device", "precision", "lm_head"),
                              {"--device": device}) from None
    note = starved_note(row)
    if json_out:
        print(json.dumps({"rows": [row], "notes": [note] if note else []}))
        return
    render_table([row], STEP_COLUMNS, f"{row['model']} training step (forward + backward, no "
                 f"optimizer) on one {row['device']}, {row['precision']}; MFU = 3 x forward "
                 "FLOP / step / peak", console)
    if note:
        console.print(f"note: {note}")


FIT_COLUMNS = [*text("case"), *times(in_ms(1), measured_s="measured", predicted_s="predicted"),
               *percents(in_percent(1, signed=True), error="error")]


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
    from dlsched.runtime import calibrate_gpu

    check_files({"--out": (out, (".yaml", ".yml"))}, {"MEASUREMENTS": measurements})
    fit = calibrate_gpu(measurements, force)
    rows = fit.rows
    if out is not None:
        write_text(out, yaml.safe_dump(fit.document, sort_keys=False))
    if json_out:
        print(json.dumps({"rows": rows, "gpu": fit.document, "fitted": fit.fitted,
                          "worst_error": fit.worst_error}))
    else:
        render_table(rows, FIT_COLUMNS, f"{fit.gpu.name}: fitted {', '.join(fit.fitted)} "
                     f"(worst error {fit.worst_error:.1%})", console)
    if out is not None:
        announce("GPU file", out, json_out)


MEASURE_COLUMNS = [Column("case", "kernel", justify="left"),
                   Column("measured_s", "measured (us)", in_us(1)),
                   Column("predicted_s", "fitted (us)", in_us(1)),
                   *percents(in_percent(1, signed=True), error="error")]

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
    from dlsched.runtime import kernel_grid, measure_gpu

    check_files({"--out": (out, (".yaml", ".yml"))}, {"--base": base})
    kernels = kernel_grid(device, base, tiny)
    name = kernels.name
    progress = progress_bar(f"timing {len(kernels.kernels)} kernels on {name}", json_out)
    fitted = measure_gpu(kernels, out.stem, progress)
    document, names, table = fitted.document, fitted.fitted, fitted.rows
    write_text(out, yaml.safe_dump(document, sort_keys=False))
    if json_out:
        print(json.dumps({"rows": table, "gpu": document, "fitted": names}))
    else:
        render_table(table, MEASURE_COLUMNS, f"{name}: measured vs fitted per kernel (fitted "
                     f"{', '.join(names)})", console)
    announce("GPU file", out, json_out)


@reproduction_command
def reproduce_megatron(
    rows: Annotated[str, typer.Option(
        help="Rows, comma-separated (gpt-1.7b, gpt-39.1b, ...), or all.")] = "all",
    max_plan_gpus: Annotated[int, typer.Option(
        help="Run dlsched's own planner only on rows with at most this many GPUs (0: "
        "none); 32 plans the 1.7B row only (minutes; 64 GPUs take about 8).")] = 32,
    *,
    run: Reproduction,
) -> None:
    """Megatron-LM SC21 Table 1: predicted TFLOP/s per GPU for Megatron's own configuration
    beside the published one, and dlsched's own plan (same GPUs, batch and model). All rows
    take about 10-15 minutes on 2 cores (the 530B and 1T rows simulate over half a million
    actions each; planning the 32-GPU row takes 2-4 minutes)."""
    from dlsched.experiments import megatron

    chosen = megatron.ROW_NAMES if rows == "all" else \
        tuple(parse_names(rows, megatron.ROW_NAMES, "--rows"))
    if max_plan_gpus < 0:
        raise ConfigError(f"--max-plan-gpus: {max_plan_gpus} must be >= 0")
    run.show(megatron, megatron.Options(chosen, max_plan_gpus))


def register(app: typer.Typer, reproduce: typer.Typer) -> None:
    """Add ``compute`` and ``reproduce megatron``."""
    app.add_typer(compute_app, name="compute")
    reproduce.command("megatron")(reproduce_megatron)
