"""Running scenarios through the sweep runner from a command: where they run (``--executor``,
``--jobs``, ``--address``), the results file (``--db``, ``--resume``), the progress bar and the
closing report. ``dlsched sweep run`` and every ``dlsched reproduce`` command share them;
``reproduction_command`` gives a reproduction all its shared options at once, as one
``Reproduction``, whose ``show`` hands a paper module (``experiments.reproduction``) to the
one runner (``sweep.reproduce``) and prints what it returns.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from dlsched.cli.options import CsvOption, Outputs, console
from dlsched.cli.paths import database_files
from dlsched.errors import ConfigError
from dlsched.experiments.reproduction import Paper, Reproduced
from dlsched.progress import progress_bar
from dlsched.report.sections import render_sections
from dlsched.sweep import (
    EXECUTORS,
    PendingTasks,
    ResultStore,
    SweepIncomplete,
    SweepJob,
    check_executor,
    collect_rows,
    iter_sweep,
    open_executor,
    paper_job,
    read_meta,
    reproduced,
)
from dlsched.units import format_duration
from dlsched.validation import check_output_path

status = Console(stderr=True)

ExecutorOption = Annotated[str, typer.Option(
    "--executor", help="Where scenarios run: " + ", ".join(EXECUTORS)
    + " (dask/ray need the dask / ray extra of dlsched).")]
WorkersOption = Annotated[int | None, typer.Option(
    "--jobs",
    help="Local worker processes (process pool, local Dask/Ray cluster); default: all cores.")]
AddressOption = Annotated[str | None, typer.Option(
    help="Existing cluster: Dask scheduler (tcp://host:8786) or Ray (ray://host:10001, auto).")]
DbOption = Annotated[Path | None, typer.Option(
    "--db", help="Keep results in this SQLite file (needed for --resume).")]
ResumeOption = Annotated[bool, typer.Option(help="Skip scenarios already stored in --db.")]


def open_store(db: Path, job: SweepJob, resume: bool, overwrite: bool) -> ResultStore:
    """Open the results file for this job: new, resumed (same domain) or overwritten."""
    check_output_path(db, "--db")
    db.parent.mkdir(parents=True, exist_ok=True)
    if db.exists() and overwrite:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
    if db.exists() and not resume:
        raise ConfigError(f"--db: {str(db)!r} already exists; pass --resume to continue that "
                          "sweep or --overwrite to start over")
    if db.exists():
        domain = read_meta(db).get("domain")
        if domain != job.domain:
            raise ConfigError(f"--db: {str(db)!r} holds a {domain!r} sweep, the grid is "
                              f"{job.domain!r}; use another --db")
    return ResultStore(db, job.columns, job.meta)


def _report(store: ResultStore, ran: int, skipped: int, seconds: float) -> None:
    errors = store.count("error")
    rate = f", {ran / seconds:,.1f} scenarios/s" if seconds > 0 and ran else ""
    status.print(f"ran {ran} scenarios in {format_duration(seconds)}{rate}; {skipped} already "
                 f"in the store were skipped; {store.count()} rows in {store.path} "
                 f"({errors} errors)", highlight=False)


def execute(job: SweepJob, store: ResultStore, todo: PendingTasks, executor: str,
            workers: int | None, address: str | None, batch_size: int | None,
            quiet: bool) -> int:
    """Run ``todo`` (streamed: the first scenarios start at once, whatever the grid's size)
    with a progress bar and a closing report on stderr; the number run. Ctrl-C exits 130 and
    lost workers exit 1, both after saying that the committed rows can be resumed."""
    check_executor(executor, workers, address)
    start = time.perf_counter()
    ran = 0
    tasks = iter(todo)
    try:
        first = next(tasks, None)
        if first is None:
            return 0
        with open_executor(executor, workers, address) as engine:
            status.print(f"{job.name}: {todo.estimate} scenarios to run on "
                         f"{engine.description}", highlight=False)
            progress = progress_bar("sweeping", quiet)
            for _ in progress(iter_sweep(job, store, engine, itertools.chain([first], tasks),
                                         batch_size, todo.estimate), todo.estimate):
                ran += 1
    except KeyboardInterrupt:
        status.print(f"interrupted: {store.count()} rows are committed in {store.path}; rerun "
                     "with --resume to continue", highlight=False)
        raise typer.Exit(130) from None
    except SweepIncomplete as error:
        status.print(f"[bold red]incomplete:[/] {escape(str(error))}", highlight=False)
        raise typer.Exit(1) from None
    finally:
        _report(store, ran, todo.skipped, time.perf_counter() - start)
    return ran


@dataclass(frozen=True)
class Reproduction:
    """The options every ``dlsched reproduce`` command shares: what it prints and writes
    (``--json``, ``--csv``) and where its scenarios run and are kept. Constructing it checks
    the output file before any work."""

    json_out: bool = False
    csv: Path | None = None
    executor: str = "process"
    workers: int | None = None
    address: str | None = None
    db: Path | None = None
    resume: bool = False

    def __post_init__(self) -> None:
        Outputs(self.json_out, self.csv, others=database_files("--db", self.db))

    def run(self, paper: Paper, options: Any) -> Reproduced:
        """Run the paper's scenarios through the sweep runner (``sweep.reproduce``) with a
        progress bar, in ``--db`` when given; failed scenarios are reported on stderr and
        left out (RunFailure, exit 1, when every one failed)."""
        check_executor(self.executor, self.workers, self.address)
        job = paper_job(paper, options)
        if self.resume and self.db is None:
            raise ConfigError("--resume: it needs --db FILE (the results of the earlier run)")
        store = (open_store(self.db, job, self.resume, overwrite=False) if self.db is not None
                 else ResultStore(":memory:", job.columns, job.meta))
        with store:
            execute(job, store, PendingTasks(job, store), self.executor, self.workers,
                    self.address, None, self.json_out)
            rows, errors = collect_rows(job, store)
        for error in errors:
            status.print(f"[bold red]scenario failed:[/] {escape(error)}", highlight=False)
        return reproduced(paper, options, rows, errors)

    def show(self, paper: Paper, options: Any = None) -> Reproduced:
        """Run the paper (``run``) and print its sections, or with ``--json`` its document;
        write the rows as CSV when asked; the result, for a command that draws it too."""
        result = self.run(paper, options)
        if not self.json_out:
            render_sections(result.sections(), console)
        Outputs(self.json_out, self.csv).document(result.document)
        return result


_SHARED = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=annotation) for name, annotation, default in (
    ("json_out", Annotated[bool, typer.Option("--json", help="Print JSON rows only.")], False),
    ("csv", CsvOption, None),
    ("executor", ExecutorOption, "process"), ("workers", WorkersOption, None),
    ("address", AddressOption, None), ("db", DbOption, None), ("resume", ResumeOption, False))]


def reproduction_command(command: Callable[..., None]) -> Callable[..., None]:
    """``command(..., run: Reproduction, ...)`` as a typer command whose ``run`` parameter
    stands for the shared options (``--json``, ``--csv``, ``--executor``, ``--jobs``,
    ``--address``, ``--db``, ``--resume``, in that place among its own), passed to it as one
    ``Reproduction``."""
    signature = inspect.signature(command, eval_str=True)
    own = list(signature.parameters.values())
    at = [p.name for p in own].index("run")
    shared = {p.name for p in _SHARED}

    @functools.wraps(command)
    def with_shared_options(**options: Any) -> None:
        run = Reproduction(**{name: options.pop(name) for name in shared})
        command(**options, run=run)

    parameters = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
                  for p in own[:at] + _SHARED + own[at + 1:]]
    with_shared_options.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=parameters)
    with_shared_options.__annotations__ = {p.name: p.annotation for p in parameters}
    return with_shared_options
