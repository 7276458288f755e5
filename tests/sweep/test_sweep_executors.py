"""Executors: the same grid gives identical rows on the local process pool and on a Dask
LocalCluster; the Ray adapter maps submit onto Ray tasks."""

from __future__ import annotations

from concurrent.futures import Future

import pytest
from sweep_cases import SMALL_GRID, stable

from dlsched.errors import ConfigError
from dlsched.sweep import ResultStore, SweepJob, grid_from_data, open_executor, read_rows, run_sweep
from dlsched.sweep.executors import RayExecutor


def _run(kind: str, path) -> list[dict]:
    job = SweepJob.from_grid(grid_from_data(SMALL_GRID))
    with ResultStore(path, job.columns, job.meta) as store, \
            open_executor(kind, workers=1) as engine:
        assert run_sweep(job, store, engine, batch_size=4) == 16
    return read_rows(path)


def test_process_pool_and_dask_give_identical_rows(tmp_path) -> None:
    """Parameters, metrics, status and version match row for row (only wall time and the
    finishing time differ)."""
    pytest.importorskip("distributed")
    local = _run("process", tmp_path / "process.db")
    dask = _run("dask", tmp_path / "dask.db")
    assert len(local) == 16 and all(row["status"] == "ok" for row in local)
    assert stable(local) == stable(dask)


def test_unknown_executor_and_bad_workers() -> None:
    """Bad executor names and worker counts are ConfigErrors naming the option."""
    with pytest.raises(ConfigError, match="executor: unknown 'spark'"), \
            open_executor("spark"):
        pass
    for workers in (0, -1, 65, 10**6):
        with pytest.raises(ConfigError, match="--jobs: process count"), \
                open_executor("process", workers=workers):
            pass
    with pytest.raises(ConfigError, match="address"), \
            open_executor("process", workers=1, address="tcp://x:1"):
        pass


def test_missing_extra_is_named_before_any_work(run_cli, tmp_path, monkeypatch) -> None:
    """Without ray installed, --executor ray exits 2 naming the extra (brackets intact), and
    bad --jobs exits 2, both before the grid is even read; no status lines are printed."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ray" else real(name, *a))
    for args, needle in ((("--executor", "ray"), "pip install 'dlsched[ray]'"),
                         (("--jobs", "100000"), "--jobs: process count 100000"),
                         (("--batch-size", "0"), "--batch-size: batch size 0")):
        code, _, err = run_cli("sweep", str(tmp_path / "missing.yaml"), *args)
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
        for command in ("themis", "pipeline"):
            if args[0] != "--batch-size":
                code, _, err = run_cli("reproduce", command, *args)
                assert code == 2 and needle in err, err


class _FakeRef:
    def __init__(self, value: object) -> None:
        self.value = value

    def future(self) -> Future:
        done: Future = Future()
        done.set_result(self.value)
        return done


class _FakeRay:
    """Stands in for the ``ray`` module: ``ray.remote(num_cpus=1)(fn).remote(*args)``."""

    def __init__(self) -> None:
        self.wrapped: list[object] = []

    def remote(self, num_cpus: int):
        def wrap(fn):
            self.wrapped.append(fn)
            return type("Remote", (), {"remote": staticmethod(
                lambda *a, **k: _FakeRef(fn(*a, **k)))})
        return wrap


def test_ray_executor_adapter() -> None:
    """submit wraps each function once as a 1-CPU Ray task and returns its Future."""
    fake = _FakeRay()
    executor = RayExecutor(fake)
    assert executor.submit(pow, 2, 10).result() == 1024
    assert executor.submit(pow, 3, 2).result() == 9
    assert fake.wrapped == [pow]
