"""Run a list of scenarios through an executor in batches, committing each batch's rows to
the store as it finishes; scenarios already in the store are skipped (resume).

The unit of work is generic: ``evaluate(params) -> metrics`` for any picklable module-level
function, so grid domains and the paper reproductions share this runner.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from dlsched.errors import SweepIncomplete
from dlsched.sweep.executors import WorkerPool
from dlsched.sweep.store import ResultStore, scenario_key

if TYPE_CHECKING:
    from dlsched.sweep.grid import Grid

Evaluate = Callable[[dict[str, Any]], dict[str, Any]]
Task = tuple[str, int, dict[str, Any]]
MAX_BATCH = 64
BATCHES_PER_SLOT = 8
HEALTH_CHECK_S = 5.0  # how often a waiting runner asks the engine whether it has workers
WORKERLESS_LIMIT_S = 30.0  # no worker for this long (no restart came): the batches are lost


@dataclass(frozen=True)
class SweepJob:
    """What to run: ``scenarios`` (parameter dicts) through ``evaluate``, keeping ``metrics``;
    ``domain`` names the kind of scenario and ``params`` the parameters stored as columns;
    both make each scenario's key (other entries of a scenario dict only travel to
    ``evaluate``)."""

    name: str
    domain: str
    evaluate: Evaluate
    scenarios: Sequence[dict[str, Any]]
    params: tuple[str, ...]
    metrics: tuple[str, ...]
    meta: dict[str, Any] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_grid(cls, grid: Grid) -> SweepJob:
        """The job of a grid file."""
        from dlsched.sweep.grid import GridScenarios

        spec = grid.spec
        return cls(spec.name, grid.domain.name, grid.domain.evaluate, GridScenarios(grid),
                   grid.domain.param_names, grid.metrics,
                   {"name": spec.name, "domain": grid.domain.name,
                    "grid": spec.model_dump(by_alias=True),
                    "policy_param": grid.domain.policy_param,
                    "time_metric": grid.domain.time_metric, "varied": list(grid.varied),
                    "baseline": spec.baseline}, grid.domain.column_types())

    @property
    def columns(self) -> dict[str, str]:
        """Store columns besides the bookkeeping ones, parameters then metrics, each with its
        SQL type (``types``; NUMERIC when not given)."""
        return {name: self.types.get(name, "NUMERIC") for name in self.params + self.metrics}

    def iter_tasks(self) -> Iterator[Task]:
        """(key, index, params) of each distinct scenario, in order, one at a time: a grid's
        are computed on demand (memory flat in the grid's size); a list's are told apart by
        their keys."""
        from dlsched.sweep.grid import GridScenarios

        if isinstance(self.scenarios, GridScenarios):
            for index, params in self.scenarios.distinct():
                yield self._key(params), index, params
            return
        seen: set[str] = set()
        for index, params in enumerate(self.scenarios):
            key = self._key(params)
            if key not in seen:
                seen.add(key)
                yield key, index, params

    def tasks(self) -> list[Task]:
        """(key, index, params) of each distinct scenario, in order (``iter_tasks`` listed)."""
        return list(self.iter_tasks())

    @property
    def task_count(self) -> int:
        """Number of distinct scenarios (a grid's counted without listing them)."""
        from dlsched.sweep.grid import GridScenarios

        if isinstance(self.scenarios, GridScenarios):
            return self.scenarios.grid.distinct_count
        return sum(1 for _ in self.iter_tasks())

    def _key(self, params: dict[str, Any]) -> str:
        return scenario_key(self.domain, {name: params[name] for name in self.params})


def _plain(value: Any) -> Any:
    """numpy scalars to Python numbers (the store takes int, float, str, None)."""
    return value.item() if hasattr(value, "item") else value


def evaluate_batch(evaluate: Evaluate, metrics: tuple[str, ...],
                   batch: list[Task]) -> list[dict[str, Any]]:
    """Run a batch on a worker: one row per scenario; an exception becomes an 'error' row."""
    from dlsched import __version__

    rows = []
    for key, index, params in batch:
        start = time.perf_counter()
        try:
            result = evaluate(params)
            values, status, error = {m: _plain(result.get(m)) for m in metrics}, "ok", None
        except Exception as exc:  # recorded in the row; the sweep goes on
            values, status, error = {}, "error", f"{type(exc).__name__}: {exc}"
        rows.append({"key": key, "idx": index, **params, **values, "status": status,
                     "error": error, "wall_s": time.perf_counter() - start,
                     "dlsched_version": __version__,
                     "finished_at": datetime.now(UTC).isoformat(timespec="seconds")})
    return rows


class PendingTasks:
    """The tasks with no row in the store (with ``retry_errors``, also those stored as
    errors), streamed: the store is asked about ``CHECK_BATCH`` keys at a time, so neither
    the grid nor the store's keys are ever held whole. ``skipped`` counts the tasks passed
    over so far; ``estimate`` is how many will run (exact for a fresh results file, else the
    distinct count less the rows already stored)."""

    CHECK_BATCH = 500

    def __init__(self, job: SweepJob, store: ResultStore, retry_errors: bool = False) -> None:
        self.job, self.store, self.status = job, store, "ok" if retry_errors else None
        self.skipped = 0
        self.estimate = max(job.task_count - store.count(self.status), 0)

    def __iter__(self) -> Iterator[Task]:
        tasks = self.job.iter_tasks()
        while chunk := list(itertools.islice(tasks, self.CHECK_BATCH)):
            done = self.store.stored([key for key, _, _ in chunk], self.status)
            self.skipped += len(done)
            yield from (task for task in chunk if task[0] not in done)


def pending_tasks(job: SweepJob, store: ResultStore, retry_errors: bool = False) -> list[Task]:
    """``PendingTasks`` listed (for small jobs and tests)."""
    return list(PendingTasks(job, store, retry_errors))


def batch_size_for(count: int, slots: int) -> int:
    """Scenarios per task: about ``BATCHES_PER_SLOT`` tasks per worker, at most ``MAX_BATCH``
    (so task overhead is amortized and progress stays smooth)."""
    return max(1, min(MAX_BATCH, math.ceil(count / (slots * BATCHES_PER_SLOT))))


def iter_sweep(job: SweepJob, store: ResultStore, engine: WorkerPool, todo: Iterable[Task],
               batch_size: int | None = None, count: int | None = None
               ) -> Iterator[dict[str, Any]]:
    """Run ``todo`` (any iterable, consumed batch by batch: memory stays flat in its length)
    on ``engine``, committing each finished batch to ``store`` and then yielding its rows; at
    most two batches per worker slot are in flight. ``count``: about how many tasks ``todo``
    holds (its length when it has one), which sizes the batches. Raises SweepIncomplete at the
    end when batches were lost to worker failures."""
    if count is None:
        count = len(todo) if isinstance(todo, Sized) else MAX_BATCH * engine.slots
    size = batch_size or batch_size_for(count, engine.slots)
    tasks = iter(todo)
    batch = list(itertools.islice(tasks, size))
    pending: dict[Future, list[Task]] = {}
    lost: list[str] = []
    workerless_s = 0.0
    try:
        while batch or pending:
            while batch and len(pending) < 2 * engine.slots:
                try:
                    future = engine.executor.submit(evaluate_batch, job.evaluate, job.metrics,
                                                    batch)
                except Exception as error:  # the executor itself is broken: stop submitting
                    lost += [f"the {len(batch)} scenarios of a batch and those after it: "
                             f"{error!r}"]
                    batch = []
                    break
                pending[future] = batch
                batch = list(itertools.islice(tasks, size))
            if not pending:
                break
            finished, _ = wait(pending, timeout=HEALTH_CHECK_S, return_when=FIRST_COMPLETED)
            alive = finished or engine.has_workers()
            workerless_s = 0.0 if alive else workerless_s + HEALTH_CHECK_S
            if workerless_s >= WORKERLESS_LIMIT_S:
                lost.append(f"the {sum(map(len, pending.values()))} scenarios in flight and "
                            f"those not yet submitted: the executor has had no worker for "
                            f"{workerless_s:.0f} s")
                break
            for future in finished:
                ended = pending.pop(future)
                try:
                    rows = future.result()
                except Exception as error:  # a worker died: its scenarios stay unrecorded
                    lost.append(f"{len(ended)} scenarios: {error!r}")
                    continue
                store.write(rows)
                yield from rows
    finally:
        for future in pending:
            future.cancel()
    if lost:
        raise SweepIncomplete("some scenarios were not run because their worker failed "
                              f"({'; '.join(lost[:3])}); the finished rows are committed: "
                              "rerun with --resume to complete the sweep")


@dataclass(frozen=True)
class SampleTimes:
    """Wall seconds of sampled scenarios: ``seconds`` of those that finished, in order, and
    ``unfinished_s``, how long the one running when the budget ran out had run by then (None
    when none was cut off): a lower bound on that scenario's time."""

    seconds: list[float]
    unfinished_s: float | None = None
    warmed: bool = True
    """False when the warm-up run itself was cut off (``unfinished_s`` is its time)."""


def _time_each(conn: Any, job: SweepJob, tasks: Sequence[Task]) -> None:
    """In a child process: an untimed warm-up run (lazy imports and caches a worker pays
    once), then each task, sending ``("warm", 0)`` and then ``("done", seconds)`` per task."""
    evaluate_batch(job.evaluate, job.metrics, [tasks[-1] if len(tasks) > 1 else tasks[0]])
    conn.send(("warm", 0.0))
    for task in tasks[:-1] if len(tasks) > 1 else tasks:
        start = time.perf_counter()
        evaluate_batch(job.evaluate, job.metrics, [task])
        conn.send(("done", time.perf_counter() - start))
    conn.close()


def time_scenarios(job: SweepJob, tasks: Sequence[Task], budget_s: float = 3.0,
                   warmup_s: float = 3.0) -> SampleTimes:
    """Wall seconds of ``tasks`` (a sample of the grid) run one by one in a child process,
    after an untimed warm-up run of a scenario outside the sample when there is one. The
    warm-up may take ``warmup_s`` seconds, the sample ``budget_s`` more; then the child is
    stopped (a single scenario may run for minutes) and the scenario it was running (the
    warm-up's, imports included, when it is cut) counts as a lower bound (``unfinished_s``)."""
    if not tasks:
        return SampleTimes([])
    method = "fork" if sys.platform.startswith("linux") else "spawn"
    context = multiprocessing.get_context(method)
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_time_each, args=(send, job, tasks), daemon=True)
    child.start()
    send.close()
    deadline = time.monotonic() + warmup_s
    seconds: list[float] = []
    started = time.monotonic()  # when the scenario now running (or the warm-up) began
    unfinished: float | None = None
    warmed = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not receive.poll(left):
                unfinished = time.monotonic() - started if child.is_alive() else None
                break
            try:
                kind, value = receive.recv()
            except EOFError:  # the child finished every task
                break
            started = time.monotonic()
            if kind == "warm":
                deadline, warmed = started + budget_s, True
            else:
                seconds.append(value)
    finally:
        receive.close()
        if child.is_alive():
            child.terminate()
        child.join()
    if not seconds and unfinished is None:
        raise SweepIncomplete(f"the sampled scenarios could not be timed (the timing "
                              f"process ended with code {child.exitcode})")
    return SampleTimes(seconds, unfinished, warmed)


def run_sweep(job: SweepJob, store: ResultStore, engine: WorkerPool, retry_errors: bool = False,
              batch_size: int | None = None,
              progress: Callable[[Iterator[Any], int], Iterator[Any]] = lambda items, n: items,
              ) -> int:
    """Run every scenario of ``job`` not yet in ``store``; ``progress(rows, total)`` wraps the
    stream of finished rows. Returns the number of scenarios run."""
    todo = PendingTasks(job, store, retry_errors)
    count = 0
    for _ in progress(iter_sweep(job, store, engine, todo, batch_size, todo.estimate),
                      todo.estimate):
        count += 1
    return count
