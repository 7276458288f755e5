"""Sweeps stream their scenarios (memory flat in the grid's size), ``--dry-run`` stops its
timing after a few seconds whatever one scenario takes, and ``export --where`` is a filter,
never SQL."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest
from sweep_cases import SMALL_GRID, thread_engine

from dlsched.errors import ConfigError
from dlsched.sweep import ResultStore, SweepJob, grid_from_data, read_rows, run_sweep
from dlsched.sweep.filters import parse_where
from dlsched.sweep.runner import PendingTasks, time_scenarios

HUGE = {"name": "huge", "domain": "collective",
        "axes": {"size": list(range(1000, 2000)), "chunks": list(range(1, 101)),
                 "concurrency": list(range(1, 11)),
                 "latency_scale": [0.5 * k for k in range(10)]}}
DUPLICATES = {"domain": "collective", "axes": {"size": ["1 MB", "1000000", "2 MB"],
                                               "policy": ["baseline", "themis", "baseline"]},
              "zip": [{"chunks": [4, 4], "concurrency": [1, 1]}]}


def test_the_first_pending_tasks_of_ten_million_come_without_listing_them(tmp_path) -> None:
    """A 10**7-scenario grid: its first 1,000 pending tasks are produced while Python
    allocates under 16 MB (listing every task took minutes and gigabytes)."""
    job = SweepJob.from_grid(grid_from_data(HUGE))
    with ResultStore(tmp_path / "r.db", job.columns, job.meta) as store:
        tracemalloc.start()
        try:
            todo = PendingTasks(job, store)
            first = [task for task, _ in zip(todo, range(1000), strict=False)]
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert todo.estimate == 10_000_000 and len(first) == 1000
    assert [index for _, index, _ in first] == list(range(1000))
    assert peak < 16 * 2**20


def test_distinct_scenarios_streamed_equal_those_told_apart_by_key() -> None:
    """Repeated entries (1 MB = 1000000 B, "baseline" twice, a zip group's equal entries):
    the streamed distinct tasks are exactly the first occurrence of each key, in order."""
    job = SweepJob.from_grid(grid_from_data(DUPLICATES))
    by_key: dict[str, int] = {}
    for index, params in enumerate(job.scenarios):
        by_key.setdefault(job._key(params), index)
    assert [(key, index) for key, index, _ in job.iter_tasks()] == list(by_key.items())
    assert job.task_count == 4


def test_a_resumed_sweep_runs_only_what_is_missing(tmp_path) -> None:
    """Half the grid stored: the pending tasks skip it batch by batch and run the rest."""
    job = SweepJob.from_grid(grid_from_data(SMALL_GRID))
    with ResultStore(tmp_path / "r.db", job.columns, job.meta) as store, \
            thread_engine() as engine:
        half = SweepJob(job.name, job.domain, job.evaluate, list(job.scenarios)[:8],
                        job.params, job.metrics, job.meta, job.types)
        assert run_sweep(half, store, engine) == 8
        todo = PendingTasks(job, store)
        assert todo.estimate == 8
        assert [index for _, index, _ in todo] == list(range(8, 16)) and todo.skipped == 8
        assert run_sweep(job, store, engine) == 8 and store.count() == 16


def _forever(params: dict) -> dict:
    time.sleep(600)
    return {}


def test_dry_run_timing_stops_a_scenario_that_would_run_for_minutes() -> None:
    """A scenario sleeping 10 minutes: the timing child is stopped at its budget and the
    time so far is reported as a lower bound (the old dry run waited for it)."""
    job = SweepJob("slow", "slow", _forever, [{"x": 1}, {"x": 2}], ("x",), ("time_s",))
    timed = time_scenarios(job, job.tasks(), budget_s=0.2, warmup_s=0.2)
    assert timed.seconds == [] and not timed.warmed
    assert 0.2 <= timed.unfinished_s < 600


def _instant(params: dict) -> dict:
    return {"time_s": params["x"]}


def test_dry_run_timing_returns_every_sample_that_finishes() -> None:
    job = SweepJob("fast", "fast", _instant, [{"x": k} for k in range(4)], ("x",), ("time_s",))
    timed = time_scenarios(job, job.tasks(), budget_s=60, warmup_s=60)
    assert len(timed.seconds) == 3 and timed.unfinished_s is None and timed.warmed


COLUMNS = ("key", "status", "size", "policy", "time_s")


@pytest.mark.parametrize(("text", "sql", "values"), [
    ("status = ok", '"status" = ?', ["ok"]),
    ("status = 'ok' AND size >= 1e6", '"status" = ? AND "size" >= ?', ["ok", 1e6]),
    ("policy like 'the%' and time_s<0.5", '"policy" LIKE ? AND "time_s" < ?', ["the%", 0.5]),
    ("size != 2000000", '"size" != ?', [2000000]),
    ("", "", []),
])
def test_where_is_parsed_into_checked_columns_and_bound_values(text, sql, values) -> None:
    assert parse_where(text, COLUMNS) == (sql, values)


@pytest.mark.parametrize(("text", "needle"), [
    ("1=1; DROP TABLE scenarios; --", "--where: cannot read '1=1; DROP TABLE scenarios; --'"),
    ("status = ok; DROP TABLE scenarios", "--where: expected AND or the end at '; DROP"),
    ("nosuch = 1", "--where: unknown column 'nosuch'"),
    ("status = ok OR 1 = 1", "--where: expected AND or the end at 'OR 1 = 1'"),
    ("size >", "--where: cannot read 'size >'"),
])
def test_where_refuses_anything_but_the_filter(text, needle) -> None:
    with pytest.raises(ConfigError, match="^" + needle.replace("(", r"\(").replace("*", r"\*")
                       .replace("[", r"\[")):
        parse_where(text, COLUMNS)


def test_export_where_cannot_change_the_query(tmp_path: Path, run_cli) -> None:
    """The issue's injection exits 2 in one line and leaves the table; a quoted value holding
    SQL is compared as text (no row matches) instead of widening the filter."""
    job = SweepJob.from_grid(grid_from_data(SMALL_GRID))
    db = tmp_path / "r.db"
    with ResultStore(db, job.columns, job.meta) as store, thread_engine() as engine:
        run_sweep(job, store, engine)
    out = tmp_path / "o.csv"
    code, _, err = run_cli("sweep", "export", str(db), "--csv", str(out), "--where",
                           "1=1; DROP TABLE scenarios; --")
    assert code == 2 and err.startswith("error: --where: ") and len(err.splitlines()) == 1
    assert len(read_rows(db)) == 16 and not out.exists()
    code, _, err = run_cli("sweep", "export", str(db), "--csv", str(out), "--where",
                           "policy = \"x' OR '1'='1\"")
    assert code == 0, err
    assert out.read_text().strip() == ""
    code, _, err = run_cli("sweep", "export", str(db), "--csv", str(out), "--where",
                           "policy = themis AND chunks = 8")
    assert code == 0, err
    assert len(out.read_text().strip().splitlines()) == 1 + 4
