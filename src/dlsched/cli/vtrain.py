"""``dlsched reproduce vtrain``: vTrain's single-node measured layouts priced and ranked by
the job evaluator (``dlsched.experiments.vtrain``), on a preset or on a GPU file fitted to a
sample of them (``--calibrate-on``: ``dlsched calibrate runs`` on that sample)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
import yaml

from dlsched.cli.options import announce, parse_names, status_console
from dlsched.cli.paths import check_files
from dlsched.cli.scenario_runs import Reproduction, reproduction_command
from dlsched.errors import ConfigError
from dlsched.report import write_text


@reproduction_command
def reproduce_vtrain(
    models: Annotated[str, typer.Option(
        help="Models, comma-separated (h1024-l12 ... h2048-l24: hidden size and layers), "
        "or all.")] = "all",
    gpu: Annotated[str, typer.Option(
        help="GPU preset or GPU file the rows are priced with (a calibrated file from "
        "`dlsched calibrate runs`).")] = "a100",
    calibrate_on: Annotated[str | None, typer.Option(
        help="Fit the GPU's 16-bit GEMM efficiency and, where the rows are launch-bound, the "
        "host's launch cost (as `dlsched calibrate runs` does) to every --every-th row of this "
        "model, write them to --gpu-out and price every model with them; the fitted rows are "
        "reported apart.")] = None,
    every: Annotated[int, typer.Option(
        help="With --calibrate-on: the sample's stride (20: 9 of a model's 180 rows, 5%).")]
    = 20,
    gpu_out: Annotated[Path | None, typer.Option(
        help="With --calibrate-on: where the fitted GPU file is written (.yaml).")] = None,
    *,
    run: Reproduction,
) -> None:
    """vTrain's 1,440 measured single-node layouts (8 GPT models on 2-8 A100s, Megatron-
    DeepSpeed): predicted beside measured iteration time, mean error and bias per model, by
    TP, PP and microbatch, and per group of layouts (model, GPUs, global batch) the Kendall
    tau and whether the layout dlsched ranks first is within 3% / 5% of the best measured.
    A few seconds (--calibrate-on: two to three minutes more on two cores, the joint fit and
    the leave-one-out fits of two constants)."""
    from dlsched.experiments import vtrain

    chosen = vtrain.MODELS if models == "all" else \
        tuple(parse_names(models, vtrain.MODELS, "--models"))
    if calibrate_on is None:
        if gpu_out is not None:
            raise ConfigError("--gpu-out: it writes the file --calibrate-on MODEL fits")
        run.show(vtrain, vtrain.Options(chosen, gpu))
        return
    model = parse_names(calibrate_on, vtrain.MODELS, "--calibrate-on")[0]
    if gpu != "a100":
        raise ConfigError(f"--gpu: {gpu!r} with --calibrate-on, which fits its own file from "
                          "the a100 preset; give one of the two")
    if gpu_out is None or not 1 <= every <= 180:
        raise ConfigError("--calibrate-on: needs --gpu-out FILE.yaml and 1 <= --every <= 180 "
                          f"(got {gpu_out}, {every})")
    check_files({"--gpu-out": (gpu_out, (".yaml", ".yml")), "--csv": (run.csv, (".csv",))})
    run.show(vtrain, vtrain.Options(chosen, _fit(model, every, gpu_out, run.json_out),
                                    tuple(vtrain.sample(model, every))))


def _fit(model: str, every: int, out: Path, json_out: bool) -> str:
    """Fit the GPU file to the sample (``ledger.calibrate.fit_runs``), write it, return its
    path."""
    from dlsched.experiments import vtrain
    from dlsched.ledger.calibrate import fit_runs, host_text
    from dlsched.ledger.user_runs import UserRun

    rows = vtrain.load_rows()
    runs = [UserRun.model_validate(vtrain.ledger_run(rows[i], i))
            for i in vtrain.sample(model, every)]
    fit = fit_runs(runs, f"vTrain single-node {model}, every {every}th row",
                   lambda what: status_console.print(f"{what} ({len(runs)} runs)",
                                                     highlight=False))
    write_text(out, yaml.safe_dump(fit.document, sort_keys=False))
    low, high = fit.per_run_range
    status_console.print(f"fitted efficiency.gemm.bf16 {fit.value:.4f} +- "
                         f"{fit.standard_error:.4f} (per-run {low:.4f}-{high:.4f})"
                         f"{host_text(fit)} on "
                         f"{len(runs)} rows of {model}; leave-one-out mean |error| "
                         f"{fit.loo_mean_abs_error:.1%}", highlight=False)
    announce("GPU file", out, json_out)
    return str(out)


def register(app: typer.Typer, reproduce: typer.Typer) -> None:
    """Add ``reproduce vtrain``."""
    reproduce.command("vtrain")(reproduce_vtrain)
