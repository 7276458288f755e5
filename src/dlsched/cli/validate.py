"""``dlsched validate``: every published run of the ledger predicted by the job evaluator and
scored (``dlsched.ledger.report``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from dlsched.cli.options import CsvOption, Outputs, announce, console
from dlsched.report import Column, render_table
from dlsched.report.columns import percents
from dlsched.report.tables import in_percent


def _value(value: float) -> str:
    return f"{value:.4g}"


_signed = in_percent(1, signed=True)


ROW_COLUMNS = [Column("id", "row", justify="left"),
               Column("metric", "metric", justify="left"),
               Column("unit", "unit", justify="left"),
               Column("published", "published", _value),
               Column("predicted", "predicted", _value),
               *percents(_signed, error="error"),
               Column("low", "90% low", _value),
               Column("high", "90% high", _value),
               Column("covered", "covered", lambda v: "yes" if v else "no"),
               Column("held_out", "held out", lambda v: "yes" if v else "no (fitted)")]
SOURCE_COLUMNS = [Column("source", "source", justify="left"),
                  Column("family", "metrics", justify="left"),
                  Column("rows", "rows"),
                  Column("priced", "priced"),
                  *percents(in_percent(1), mean_abs_error="|error|"),
                  *percents(_signed, mean_signed_error="bias"),
                  *percents(in_percent(1), held_out_mean_abs_error="held-out |error|"),
                  Column("worst_row", "worst row", justify="left"),
                  *percents(_signed, worst_error="worst"),
                  *percents(in_percent(0), coverage="covered")]
BOUND_COLUMNS = [Column("id", "row", justify="left"),
                 Column("unit", "unit", justify="left"),
                 Column("published", "published", _value),
                 Column("best", "dlsched's best", _value),
                 *percents(_signed, headroom="headroom"),
                 Column("setting", "best setting", justify="left"),
                 Column("candidates", "settings priced")]
GPU_COLUMNS = [Column("gpu", "GPU", justify="left"),
               Column("preset", "preset", justify="left"),
               Column("family", "metrics", justify="left"),
               Column("rows", "rows"),
               Column("priced", "priced"),
               *percents(in_percent(1), mean_abs_error="|error|"),
               *percents(_signed, mean_signed_error="bias"),
               *percents(in_percent(1), held_out_mean_abs_error="held-out |error|"),
               Column("gemm_provenance", "16-bit GEMM efficiency", justify="left")]


def validate(
    source: Annotated[str | None, typer.Option(
        help="Only this source's rows: sc21, korthikanti, megatron-h100, torchtitan, "
             "megatron-bridge, dgxc, megatron-bridge-moe (the intervals still come from the "
             "whole ledger).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print {\"rows\": [...], "
                                           "\"sources\": [...], \"gpus\": [...], "
                                           "\"bounds\": [...]} as JSON.")] = False,
    plot: Annotated[Path | None, typer.Option(help="PNG of predicted against published "
                                              "with the 90% intervals.")] = None,
    csv: CsvOption = None,
    ledger: Annotated[Path | None, typer.Option(
        help="Score this file of your own measured runs (the ledger schema; "
        "docs/examples/my-runs.yaml) instead of the bundled ledger.")] = None,
    gpu: Annotated[str | None, typer.Option(
        help="With --ledger: price the runs with this GPU preset or file (`dlsched "
        "calibrate runs` writes one); default: each run's own preset.")] = None,
) -> None:
    """Score dlsched against published training runs: each ledger row predicted, its error
    and 90% interval, per source the mean error, bias, worst row and coverage, per GPU the
    same with how its preset's constants were obtained, and each row that leaves settings
    unpublished against dlsched's best over them."""
    from dlsched.errors import ConfigError
    from dlsched.ledger import SOURCES
    from dlsched.ledger.report import validate as run

    if ledger is not None or gpu is not None:
        _validate_runs(ledger, gpu, source, json_out, plot, csv)
        return
    outputs = Outputs(json_out, csv, None, plot)
    if source is not None and source not in SOURCES:
        raise ConfigError(f"--source: {source!r} is not a ledger source; accepted: "
                          + ", ".join(SOURCES))
    report = run(source)
    if not json_out:
        _print(report.rows, report.sources)
        _print_gpus(report.gpus)
        _print_bounds(report.bounds)
    outputs.rows(report.rows, {"sources": report.sources, "gpus": report.gpus,
                               "bounds": report.bounds})
    if plot is not None:
        from dlsched.ledger.plot import plot_validation

        drawn = plot_validation(report.rows, plot)
        announce(f"PNG plot ({drawn} predictions)", plot, json_out)


