"""Run a function on N ranks of a torch.distributed process group, with bounded time.

Each rank is a fresh Python process (``python -m dlsched.runtime.spawn``) so it can also be
started inside another network namespace (``prefix``) with its own environment (``env``).
Ranks meet through a ``FileStore`` in a temporary directory; every collective has the
process-group ``timeout_s``; the parent waits at most ``deadline_s`` in all. When a rank fails
or dies, the others get ``grace_s`` to fail on their own, then every rank is killed and
``RankFailure`` names the rank to blame in one line: the first rank that failed of its own
accord (an error, a signal); when every failed rank only timed out or lost its peers while
others kept running, the ranks still running, which hung. Nothing is left running.

The function is called as ``fn(rank, world_size, *args)`` after the process group is up and
must be importable by name (module-level); its return value comes back pickled.
"""

from __future__ import annotations

import os
import pickle
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from dlsched.errors import ConfigError, RunFailure


class RankFailure(RunFailure):
    """A rank raised, died, hung or ran out of time: the message is one line naming the rank
    and its error; ``details`` holds every rank's error output."""


SYMPTOM = re.compile(r"timed? ?out|timeout|connection (closed|reset)|broken pipe|peer",
                     re.IGNORECASE)
"""A rank's last error line that only says it waited for, or lost, another rank."""


