"""``dlsched reproduce vtrain``: vTrain's single-node measured layouts priced and ranked by
the job evaluator (``dlsched.experiments.vtrain``)."""

from __future__ import annotations

from typing import Annotated

import typer

from dlsched.cli.options import parse_names
from dlsched.cli.scenario_runs import Reproduction, reproduction_command


@reproduction_command
def reproduce_vtrain(
    models: Annotated[str, typer.Option(
        help="Models, comma-separated (h1024-l12 ... h2048-l24: hidden size and layers), "
        "or all.")] = "all",
    gpu: Annotated[str, typer.Option(
        help="GPU preset or GPU file the rows are priced with (a calibrated file from "
        "`dlsched calibrate runs`).")] = "a100",
    *,
    run: Reproduction,
) -> None:
    """vTrain's 1,440 measured single-node layouts (8 GPT models on 2-8 A100s, Megatron-
    DeepSpeed): predicted beside measured iteration time, mean error and bias per model, by
    TP, PP and microbatch, and per group of layouts (model, GPUs, global batch) the Kendall
    tau and whether the layout dlsched ranks first is within 3% / 5% of the best measured.
    A few seconds."""
    from dlsched.experiments import vtrain

    chosen = vtrain.MODELS if models == "all" else \
        tuple(parse_names(models, vtrain.MODELS, "--models"))
    run.show(vtrain, vtrain.Options(chosen, gpu))


def register(app: typer.Typer, reproduce: typer.Typer) -> None:
    """Add ``reproduce vtrain``."""
    reproduce.command("vtrain")(reproduce_vtrain)