def _print(rows: list[dict[str, Any]], sources: list[dict[str, Any]]) -> None:
    from dlsched.ledger.report import FIT_MARGIN

    priced = [row for row in rows if row["predicted"] is not None]
    render_table(priced, ROW_COLUMNS, title="Predicted against published (each metric in its "
                 "published unit; error = predicted / published - 1)", console=console)
    left = [row for row in rows if row["predicted"] is None]
    if left:
        print(f"{len({row['id'] for row in left})} rows unsupported:")
        reasons: dict[str, list[str]] = {}
        for row in left:
            reasons.setdefault(row["reason"], [])
            if row["id"] not in reasons[row["reason"]]:
                reasons[row["reason"]].append(row["id"])
        for reason, ids in reasons.items():
            print(f"  {len(ids)}: {reason}: {', '.join(ids)}")
    refused = {row["id"]: row for row in priced if row["memory_admitted"] is False}
    admitted = len({row["id"] for row in priced}) - len(refused)
    print(f"Published layouts dlsched plan's memory check admits: {admitted} of "
          f"{admitted + len(refused)} priced rows (each ran; a refused one is a layout the "
          "search would rule out: memory per GPU GiB > the GPU's, less its runtime reserve "
          f"and a {FIT_MARGIN:.0%} fragmentation margin)")
    for key, row in refused.items():
        print(f"  refused: {key}: {row['memory_per_gpu_gib']:.1f} GiB of "
              f"{row['gpu_memory_gib']:.1f}")
    render_table(sources, SOURCE_COLUMNS, title="Per source (scored rows: one time-derived "
                 "metric per row; errors in %)", console=console)


def _print_gpus(gpus: list[dict[str, Any]]) -> None:
    render_table(gpus, GPU_COLUMNS, title="Per GPU (each generation on its own preset; errors "
                 "in %)", console=console)
    presets = {row["preset"]: row["provenance"] for row in gpus}
    print("How each preset's constants were obtained (presets/gpus.yaml, provenance):")
    for preset, counts in presets.items():
        print(f"  {preset}: {counts}")


def _print_bounds(bounds: list[dict[str, Any]]) -> None:
    if not bounds:
        return
    render_table(bounds, BOUND_COLUMNS, title="Rows whose settings are unpublished, at "
                 "dlsched's best over them (micro-batch size, recomputation, virtual pipeline "
                 "size; admitted by plan's memory check): were dlsched exact, the published "
                 "rate would not exceed it (headroom = best / published - 1, in %; < 0: "
                 "dlsched too slow)", console=console)
    beaten = [row["id"] for row in bounds if row["headroom"] is not None and
              row["headroom"] < 0]
    print(f"Published rate above dlsched's best: {len(beaten)} of {len(bounds)} rows"
          + (f" ({', '.join(beaten)})" if beaten else ""))


RUN_COLUMNS = [*ROW_COLUMNS[:6], Column("reason", "not priced because", justify="left")]


def _validate_runs(ledger: Path | None, gpu: str | None, source: str | None, json_out: bool,
                   plot: Path | None, csv: Path | None) -> None:
    """``--ledger``: the user's runs priced (with ``gpu``) and scored; no intervals."""
    from dlsched.errors import ConfigError
    from dlsched.ledger.user_runs import load_runs, score_runs

    if ledger is None:
        raise ConfigError("--gpu: it prices the runs of --ledger FILE; give both")
    if source is not None or plot is not None:
        raise ConfigError("--ledger: scores your own runs; --source and --plot are for the "
                          "bundled ledger")
    outputs = Outputs(json_out, csv, inputs={"--ledger": ledger})
    rows, summary = score_runs(load_runs(ledger), gpu)
    if not json_out:
        on = gpu or "each run's preset"
        render_table(rows, RUN_COLUMNS, title=f"{ledger.name} on {on} (error = predicted / "
                     "measured - 1)", console=console)
        print(f"{summary['priced']} of {summary['runs']} runs priced; mean |error| "
              + ("-" if summary["mean_abs_error"] is None else
                 f"{summary['mean_abs_error']:.1%}, bias {summary['bias']:+.1%}, worst "
                 f"{summary['worst_run']} {summary['worst_error']:+.1%}"))
    outputs.rows(rows, {"summary": summary})


def register(app: typer.Typer, reproduce: typer.Typer) -> None:
    """Add ``validate``."""
    app.command("validate")(validate)
