"""``dlsched sweep``: run a grid file (``dlsched sweep grid.yaml`` = ``dlsched sweep run``),
export, summarize and plot its results."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from dlsched.cli.options import console, emit_rows, named_by_option
from dlsched.cli.paths import check_files, database_files
from dlsched.cli.scenario_runs import (
    AddressOption,
    ExecutorOption,
    WorkersOption,
    execute,
    open_store,
)
from dlsched.errors import ConfigError
from dlsched.report import Column, atomic_output, render_table, rows_to_csv, to_json, write_text
from dlsched.report.tables import as_ratio
from dlsched.sweep import (
    TIMING_BUDGET_S,
    Grid,
    PendingTasks,
    SweepJob,
    best_per_group,
    check_executor,
    collect_cases,
    dry_run,
    load_grid,
    read_meta,
    read_rows,
    speedup_pivot,
)
from dlsched.units import format_duration, format_time
from dlsched.validation import count

BATCH_SIZE = count("batch size", 1, 100_000)


class _RunByDefault(TyperGroup):
    """A group whose first argument, when it is not a subcommand, is run's grid file."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


sweep_app = typer.Typer(cls=_RunByDefault, no_args_is_help=True,
                        help="Design-space sweeps: run a grid file (dlsched sweep GRID.yaml), "
                        "then export, summarize or plot the results file.")

def run(
    grid: Annotated[Path, typer.Argument(help="Grid file (YAML or JSON).")],
    db: Annotated[Path | None, typer.Option(help="Results file (SQLite); default: "
                                            "GRID's name with .db, in the current folder.")]
    = None,
    executor: ExecutorOption = "process",
    workers: WorkersOption = None,
    address: AddressOption = None,
    resume: Annotated[bool, typer.Option(help="Continue: skip scenarios already stored.")]
    = False,
    overwrite: Annotated[bool, typer.Option(help="Delete an existing results file first.")]
    = False,
    retry_errors: Annotated[bool, typer.Option(help="With --resume, rerun scenarios stored "
                                               "as errors.")] = False,
    batch_size: Annotated[int | None, typer.Option(help="Scenarios per task (1..100,000); "
                                                   "default: about 8 tasks per worker, at most "
                                                   "64.")]
    = None,
    dry_run: Annotated[bool, typer.Option(help="Print the scenario count and an estimated "
                                          "time (from timing up to 12 scenarios sampled "
                                          "across the grid's values here); run nothing.")]
    = False,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON: the counts and the "
                                           "estimate (with --dry-run) or what ran (seconds).")]
    = False,
) -> None:
    """Run every scenario of a grid file, committing one row per scenario as it finishes."""
    if resume and overwrite:
        raise ConfigError("--overwrite: contradicts --resume (one deletes the results file, "
                          "the other continues it); accepted: one of them")
    if retry_errors and not resume:
        raise ConfigError("--retry-errors: reruns the error rows of a resumed sweep; "
                          "accepted: with --resume")
    check_executor(executor, workers, address)
    if batch_size is not None:
        BATCH_SIZE.check(batch_size, "--batch-size")
    path = db if db is not None else Path(grid.stem + ".db")
    check_files(database_files("--db", path), {"GRID": grid})
    try:
        loaded = load_grid(grid)
    except ConfigError as error:  # the grid file's own error named by GRID
        raise named_by_option(error, files={"GRID": grid}) from None
    check_files(database_files("--db", path), {"GRID": grid, **_named_files(loaded)})
    job = SweepJob.from_grid(loaded)
    if dry_run:
        _dry_run(job, loaded, path, workers, resume, json_out)
        return
    with open_store(path, job, resume, overwrite) as store:
        todo = PendingTasks(job, store, retry_errors)
        start = time.perf_counter()
        ran = execute(job, store, todo, executor, workers, address, batch_size,
                      quiet or json_out)
        if json_out:
            print(to_json({"rows": [{"name": job.name, "ran": ran, "skipped": todo.skipped,
                                     "stored": store.count(), "errors": store.count("error"),
                                     "seconds": time.perf_counter() - start,
                                     "db": store.path}]}))


def _named_files(grid: Grid) -> dict[str, str]:
    """The existing files the grid's values name (topology, profile, chain files ...), each
    by its place in the grid file: inputs the results file may not overwrite."""
    spec = grid.spec
    places = [(f"fixed.{name}", value) for name, value in spec.fixed.items()]
    places += [(f"axes.{name}[{i}]", value) for name, values in spec.axes.items()
               for i, value in enumerate(values)]
    places += [(f"zip[{g}].{name}[{i}]", value) for g, group in enumerate(spec.zipped)
               for name, values in group.items() for i, value in enumerate(values)]
    return {f"GRID's {place}": value for place, value in places
            if isinstance(value, str) and os.path.isfile(value)}


