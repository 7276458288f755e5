"""``sweep --dry-run`` counts without listing the scenarios (issue 19, item 4): a 10**7-scenario
grid used to be materialised (123 s, 4.9 GB) before its count was printed."""

from __future__ import annotations

import json
import tracemalloc

from sweep_cases import SMALL_GRID, thread_engine

from dlsched.sweep import ResultStore, SweepJob, grid_from_data, scenario_key
from dlsched.sweep.runner import run_sweep

DUPLICATES = {"domain": "collective", "axes": {"size": ["1 MB", "1000000", "2 MB"],
                                               "policy": ["baseline", "themis", "baseline"]},
              "zip": [{"chunks": [4, 4], "concurrency": [1, 1]}]}


def test_scenario_by_index_and_back() -> None:
    """``scenario(i)`` is the i-th of ``scenarios()``, and ``index_of`` finds it again."""
    grid = grid_from_data(SMALL_GRID)
    listed = list(grid.scenarios())
    assert [grid.scenario(i) for i in range(grid.count)] == listed
    assert [grid.index_of(params) for params in listed] == list(range(grid.count))
    assert grid.index_of(listed[0] | {"size": 3}) is None


def test_distinct_count_equals_distinct_keys() -> None:
    """Entries repeated inside an axis or a zip group count once: "1 MB" and 1000000 are the
    same size in bytes, "baseline" twice, the zip group's two entries equal: 3 x 3 x 2 = 18
    scenarios, 2 x 2 x 1 = 4 distinct, as many as distinct keys."""
    grid = grid_from_data(DUPLICATES)
    keys = {scenario_key("collective", params) for params in grid.scenarios()}
    assert (grid.count, grid.distinct_count, len(keys)) == (18, 4, 4)


def test_dry_run_of_ten_million_scenarios_counts_in_little_memory(run_cli, tmp_path) -> None:
    """10**7 scenarios (1000 sizes x 100 chunk counts x 10 concurrencies x 10 latency
    scales): counted and estimated while Python allocates under 64 MB at its peak."""
    grid = {"name": "huge", "domain": "collective",
            "axes": {"size": list(range(1000, 2000)), "chunks": list(range(1, 101)),
                     "concurrency": list(range(1, 11)),
                     "latency_scale": [0.5 * k for k in range(10)]}}
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(grid))
    tracemalloc.start()
    try:
        code, out, _ = run_cli("sweep", str(path), "--dry-run", "--db", str(tmp_path / "h.db"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    text = " ".join(out.split())
    assert code == 0 and "10000000 scenarios in the grid (10000000 distinct), 10000000 to run" \
        in text
    assert peak < 64 * 2**20
    assert not (tmp_path / "h.db").exists()


def test_dry_run_with_resume_counts_the_stored_scenarios_of_this_grid(run_cli, tmp_path) -> None:
    """A results file holding the 16 scenarios of the small grid: the same grid with a third
    size has 24 scenarios, 16 of them stored, so 8 to run."""
    db = tmp_path / "r.db"
    job = SweepJob.from_grid(grid_from_data(SMALL_GRID))
    with ResultStore(db, job.columns, job.meta) as store, thread_engine() as engine:
        assert run_sweep(job, store, engine) == 16
    bigger = json.loads(json.dumps(SMALL_GRID))
    bigger["axes"]["size"].append("2 MB")
    path = tmp_path / "bigger.json"
    path.write_text(json.dumps(bigger))
    code, out, _ = run_cli("sweep", str(path), "--dry-run", "--resume", "--db", str(db))
    assert code == 0 and "24 scenarios in the grid (24 distinct), 8 to run" in " ".join(out.split())
