"""Where scenarios run: a local process pool (default), a Dask cluster or a Ray cluster, all
behind the ``concurrent.futures.Executor`` interface (``submit`` returning a Future).

Dask and Ray are optional extras (``pip install 'dlsched[dask]'`` / ``'dlsched[ray]'``),
imported only when chosen.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlsched.errors import ConfigError
from dlsched.validation import JOBS

EXECUTORS = ("process", "dask", "ray")


@dataclass(frozen=True)
class WorkerPool:
    """An open executor, how many tasks it runs at once (``slots``), a one-line description,
    and ``has_workers()``: whether any worker is left to run a task (a cluster whose workers
    all died keeps its futures pending forever; the runner asks this while it waits)."""

    executor: Executor
    slots: int
    description: str
    has_workers: Callable[[], bool] = lambda: True


def _missing(extra: str, package: str) -> ConfigError:
    return ConfigError(f"--executor: {extra!r} needs the optional package {package!r}; install it "
                       f"with: pip install 'dlsched[{extra}]'")


def default_workers() -> int:
    """Local worker processes when none are asked for: the cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)


def _driver_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, killed but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def _watch_driver(pid: int, period_s: float = 0.5) -> None:
    """Pool-worker initializer: exit this worker once the driving process ``pid`` is gone.

    A driver killed with SIGKILL cannot shut its pool down, and the workers, which hold both
    ends of their task queue, would otherwise wait for tasks forever."""

    def watch() -> None:
        while _driver_alive(pid):
            time.sleep(period_s)
        os._exit(1)

    threading.Thread(target=watch, name="dlsched-driver-watch", daemon=True).start()


@contextmanager
def _process_pool(workers: int, address: str | None) -> Iterator[WorkerPool]:
    """On Linux the workers are forked from this process, which has dlsched imported already:
    a fresh interpreter per worker (spawn/forkserver) costs seconds of imports, more than a
    10,000-scenario collective grid's own work on a loaded 2-core machine. They are forked
    here, before the progress bar or any other thread of ours starts."""
    method = "fork" if sys.platform.startswith("linux") else "spawn"
    pool = ProcessPoolExecutor(max_workers=workers,
                               mp_context=multiprocessing.get_context(method),
                               initializer=_watch_driver, initargs=(os.getpid(),))
    pool.submit(os.getpid).result()  # with fork, every worker starts at the first submit
    try:
        yield WorkerPool(pool, workers, f"local process pool, {workers} workers")
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@contextmanager
def _dask(workers: int, address: str | None) -> Iterator[WorkerPool]:
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise _missing("dask", "distributed") from None
    cluster = None
    if address is None:
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               dashboard_address=None)
        client = Client(cluster)
    else:
        try:
            client = Client(address, timeout="20s")
        except OSError as error:
            raise ConfigError(f"--address: cannot reach the Dask scheduler at {address!r} "
                              f"({error})") from None
    executor = client.get_executor(pure=False)
    slots = max(sum(client.nthreads().values()), 1)
    where = "LocalCluster" if cluster is not None else address
    try:
        yield WorkerPool(executor, slots, f"Dask ({where}), {slots} worker threads",
                     has_workers=lambda: bool(client.nthreads()))
    finally:
        executor.shutdown(wait=False)
        client.close()
        if cluster is not None:
            cluster.close()


class RayExecutor(Executor):
    """``concurrent.futures.Executor`` over Ray tasks (one CPU each); ``ObjectRef.future()``
    gives the Future."""

    def __init__(self, ray: Any) -> None:
        self._ray = ray
        self._remote: dict[Callable[..., Any], Any] = {}

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        """Run ``fn(*args, **kwargs)`` as a Ray task."""
        if fn not in self._remote:
            self._remote[fn] = self._ray.remote(num_cpus=1)(fn)
        return self._remote[fn].remote(*args, **kwargs).future()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Nothing to release here: the Ray connection is closed by ``open_executor``."""


@contextmanager
def _ray(workers: int, address: str | None) -> Iterator[WorkerPool]:
    try:
        import ray
    except ImportError:
        raise _missing("ray", "ray") from None
    if address is None:
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
    else:
        ray.init(address=address, log_to_driver=False)
    slots = max(int(ray.cluster_resources().get("CPU", 1)), 1)
    try:
        yield WorkerPool(RayExecutor(ray), slots, f"Ray ({address or 'local'}), {slots} CPUs",
                     has_workers=lambda: ray.cluster_resources().get("CPU", 0) > 0)
    finally:
        ray.shutdown()


_FACTORIES = {"process": _process_pool, "dask": _dask, "ray": _ray}


_EXTRAS = {"dask": "distributed", "ray": "ray"}


def check_executor(kind: str, workers: int | None = None, address: str | None = None) -> int:
    """Check an executor choice before any work starts: a known kind, ``workers`` (``--jobs``)
    within ``JOBS``, an address only for dask/ray, and the kind's optional package installed.
    Returns the number of local workers (default: this machine's cores)."""
    if kind not in _FACTORIES:
        raise ConfigError(f"--executor: unknown {kind!r}; accepted: " + ", ".join(EXECUTORS))
    count = default_workers() if workers is None else JOBS.check(workers, "--jobs")
    if address is not None and kind == "process":
        raise ConfigError("--address: the 'process' executor runs on this machine; use "
                          "--executor dask or ray to reach a cluster")
    if kind in _EXTRAS and importlib.util.find_spec(_EXTRAS[kind]) is None:
        raise _missing(kind, _EXTRAS[kind])
    return count


@contextmanager
def open_executor(kind: str = "process", workers: int | None = None,
                  address: str | None = None) -> Iterator[WorkerPool]:
    """Start (or connect to) an executor; ``workers`` local processes for ``process`` and for
    a local Dask/Ray cluster (default: this machine's cores); ``address`` reaches an existing
    Dask scheduler (``tcp://host:8786``) or Ray cluster (``ray://host:10001`` or ``auto``)."""
    count = check_executor(kind, workers, address)
    with _FACTORIES[kind](count, address) as engine:
        yield engine