def _dry_run(job: SweepJob, grid: Grid, path: Path, workers: int | None, resume: bool,
             json_out: bool) -> None:
    """Print the grid's counts and estimated time (``sweep.estimate.dry_run``)."""
    counted = dry_run(job, grid, path, workers, resume)
    per, todo, slots, cores = counted.per_scenario_s, counted.to_run, counted.slots, \
        counted.cores
    seconds, timed = counted.seconds, counted.timed
    at_least = "at least " if counted.lower_bound else ""
    if json_out:
        print(to_json({"rows": counted.rows(), "name": job.name, "scenarios": grid.count,
                       "distinct": counted.distinct, "to_run": todo, "per_scenario_s": per,
                       "estimate_s": counted.estimate_s, "lower_bound": counted.lower_bound,
                       "workers": slots, "usable_cores": cores}))
        return
    head = (f"{job.name}: {grid.count} scenarios in the grid ({counted.distinct} distinct), "
            f"{todo} to run; ")
    if not timed.warmed:
        console.print(head + f"the first scenario timed (imports included) was still running "
                      f"after {format_time(per, 3)}, so at least about "
                      f"{format_duration(counted.estimate_s)} with {slots} workers on "
                      f"{cores} usable cores (a lower bound: timing stops after a few seconds)",
                      highlight=False)
        return
    cut = (f"; timing stopped after {TIMING_BUDGET_S:g} s with a scenario still running after "
           f"{format_time(timed.unfinished_s, 3)}, counted as that: a lower bound"
           if timed.unfinished_s is not None else "")
    console.print(head + f"{at_least}about {format_time(per, 3)} each when run alone here, so "
                  f"{at_least}about {format_duration(counted.estimate_s)} with {slots} workers "
                  f"on {cores} usable cores (mean of {len(seconds)} scenarios sampled across "
                  f"every parameter's values after one warm-up: {format_time(min(seconds), 3)} "
                  f"to {format_time(max(seconds), 3)} each"
                  + (f"; they differ {counted.spread:.0f}x, so the estimate is rough"
                     if counted.spread > 10 else "") + cut + ")", highlight=False)


def export(
    db: Annotated[Path, typer.Argument(help="Results file of a sweep.")],
    csv: Annotated[Path | None, typer.Option(help="Write every row as CSV.")] = None,
    parquet: Annotated[Path | None, typer.Option(help="Write every row as Parquet (needs "
                                                 "pyarrow).")] = None,
    where: Annotated[str, typer.Option(help="Row filter: COLUMN OP VALUE clauses joined by "
                                       "AND (OP: =, !=, <, <=, >, >=, like), e.g. \"status = "
                                       "ok AND size >= 1000000\"; never run as SQL.")] = "",
) -> None:
    """Export a results file (one row per scenario, SI units) to CSV and/or Parquet."""
    if csv is None and parquet is None:
        raise ConfigError("export: give --csv PATH and/or --parquet PATH")
    check_files({"--csv": (csv, (".csv",)), "--parquet": (parquet, (".parquet",))}, {"DB": db})
    if parquet is not None:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise ConfigError("--parquet: Parquet export needs the optional package 'pyarrow' "
                              "(pip install pyarrow); --csv works without it") from None
    rows = read_rows(db, where)
    if csv is not None:
        write_text(csv, rows_to_csv(rows))
        console.print(f"wrote {len(rows)} rows to {csv}")
    if parquet is not None:
        with atomic_output(parquet) as temporary:
            pq.write_table(pa.Table.from_pylist(rows), str(temporary))
        console.print(f"wrote {len(rows)} rows to {parquet}")


PARAM_UNITS = {"size": "B", "latency_scale": "x"}
"""Units of the grid parameters that carry one (stored in SI units)."""


def _header(name: str) -> str:
    """A parameter's column header with its unit, e.g. ``size (B)``."""
    return f"{name} ({PARAM_UNITS[name]})" if name in PARAM_UNITS else name


def _split(text: str | None) -> list[str] | None:
    return None if text is None else [part.strip() for part in text.split(",") if part.strip()]


def _cases(db: Path, baseline: str | None, metric: str | None) -> tuple[Any, str]:
    meta = read_meta(db)
    if "policy_param" not in meta:
        raise ConfigError(f"--db: {db} was not written by 'dlsched sweep run'")
    time_metric = metric or meta["time_metric"]
    if meta["policy_param"] not in meta["varied"]:
        raise ConfigError(f"summary: the grid does not vary {meta['policy_param']!r}, so "
                          "there are no policies to compare")
    try:
        cases = collect_cases(read_rows(db), meta["policy_param"], time_metric, meta["varied"],
                              baseline or meta.get("baseline"))
    except ConfigError as error:  # the options' fields, named by the options
        raise named_by_option(error, ("baseline", "metric")) from None
    return cases, time_metric