@dataclass(frozen=True)
class SpawnOptions:
    """How ranks start: backend; ``timeout_s`` per collective, ``deadline_s`` for the whole run,
    ``grace_s`` for the others after one rank fails (seconds); ``threads`` for torch and gloo
    per rank; ``comm_nice``: the nice value (-20..19) given to each rank's communication
    threads (see ``prioritize_comm_threads``; None leaves them at the rank's own);
    ``own_sessions``: each rank in a session of its own (the default) or, if False, all in the
    caller's session, so under Linux's scheduler autogroups (one per session) the ranks'
    threads are scheduled as one group and their nice values compare across ranks (a rank's
    communication thread then preempts another rank's compute at once); a per-rank command
    ``prefix`` (e.g. ``ip netns exec ns0``) and extra ``env``."""

    backend: str = "gloo"
    timeout_s: float = 60.0
    deadline_s: float = 600.0
    grace_s: float = 10.0
    threads: int = 1
    comm_nice: int | None = None
    own_sessions: bool = True
    prefix: Callable[[int], Sequence[str]] | None = None
    env: Callable[[int], dict[str, str]] | None = None

    def __post_init__(self) -> None:
        for name in ("timeout_s", "deadline_s", "grace_s"):
            value = getattr(self, name)
            if not 0 < value < 1e6:
                raise ConfigError(f"{name}: must be in (0, 1e6) seconds (got {value!r})")
        if self.comm_nice is not None and not -20 <= self.comm_nice <= 19:
            raise ConfigError(f"comm_nice: must be a nice value from -20 to 19 (got "
                              f"{self.comm_nice!r})")
        if self.backend not in ("gloo", "nccl"):
            raise ConfigError(f"backend: {self.backend!r} is not supported; accepted: gloo, "
                              "nccl")


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity; the core count where there is none)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def spawn(fn: Callable[..., Any], world_size: int, args: Sequence[Any] = (),
          options: SpawnOptions | None = None) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` ranks; their results by rank."""
    options = options or SpawnOptions()
    if world_size < 1:
        raise ConfigError(f"world_size: must be >= 1 rank (got {world_size})")
    if getattr(fn, "__module__", "__main__") == "__main__" or "<" in fn.__qualname__:
        raise ConfigError(f"fn: {fn!r} must be a module-level function importable by name "
                          "(not defined in __main__, not a lambda or a nested function)")
    with tempfile.TemporaryDirectory(prefix="dlsched-spawn-") as tmp:
        folder = Path(tmp)
        procs = [_start(folder, rank, world_size, fn, args, options)
                 for rank in range(world_size)]
        try:
            _wait(procs, folder, options)
        finally:
            _kill_all(procs)
        return [_result(folder, rank) for rank in range(world_size)]


def _start(folder: Path, rank: int, world_size: int, fn: Callable[..., Any],
           args: Sequence[Any], options: SpawnOptions) -> subprocess.Popen[bytes]:
    spec = {"path": list(sys.path), "rank": rank, "world_size": world_size,
            "store": str(folder / "store"), "backend": options.backend,
            "timeout_s": options.timeout_s, "threads": options.threads,
            "comm_nice": options.comm_nice,
            "call": pickle.dumps((fn, tuple(args)))}
    spec_path = folder / f"spec-{rank}.pkl"
    spec_path.write_bytes(pickle.dumps(spec))
    env = dict(os.environ) | (options.env(rank) if options.env else {})
    command = [*(options.prefix(rank) if options.prefix else ()), sys.executable, "-m",
               "dlsched.runtime.spawn", str(spec_path)]
    log = (folder / f"log-{rank}.txt").open("wb")
    if options.own_sessions:
        return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                            process_group=0)


def _wait(procs: list[subprocess.Popen[bytes]], folder: Path, options: SpawnOptions) -> None:
    deadline = time.monotonic() + options.deadline_s
    failed_at: dict[int, float] = {}
    while any(p.poll() is None for p in procs):
        now = time.monotonic()
        for rank, proc in enumerate(procs):
            if proc.poll() not in (None, 0):
                failed_at.setdefault(rank, now)
        if failed_at and now - min(failed_at.values()) > options.grace_s:
            break
        if now > deadline:
            running = [r for r, p in enumerate(procs) if p.poll() is None]
            raise RankFailure(f"ranks {running} did not finish within the deadline of "
                              f"{options.deadline_s:g} s", _logs(folder, len(procs)))
        time.sleep(0.05)
    for rank, proc in enumerate(procs):
        if proc.poll() not in (None, 0):
            failed_at.setdefault(rank, time.monotonic())
    if failed_at:
        raise _blame(procs, folder, sorted(failed_at, key=lambda r: (failed_at[r], r)),
                     options)


def _blame(procs: list[subprocess.Popen[bytes]], folder: Path, failed: list[int],
           options: SpawnOptions) -> RankFailure | ConfigError:
    """The RankFailure naming the rank at fault: the first failed rank whose error is not
    only a symptom of another rank (a timeout, a lost connection); else the ranks still
    running after the grace period (hung); else the first failed rank. A rank that refused
    its input (ConfigError) gives that ConfigError, naming the rank."""
    errors = {rank: _last_error(folder, rank) for rank in failed}
    running = [r for r, p in enumerate(procs) if p.poll() is None]
    logs = _logs(folder, len(procs))
    causes = [rank for rank in failed if not SYMPTOM.search(errors[rank])]
    if not causes and running:
        waited = ", ".join(f"rank {rank}" for rank in failed)
        return RankFailure(f"rank {running[0]} hung: ranks {running} were still running "
                           f"{options.grace_s:g} s after {waited} gave up waiting for them "
                           f"(timeout {options.timeout_s:g} s): {errors[failed[0]]}", logs)
    rank = (causes or failed)[0]
    refused = errors[rank].partition(f"{ConfigError.__module__}.ConfigError: ")[2]
    if refused:
        return ConfigError(f"rank {rank}: {refused}")
    code = procs[rank].poll()
    how = f"exit code {code}" if code is None or code >= 0 else f"killed by {_signal_name(-code)}"
    error = f": {errors[rank]}" if errors[rank] else ""
    return RankFailure(f"rank {rank} failed ({how}){error}; failed ranks: {sorted(failed)}",
                       logs)


def _signal_name(number: int) -> str:
    try:
        return f"signal {number} ({signal.Signals(number).name})"
    except ValueError:
        return f"signal {number}"


def _last_error(folder: Path, rank: int) -> str:
    """A rank's exception as ``type: first line of its message`` (at most 500 characters);
    empty when the rank raised nothing (it exited or was killed)."""
    reason = folder / f"reason-{rank}.txt"
    return " ".join(reason.read_text(errors="replace").split())[:500] if reason.exists() else ""


def _logs(folder: Path, world_size: int, tail: int = 2000) -> str:
    parts = []
    for rank in range(world_size):
        error = folder / f"error-{rank}.txt"
        log = folder / f"log-{rank}.txt"
        text = error.read_text() if error.exists() else (log.read_text(errors="replace")
                                                          if log.exists() else "")
        if text.strip():
            parts.append(f"\n--- rank {rank} ---\n{text[-tail:].rstrip()}")
    return "".join(parts)


def _kill_all(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    for proc in procs:
        proc.wait()


def _result(folder: Path, rank: int) -> Any:
    return pickle.loads((folder / f"result-{rank}.pkl").read_bytes())


def init_process_group(backend: str, store_path: str, rank: int, world_size: int,
                       timeout_s: float, threads: int = 1) -> None:
    """Join the group through a FileStore; gloo gets ``threads`` worker threads."""
    import torch.distributed as dist

    store = dist.FileStore(store_path, world_size)
    kwargs: dict[str, Any] = {}
    if backend == "gloo":
        gloo_options = dist.ProcessGroupGloo._Options()
        gloo_options._threads = threads
        gloo_options._timeout = timedelta(seconds=timeout_s)
        kwargs["pg_options"] = gloo_options
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=timeout_s), **kwargs)


def prioritize_comm_threads() -> list[str]:
    """Give every thread of this process except the calling one the rank's ``comm_nice``
    (Linux; a no-op unless the rank was spawned with it): gloo's worker and transport
    threads then preempt compute as soon as data arrives, like a network engine that does not
    wait for compute. Call it from the compute thread after anything that may start
    communication threads (the process group, DDP). Returns the names of the threads
    changed."""
    import threading

    nice = _COMM_NICE[0]
    if nice is None:
        return []
    me = threading.get_native_id()
    changed = []
    for task in Path("/proc/self/task").iterdir():
        if int(task.name) == me:
            continue
        try:
            os.setpriority(os.PRIO_PROCESS, int(task.name), nice)
        except PermissionError:
            raise ConfigError(f"comm-nice: setting nice {nice} needs the right to raise "
                              "priority (root or CAP_SYS_NICE); use a value >= the rank's "
                              "own nice, or leave it unset") from None
        except OSError:
            continue  # the thread has ended
        changed.append((task / "comm").read_text().strip())
    return changed


_COMM_NICE: list[int | None] = [None]


def _worker(spec_path: str) -> int:
    spec = pickle.loads(Path(spec_path).read_bytes())
    sys.path[:0] = [p for p in spec["path"] if p not in sys.path]
    folder = Path(spec_path).parent
    rank = spec["rank"]
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(spec["threads"])
        init_process_group(spec["backend"], spec["store"], rank, spec["world_size"],
                           spec["timeout_s"], spec["threads"])
        _COMM_NICE[0] = spec["comm_nice"]
        prioritize_comm_threads()
        fn, args = pickle.loads(spec["call"])
        result = fn(rank, spec["world_size"], *args)
        (folder / f"result-{rank}.pkl").write_bytes(pickle.dumps(result))
        dist.destroy_process_group()
    except BaseException as error:
        (folder / f"error-{rank}.txt").write_text(traceback.format_exc())
        frames = traceback.extract_tb(error.__traceback__)
        lines = str(error).strip().splitlines() or [
            f"(at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""]
        kind = type(error)
        (folder / f"reason-{rank}.txt").write_text(
            f"{kind.__module__}.{kind.__qualname__}: {lines[0]}".removeprefix("builtins."))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_worker(sys.argv[1]))
