"""``dlsched sweep`` end to end: run a grid, then export, summarize and plot the results."""

from __future__ import annotations

import csv
import json

import pytest
from sweep_cases import SMALL_GRID


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> tuple:
    """A results file from the small grid, run by the library on a thread engine."""
    from sweep_cases import thread_engine

    from dlsched.sweep import ResultStore, SweepJob, grid_from_data, run_sweep

    folder = tmp_path_factory.mktemp("sweep")
    job = SweepJob.from_grid(grid_from_data(SMALL_GRID))
    with ResultStore(folder / "r.db", job.columns, job.meta) as store, \
            thread_engine() as engine:
        run_sweep(job, store, engine)
    return folder, folder / "r.db"


def test_export_csv_and_parquet(run_cli, results) -> None:
    """CSV holds one row per scenario with parameters, metrics and status; Parquet the same
    when pyarrow is present."""
    folder, db = results
    code, _, err = run_cli("sweep", "export", str(db), "--csv", str(folder / "r.csv"),
                           "--where", "status = 'ok'")
    assert code == 0, err
    rows = list(csv.DictReader((folder / "r.csv").open()))
    assert len(rows) == 16 and {"topology", "size", "time_s", "status", "dlsched_version",
                                "error", "wall_s"} <= set(rows[0])
    pq = pytest.importorskip("pyarrow.parquet")
    code, _, _ = run_cli("sweep", "export", str(db), "--parquet", str(folder / "r.parquet"))
    assert code == 0 and pq.read_table(folder / "r.parquet").num_rows == 16


def test_summary_json(run_cli, results) -> None:
    """The speedup of the baseline over itself is 1; every group names a best policy."""
    _, db = results
    code, out, err = run_cli("sweep", "summary", str(db), "--by", "topology,size", "--json")
    assert code == 0, err
    payload = json.loads(out)
    assert payload["baseline"] == "baseline" and len(payload["rows"]) == 4
    assert all(row["baseline"] == 1.0 and row["themis"] > 0 for row in payload["rows"])
    assert {row["best"] for row in payload["best"]} <= {"baseline", "themis"}
    assert all("speedup_vs_baseline" in row for row in payload["best"])
    code, _, err = run_cli("sweep", "summary", str(db), "--by", "colour")
    assert code == 2 and "colour" in err


def test_plots(run_cli, results) -> None:
    """Heat map and line plot PNGs are written."""
    folder, db = results
    code, _, err = run_cli("sweep", "plot", str(db), "--heatmap", str(folder / "h.png"),
                           "--x", "topology", "--y", "size")
    assert code == 0, err
    code, _, err = run_cli("sweep", "plot", str(db), "--line", str(folder / "l.png"),
                           "--x", "size", "--quantity", "time")
    assert code == 0, err
    code, _, err = run_cli("sweep", "plot", str(db), "--heatmap", str(folder / "h.png"),
                           "--x", "size", "--y", "size")
    assert code == 2 and "y" in err
    for name in ("h.png", "l.png"):
        assert (folder / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_paths_exit_2(run_cli, results, tmp_path) -> None:
    """Missing results file, unwritable output folder: exit 2 before any work."""
    _, db = results
    code, _, err = run_cli("sweep", "summary", str(tmp_path / "none.db"))
    assert code == 2 and "does not exist" in err
    code, _, err = run_cli("sweep", "export", str(db), "--csv", str(tmp_path / "y.txt"))
    assert code == 2 and "suffix" in err
    assert not (tmp_path / "y.txt").exists()


def test_parquet_without_pyarrow_names_the_package(run_cli, results, monkeypatch) -> None:
    """Without pyarrow, --parquet exits 2 naming the package, before writing anything."""
    import sys

    folder, db = results
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    code, _, err = run_cli("sweep", "export", str(db), "--csv", str(folder / "np.csv"),
                           "--parquet", str(folder / "np.parquet"))
    assert code == 2 and "pyarrow" in err and "--csv works without it" in err
    assert not (folder / "np.csv").exists() and not (folder / "np.parquet").exists()