def summary(
    db: Annotated[Path, typer.Argument(help="Results file of a sweep.")],
    by: Annotated[str | None, typer.Option(help="Group by these varied parameters "
                                           "(comma-separated); default: the first one.")]
    = None,
    baseline: Annotated[str | None, typer.Option(help="Policy to compare against; default: "
                                                 "the grid's 'baseline', else the first.")]
    = None,
    metric: Annotated[str | None, typer.Option(help="Time metric to compare (lower is "
                                               "better); default: the domain's time.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    csv: Annotated[Path | None, typer.Option(help="Write the speedup table as CSV.")] = None,
) -> None:
    """Best policy per group and speedup tables (speedup_vs_BASELINE = baseline time / time,
    geometric mean over the group's cases)."""
    check_files({"--csv": (csv, (".csv",))}, {"DB": db})
    cases, time_metric = _cases(db, baseline, metric)
    groups = _split(by) if by is not None else list(cases.params[:1])
    unknown = [name for name in groups if name not in cases.params]
    if unknown or not groups:
        raise ConfigError(f"--by: {', '.join(unknown) or repr(by)} does not vary in this "
                          f"sweep; accepted: {', '.join(cases.params)} (comma-separated)")
    best = best_per_group(cases, groups)
    pivot = speedup_pivot(cases, groups)
    if not json_out:
        group_columns = [Column(name, _header(name), justify="left") for name in groups]
        column = cases.speedup_column
        render_table(best, [*group_columns, Column("best", "best policy", justify="left"),
                            Column(column, f"{column} (x, geo-mean)", as_ratio),
                            Column("fastest_in", "fastest in (cases)"), Column("cases", "cases")],
                     f"best {cases.policy_param} per group by {time_metric} (seconds), "
                     f"baseline {cases.baseline}", console)
        render_table(pivot, [*group_columns] + [
            Column(str(p), f"{p} (x)", as_ratio) for p in cases.policies],
            f"{column} per {cases.policy_param}: geometric mean over each group's cases "
            "(>1 = faster than the baseline)", console)
    emit_rows(pivot, json_out, csv, {"best": best, "baseline": cases.baseline,
                                     "metric": time_metric} if json_out else None)


def plot(
    db: Annotated[Path, typer.Argument(help="Results file of a sweep.")],
    heatmap: Annotated[Path | None, typer.Option(help="PNG: speedup of each policy over the "
                                                 "baseline on an --x by --y grid.")] = None,
    line: Annotated[Path | None, typer.Option(help="PNG: a line per policy over --x.")] = None,
    x: Annotated[str | None, typer.Option(help="Parameter on the x axis.")] = None,
    y: Annotated[str | None, typer.Option(help="Parameter on the heat map's y axis.")] = None,
    quantity: Annotated[str, typer.Option(help="Line plot of 'speedup' or 'time'.")]
    = "speedup",
    baseline: Annotated[str | None, typer.Option(help="Policy to compare against.")] = None,
    metric: Annotated[str | None, typer.Option(help="Time metric (lower is better).")] = None,
) -> None:
    """Heat maps and line plots of a sweep's results (PNG)."""
    from dlsched.sweep import plot_heatmaps, plot_lines

    if heatmap is None and line is None:
        raise ConfigError("plot: give --heatmap PATH and/or --line PATH")
    if quantity not in ("speedup", "time"):
        raise ConfigError(f"--quantity: unknown {quantity!r}; accepted: speedup, time")
    check_files({"--heatmap": (heatmap, (".png",)), "--line": (line, (".png",))}, {"DB": db})
    cases, time_metric = _cases(db, baseline, metric)
    names = list(cases.params)
    x_name = x or (names[0] if names else None)
    if x_name is None:
        raise ConfigError("--x: the sweep varies nothing besides the policy; nothing to plot")
    for option, name in (("--x", x_name), ("--y", y)):
        if name is not None and name not in names:
            raise ConfigError(f"{option}: {name!r} does not vary in this sweep; accepted: "
                              + ", ".join(names))
    if heatmap is not None:
        y_name = y or next((n for n in names if n != x_name), None)
        if y_name is None or y_name == x_name:
            raise ConfigError(f"--y: a heat map needs a second varied parameter besides {x_name!r}"
                              "; accepted: " + ", ".join(n for n in names if n != x_name))
        console.print(f"wrote {plot_heatmaps(cases, x_name, y_name, heatmap, time_metric)}")
    if line is not None:
        console.print(f"wrote {plot_lines(cases, x_name, line, quantity, time_metric)}")


def register(app: typer.Typer, reproduce: typer.Typer) -> None:
    """Add ``dlsched sweep`` and its subcommands."""
    sweep_app.command("run")(run)
    sweep_app.command("export")(export)
    sweep_app.command("summary")(summary)
    sweep_app.command("plot")(plot)
    app.add_typer(sweep_app, name="sweep")
