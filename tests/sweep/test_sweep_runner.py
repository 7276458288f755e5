"""The runner and the store: one committed row per scenario, errors recorded, resume skips
what is stored, and the summary's speedups are baseline time / time."""

from __future__ import annotations

import math
from concurrent.futures import Executor, Future

import pytest
from sweep_cases import SMALL_GRID, stable, thread_engine

from dlsched.collectives import run_collective
from dlsched.hardware import load_topology
from dlsched.sweep import (
    ResultStore,
    SweepIncomplete,
    SweepJob,
    WorkerPool,
    grid_from_data,
    read_rows,
    run_sweep,
    runner,
)
from dlsched.sweep.runner import batch_size_for, pending_tasks
from dlsched.sweep.summary import best_per_group, collect_cases, speedup_pivot


def _job(grid: dict) -> SweepJob:
    return SweepJob.from_grid(grid_from_data(grid))


def test_rows_match_direct_simulation(tmp_path) -> None:
    """Every stored metric equals what run_collective returns for the same parameters."""
    job = _job(SMALL_GRID)
    with ResultStore(tmp_path / "r.db", job.columns, job.meta) as store, thread_engine(2) as eng:
        assert run_sweep(job, store, eng, batch_size=3) == 16
    rows = read_rows(tmp_path / "r.db")
    assert [row["idx"] for row in rows] == list(range(16))
    for row in rows:
        direct = run_collective(load_topology(row["topology"]), "all-reduce", row["size"],
                                row["chunks"], row["policy"], "scf", row["concurrency"])
        assert row["status"] == "ok" and row["error"] is None
        assert row["time_s"] == direct.time_s and row["bound_s"] == direct.bound_s
        assert row["events"] == direct.events and row["dlsched_version"]
        assert row["time_s"] >= row["bound_s"]


def test_failing_scenario_is_recorded_and_sweep_continues(tmp_path) -> None:
    """chunks > size fails at run time: that row has status 'error' and the message; the
    others are fine; resume does not rerun it unless asked."""
    job = _job({"domain": "collective", "axes": {"size": [16, 1000], "chunks": [4, 32]},
                "fixed": {"topology": "2D-SW_SW"}})
    with ResultStore(tmp_path / "r.db", job.columns, job.meta) as store, thread_engine() as eng:
        run_sweep(job, store, eng)
        rows = read_rows(tmp_path / "r.db")
        bad = [r for r in rows if r["status"] == "error"]
        assert len(rows) == 4 and len(bad) == 1
        assert bad[0]["size"] == 16 and bad[0]["chunks"] == 32
        assert "ConfigError" in bad[0]["error"] and "chunks" in bad[0]["error"]
        assert bad[0]["time_s"] is None
        assert pending_tasks(job, store) == []
        assert [t[2]["chunks"] for t in pending_tasks(job, store, retry_errors=True)] == [32]


def test_resume_runs_only_the_missing(tmp_path) -> None:
    """With half the rows stored, a rerun evaluates only the other half, and the final table
    equals a single uninterrupted run."""
    job = _job(SMALL_GRID)
    half = SweepJob(job.name, job.domain, job.evaluate, job.scenarios[:8], job.params,
                    job.metrics, job.meta)
    with thread_engine() as eng:
        with ResultStore(tmp_path / "a.db", job.columns, job.meta) as store:
            run_sweep(half, store, eng)
        with ResultStore(tmp_path / "a.db", job.columns, job.meta) as store:
            assert len(pending_tasks(job, store)) == 8
            assert run_sweep(job, store, eng) == 8
        with ResultStore(tmp_path / "b.db", job.columns, job.meta) as store:
            run_sweep(job, store, eng)
    assert stable(read_rows(tmp_path / "a.db")) == stable(read_rows(tmp_path / "b.db"))


def test_batch_size() -> None:
    """About 8 tasks per worker, never more than 64 scenarios or fewer than 1 per task."""
    assert batch_size_for(10_000, 2) == 64
    assert batch_size_for(160, 2) == 10
    assert batch_size_for(3, 16) == 1


ROWS = [  # two cases (size 1, 2), three policies; times in seconds
    {"status": "ok", "size": 1, "policy": "base", "time_s": 4.0},
    {"status": "ok", "size": 1, "policy": "fast", "time_s": 2.0},
    {"status": "ok", "size": 1, "policy": "slow", "time_s": 8.0},
    {"status": "ok", "size": 2, "policy": "base", "time_s": 9.0},
    {"status": "ok", "size": 2, "policy": "fast", "time_s": 1.0},
    {"status": "error", "size": 2, "policy": "slow", "time_s": None},
]


def test_summary_speedups_by_hand() -> None:
    """speedup_vs_base = base time / time; geometric mean over cases: fast = sqrt(2 * 9)."""
    cases = collect_cases(ROWS, "policy", "time_s", ["size", "policy"], "base")
    assert cases.speedup_column == "speedup_vs_base"
    (overall,) = speedup_pivot(cases, [])
    assert overall == {"base": 1.0, "fast": pytest.approx(math.sqrt(18)), "slow": 0.5}
    per_size = speedup_pivot(cases, ["size"])
    assert per_size[1] == {"size": 2, "base": 1.0, "fast": 9.0}
    (best,) = best_per_group(cases, [])
    assert best["best"] == "fast" and best["fastest_in"] == 2 and best["cases"] == 2
    assert best["speedup_vs_base"] == pytest.approx(math.sqrt(18))


def test_summary_rejects_unknown_baseline() -> None:
    """A baseline with no rows is a ConfigError listing the policies seen."""
    with pytest.raises(ValueError, match="accepted: base, fast, slow"):
        collect_cases(ROWS, "policy", "time_s", ["size", "policy"], "nope")


class _LostExecutor(Executor):
    """An executor whose workers are gone: what it accepts never finishes."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        return Future()


def test_an_executor_without_workers_ends_the_sweep_instead_of_hanging(tmp_path,
                                                                        monkeypatch) -> None:
    """A Dask cluster whose workers all died keeps its futures pending forever: once the
    engine reports no worker for WORKERLESS_LIMIT_S, every unfinished scenario is reported
    lost (SweepIncomplete: the 8 in flight, two batches of 4 on its one slot, and the 8 never
    submitted, which the streamed runner does not count) and nothing is stored for it."""
    monkeypatch.setattr(runner, "HEALTH_CHECK_S", 0.01)
    monkeypatch.setattr(runner, "WORKERLESS_LIMIT_S", 0.05)
    job = _job(SMALL_GRID)
    engine = WorkerPool(_LostExecutor(), 1, "workers gone", has_workers=lambda: False)
    with ResultStore(tmp_path / "r.db", job.columns, job.meta) as store, \
            pytest.raises(SweepIncomplete, match="the 8 scenarios in flight and those not yet "
                          "submitted: the executor has had no worker"):
        run_sweep(job, store, engine, batch_size=4)
    assert read_rows(tmp_path / "r.db") == []
