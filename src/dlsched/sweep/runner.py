"""Run a list of scenarios through an executor in batches, committing each batch's rows to
the store as it finishes; scenarios already in the store are skipped (resume).

The unit of work is generic: ``evaluate(params) -> metrics`` for any picklable module-level
function, so grid domains and the paper reproductions share this runner.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
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

    def tasks(self) -> list[Task]:
        """(key, index, params) of each distinct scenario, in order."""
        seen: dict[str, Task] = {}
        for index, params in enumerate(self.scenarios):
            key = scenario_key(self.domain, {name: params[name] for name in self.params})
            seen.setdefault(key, (key, index, params))
        return list(seen.values())


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


def pending_tasks(job: SweepJob, store: ResultStore, retry_errors: bool = False) -> list[Task]:
    """Tasks with no row in the store (with ``retry_errors``, also those stored as errors)."""
    done = store.keys("ok") if retry_errors else store.keys()
    return [task for task in job.tasks() if task[0] not in done]


def batch_size_for(count: int, slots: int) -> int:
    """Scenarios per task: about ``BATCHES_PER_SLOT`` tasks per worker, at most ``MAX_BATCH``
    (so task overhead is amortized and progress stays smooth)."""
    return max(1, min(MAX_BATCH, math.ceil(count / (slots * BATCHES_PER_SLOT))))


def iter_sweep(job: SweepJob, store: ResultStore, engine: WorkerPool, todo: list[Task],
               batch_size: int | None = None) -> Iterator[dict[str, Any]]:
    """Run ``todo`` on ``engine``, committing each finished batch to ``store`` and then
    yielding its rows; at most two batches per worker slot are in flight. Raises
    SweepIncomplete at the end when batches were lost to worker failures."""
    size = batch_size or batch_size_for(len(todo), engine.slots)
    batches = [todo[i:i + size] for i in range(0, len(todo), size)]
    pending: dict[Future, list[Task]] = {}
    lost: list[str] = []
    next_batch = 0
    workerless_s = 0.0
    try:
        while next_batch < len(batches) or pending:
            while next_batch < len(batches) and len(pending) < 2 * engine.slots:
                batch = batches[next_batch]
                try:
                    future = engine.executor.submit(evaluate_batch, job.evaluate, job.metrics,
                                                    batch)
                except Exception as error:  # the executor itself is broken: stop submitting
                    lost += [f"{sum(map(len, batches[next_batch:]))} scenarios: {error!r}"]
                    next_batch = len(batches)
                    break
                pending[future] = batch
                next_batch += 1
            if not pending:
                break
            finished, _ = wait(pending, timeout=HEALTH_CHECK_S, return_when=FIRST_COMPLETED)
            alive = finished or engine.has_workers()
            workerless_s = 0.0 if alive else workerless_s + HEALTH_CHECK_S
            if workerless_s >= WORKERLESS_LIMIT_S:
                unrun = [*pending.values(), *batches[next_batch:]]
                lost.append(f"{sum(map(len, unrun))} scenarios: the executor has had no "
                            f"worker for {workerless_s:.0f} s")
                break
            for future in finished:
                batch = pending.pop(future)
                try:
                    rows = future.result()
                except Exception as error:  # a worker died: its scenarios stay unrecorded
                    lost.append(f"{len(batch)} scenarios: {error!r}")
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


def time_scenarios(job: SweepJob, tasks: Sequence[Task], budget_s: float = 30.0
                   ) -> list[float]:
    """Wall seconds of each of ``tasks`` (a sample of the grid) run here one by one, after an
    untimed warm-up run of a scenario outside the sample when there is one (lazy imports and
    caches a worker pays once); stops once ``budget_s`` seconds are spent."""
    if not tasks:
        return []
    evaluate_batch(job.evaluate, job.metrics, [tasks[-1] if len(tasks) > 1 else tasks[0]])
    seconds: list[float] = []
    for task in tasks[:-1] if len(tasks) > 1 else tasks:
        start = time.perf_counter()
        evaluate_batch(job.evaluate, job.metrics, [task])
        seconds.append(time.perf_counter() - start)
        if sum(seconds) >= budget_s:
            break
    return seconds


def run_sweep(job: SweepJob, store: ResultStore, engine: WorkerPool, retry_errors: bool = False,
              batch_size: int | None = None,
              progress: Callable[[Iterator[Any], int], Iterator[Any]] = lambda items, n: items,
              ) -> int:
    """Run every scenario of ``job`` not yet in ``store``; ``progress(rows, total)`` wraps the
    stream of finished rows. Returns the number of scenarios run."""
    todo = pending_tasks(job, store, retry_errors)
    count = 0
    for _ in progress(iter_sweep(job, store, engine, todo, batch_size), len(todo)):
        count += 1
    return count
