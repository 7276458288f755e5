"""``dlsched calibrate runs``: a GPU file fitted to the user's own measured runs
(``dlsched.ledger.calibrate``); the ``calibrate`` group and its network calibration are the
torch runtime's (``cli/runtime.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
import yaml

from dlsched.cli.options import announce, console, status_console
from dlsched.cli.paths import check_files
from dlsched.cli.runtime import calibrate_app
from dlsched.report import Column, render_table, write_text
from dlsched.report.columns import percents
from dlsched.report.tables import fixed, in_percent

_signed = in_percent(1, signed=True)


def _value(value: float) -> str:
    return f"{value:.4g}"


RUN_COLUMNS = [Column("id", "run", justify="left"), Column("metric", "metric", justify="left"),
               Column("unit", "unit", justify="left"),
               Column("published", "measured", _value),
               Column("preset_predicted", "preset", _value),
               *percents(_signed, preset_error="preset error"),
               Column("predicted", "fitted", _value), *percents(_signed, error="fitted error"),
               *percents(_signed, loo_error="left-out error"),
               Column("own_fit", "own fit (fraction)", fixed(4))]


def calibrate_runs(
    runs: Annotated[Path, typer.Argument(
        metavar="RUNS",
        help="Measured runs in the ledger schema (YAML/JSON; docs/examples/my-runs.yaml).")],
    out: Annotated[Path, typer.Option(help="Write the fitted GPU file here (.yaml).")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON: a row per run and "
                                           "the fit.")] = False,
) -> None:
    """Fit the GPU's 16-bit GEMM efficiency, and the host's kernel-launch cost where the runs
    are launch-bound, to your measured runs (each priced as `dlsched validate` prices the
    ledger), print per run the measured, preset and fitted predictions and
    the leave-one-out error, and write a GPU file that `dlsched plan --gpu` and `dlsched
    validate --ledger RUNS --gpu` accept. Refused with one line: fewer than 3 runs the
    evaluator can price, runs on several GPU models, runs whose times do not depend on the GEMM
    efficiency, a fit at its bound."""
    from dlsched.ledger.calibrate import PARAMETER, fit_runs, host_text
    from dlsched.ledger.user_runs import load_runs

    check_files({"--out": (out, (".yaml", ".yml"))}, {"RUNS": runs})
    rows = load_runs(runs, "RUNS")
    fit = fit_runs(rows, runs.name, lambda what: status_console.print(
        f"{what} ({len(rows)} runs)", highlight=False))
    write_text(out, yaml.safe_dump(fit.document, sort_keys=False))
    low, high = fit.per_run_range
    summary = {"parameter": PARAMETER, "preset": fit.preset, "value": fit.value,
               "standard_error": fit.standard_error, "per_run_low": low, "per_run_high": high,
               "host_fitted": fit.host_fitted, "host_factor": fit.host,
               "host_standard_error": fit.host_standard_error,
               "loo_mean_abs_error": fit.loo_mean_abs_error, "notes": list(fit.notes),
               "out": str(out)}
    if json_out:
        print(json.dumps({"rows": fit.rows, **summary}))
    else:
        render_table(fit.rows, RUN_COLUMNS, f"{fit.preset} {PARAMETER} fitted to {runs.name}: "
                     f"{fit.value:.4f} +- {fit.standard_error:.4f} (per-run fits "
                     f"{low:.4f}-{high:.4f}){host_text(fit)}; leave-one-out mean |error| "
                     f"{fit.loo_mean_abs_error:.1%}; error = predicted / measured - 1",
                     console)
        for note in fit.notes:
            console.print(f"note: {note}", highlight=False)
    announce("GPU file", out, json_out)


def register(app: typer.Typer, reproduce: typer.Typer) -> None:
    """Add ``calibrate runs`` to the ``calibrate`` group."""
    calibrate_app.command("runs")(calibrate_runs)
