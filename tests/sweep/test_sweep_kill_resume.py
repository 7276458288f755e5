"""A sweep killed with SIGKILL mid-way keeps every committed row, leaves no worker process
behind, and ``--resume`` completes it to exactly the table an uninterrupted run produces."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from sweep_cases import stable, thread_engine

from dlsched.sweep import ResultStore, SweepJob, grid_from_data, read_rows, run_sweep

GRID = {"name": "kill", "domain": "collective",
        "axes": {"topology": ["4D-Ring_FC_Ring_SW", "3D-SW_SW_SW_hetero"],
                 "chunks": [256, 512], "policy": ["baseline", "themis"]},
        "zip": [{"size": ["1 GB", "500 MB"], "latency_scale": [1.0, 0.0]}]}
TOTAL = 16


def _stored(path: Path) -> int:
    if not path.exists():
        return 0
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            return db.execute("SELECT COUNT(*) FROM scenarios").fetchone()[0]
        finally:
            db.close()
    except sqlite3.OperationalError:
        return 0


def _live_in_group(group: int) -> list[int]:
    """Processes of process group ``group`` that are not zombies (Linux /proc)."""
    live = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group and fields[0] not in ("Z", "X"):
            live.append(int(stat.parent.name))
    return live


def _kill_midway(grid: Path, db: Path) -> tuple[int, list[int]]:
    """Start the CLI in its own process group and SIGKILL only the driver once a few rows are
    committed (as ``kill -9 PID`` does); the rows stored then, and the processes of its group
    (pool workers, fork server) still alive 60 s later (they must notice and exit)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "dlsched", "sweep", str(grid), "--db", str(db), "--jobs", "1",
         "--batch-size", "1", "--quiet"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)})
    deadline = time.monotonic() + 120
    try:
        while _stored(db) < 3 and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        process.kill()
        process.wait()
        stored = _stored(db)
        deadline = time.monotonic() + 60
        while _live_in_group(process.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _live_in_group(process.pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    return stored, left


def test_kill_9_then_resume_equals_uninterrupted(tmp_path, run_cli) -> None:
    """Rows committed before the kill survive; resuming runs only the rest; the final table
    equals an uninterrupted run's (parameters, metrics, status)."""
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps(GRID))
    db = tmp_path / "killed.db"
    before, orphans = _kill_midway(grid, db)
    assert 3 <= before < TOTAL, f"kill landed at {before} of {TOTAL} rows"
    assert not orphans, f"processes {orphans} outlived the killed driver"
    code, _, err = run_cli("sweep", str(grid), "--db", str(db), "--jobs", "1", "--resume",
                             "--quiet")
    assert code == 0, err
    assert f"{TOTAL - before} scenarios to run" in " ".join(err.split())
    job = SweepJob.from_grid(grid_from_data(GRID))
    with ResultStore(tmp_path / "whole.db", job.columns, job.meta) as store, \
            thread_engine() as engine:
        run_sweep(job, store, engine)
    resumed, whole = read_rows(db), read_rows(tmp_path / "whole.db")
    assert len(resumed) == TOTAL and stable(resumed) == stable(whole)
    code, _, err = run_cli("sweep", str(grid), "--db", str(db))
    assert code == 2 and "--resume" in err
