"""``dlsched reproduce layouts``: Hagemann et al.'s multi-node layout sweep of LLaMA 13B-65B
priced and ranked by the job evaluator, and its memory check against the trials that ran out
of memory (``dlsched.experiments.layout_sweep``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dlsched.cli.options import announce, parse_names
from dlsched.cli.paths import check_files
from dlsched.cli.scenario_runs import Reproduction, reproduction_command


@reproduction_command
def reproduce_layouts(
    sweeps: Annotated[str, typer.Option(
        help="Sheets, comma-separated (13b-2k-64gpu, 30b-2k-256gpu, 65b-2k-128gpu, ...: "
        "model, sequence length, GPUs, -sp for the sequence-parallelism sheets), or all.")]
    = "all",
    plot: Annotated[Path | None, typer.Option(
        help="PNG of predicted against measured step time and of each group's ranking "
        "(each trial over its group's best, measured and predicted).")] = None,
    *,
    run: Reproduction,
) -> None:
    """Hagemann et al.'s layout sweep (NeurIPS 2023 WANT; 984 trials of LLaMA 13B, 30B and
    65B on 32-256 A100s, Aleph Alpha's code): predicted beside measured step time, mean error
    and bias per group of layouts (sheet, kernel, sequence parallelism), by kernel, TP, PP and
    micro-batch, the Kendall tau and whether the layout dlsched ranks first is within 3% of
    the best measured, and how many of the trials that ran out of memory dlsched plan's memory
    check refuses. A few seconds."""
    from dlsched.experiments import layout_sweep

    chosen = layout_sweep.SWEEPS if sweeps == "all" else \
        tuple(parse_names(sweeps, layout_sweep.SWEEPS, "--sweeps"))
    check_files({"--plot": (plot, (".png",)), "--csv": (run.csv, (".csv",))})
    result = run.show(layout_sweep, layout_sweep.Options(chosen))
    if plot is not None:
        from dlsched.experiments.layout_plot import plot_layouts

        drawn = plot_layouts(result.rows, layout_sweep.group_key, plot,
                             "Hagemann et al.'s layout sweep priced by dlsched (a100 preset)")
        announce(f"PNG plot ({drawn} trials)", plot, run.json_out)


def register(app: typer.Typer, reproduce: typer.Typer) -> None:
    """Add ``reproduce layouts``."""
    reproduce.command("layouts")(reproduce_layouts)
