"""Reproductions through the sweep runner: the same rows as calling run_scenario directly, in
scenario order; a failing scenario is reported, not fatal; stored results are reused."""

from __future__ import annotations

from sweep_cases import thread_engine

from dlsched.experiments import themis
from dlsched.sweep import ResultStore
from dlsched.sweep.reproduce import collect_rows, reproduction_job
from dlsched.sweep.runner import iter_sweep, pending_tasks

CASES = [themis.Scenario("2D-SW_SW", "zero", 1_000_000, 4, "size"),
         themis.Scenario("3D-FC_Ring_SW", "table", 2_000_000, 8, "chunks")]


def _run(job, store) -> None:
    with thread_engine(2) as engine:
        for _ in iter_sweep(job, store, engine, pending_tasks(job, store), batch_size=1):
            pass


def test_rows_equal_direct_calls_in_order(tmp_path) -> None:
    """Rows come back in scenario order, equal to run_scenario's, also after reopening."""
    job = reproduction_job("themis", CASES, themis.run_scenario)
    with ResultStore(tmp_path / "t.db", job.columns, job.meta) as store:
        _run(job, store)
    with ResultStore(tmp_path / "t.db", job.columns, job.meta) as store:
        assert pending_tasks(job, store) == []
        rows, errors = collect_rows(job, store)
    assert errors == []
    assert rows == [row for case in CASES for row in themis.run_scenario(case)]


def test_failing_scenario_is_reported() -> None:
    """A scenario that raises yields an error text and no rows; the others still run."""
    bad = themis.Scenario("no-such-topology", "zero", 1_000_000, 4, "size")
    job = reproduction_job("themis", [bad, CASES[0]], themis.run_scenario)
    with ResultStore(":memory:", job.columns, job.meta) as store:
        _run(job, store)
        rows, errors = collect_rows(job, store)
    assert rows == themis.run_scenario(CASES[0])
    assert len(errors) == 1 and "no-such-topology" in errors[0] and "ConfigError" in errors[0]
