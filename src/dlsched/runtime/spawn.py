"""Run a function on N ranks of a torch.distributed process group, with bounded time.

Each rank is a fresh Python process (``python -m dlsched.runtime.spawn``) so it can also be
started inside another network namespace (``prefix``) with its own environment (``env``).
Ranks meet through a ``FileStore`` in a temporary directory; every collective has the
process-group ``timeout_s``; the parent waits at most ``deadline_s`` in all. When a rank fails
or dies, the others get ``grace_s`` to fail on their own, then every rank is killed and
``RankFailure`` names the rank to blame in one line: the first rank that failed of its own
accord (an error, a signal); when every failed rank only timed out or lost its peers while
others kept running, the ranks still running, which hung. Nothing is left running.

Ranks die with their parent however it ends (``rank_guard``): the parent traps SIGTERM and
SIGHUP while its ranks run (SIGINT raises KeyboardInterrupt already) and kills its ranks before
it exits; each rank asks Linux for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``, also
after a SIGKILL of the parent), and watches a pipe from the parent whose write end only the
parent holds: when it reads end-of-file (the parent is gone, on any platform), the rank exits
at once. How many ranks one machine may run is bounded (``check_ranks``, ``max_ranks``), and
a backend the torch build cannot run is refused before anything starts (``check_backend``).

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
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
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
        check_backend(self.backend)


BACKENDS = ("gloo", "nccl")
"""torch.distributed backends a rank may use: gloo (CPU tensors), nccl (CUDA tensors)."""


def check_backend(backend: str, field: str = "backend") -> None:
    """ConfigError (one line naming ``field``) unless this torch build can run ``backend``:
    gloo on any build; nccl only where torch has CUDA with NCCL and sees a GPU. Imports torch
    only for nccl (a CPU build says so here, before any rank starts, rather than in every
    rank's first collective)."""
    if backend not in BACKENDS:
        raise ConfigError(f"{field}: {backend!r} is not supported; accepted: "
                          f"{', '.join(BACKENDS)}")
    if backend != "nccl":
        return
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        raise ConfigError(f"{field}: nccl needs CUDA GPUs and NCCL; torch is not "
                          "installed; accepted: gloo (CPU ranks)") from None
    if not torch.cuda.is_available() or not dist.is_nccl_available():
        what = "has no NCCL" if torch.cuda.is_available() else "sees no CUDA GPU"
        raise ConfigError(f"{field}: nccl needs CUDA GPUs and NCCL; this torch "
                          f"{torch.__version__} {what}; accepted: gloo (CPU ranks)")


def require_torch() -> None:
    """ConfigError (one line naming ``torch``) unless torch is installed: the runtime's work
    needs the optional extra. Checked after the inputs, before anything runs."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise ConfigError("torch: not installed; the runtime commands need the optional "
                          "extra: pip install 'dlsched[torch]' (CPU: pip install torch==2.13.0)")


RANKS_PER_CORE = 4
"""Default bound on ranks per usable core: up to 4 ranks share a core (each rank is a torch
process; beyond that every rank gets under a quarter of a core and its collectives mostly
wait for the scheduler)."""
MIN_MAX_RANKS = 8
"""The bound is never below 8 ranks, so a 1- or 2-core machine still runs the 4- and 8-rank
examples."""
MAX_RANKS_ENV = "DLSCHED_MAX_RANKS"
"""Environment variable that sets the bound on ranks per machine (a positive integer)."""


def max_ranks() -> int:
    """The most ranks one spawn may start on this machine: ``DLSCHED_MAX_RANKS`` if set, else
    max(``MIN_MAX_RANKS``, ``RANKS_PER_CORE`` x usable cores)."""
    text = os.environ.get(MAX_RANKS_ENV)
    if text is None:
        return max(MIN_MAX_RANKS, RANKS_PER_CORE * usable_cores())
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 1_000_000:
        raise ConfigError(f"{MAX_RANKS_ENV}: {text!r} is not a rank count; accepted: an "
                          "integer from 1 to 1000000")
    return value


def check_ranks(count: int, field: str = "ranks") -> None:
    """ConfigError (one line naming ``field``) unless 1 <= ``count`` <= ``max_ranks()``."""
    limit = max_ranks()
    if 1 <= count <= limit:
        return
    how = (f"{MAX_RANKS_ENV}" if MAX_RANKS_ENV in os.environ else
           f"{RANKS_PER_CORE} per usable core x {usable_cores()}, at least {MIN_MAX_RANKS}; "
           f"{MAX_RANKS_ENV} sets another bound")
    raise ConfigError(f"{field}: {count} ranks; accepted: 1 to {limit} on this machine "
                      f"({how})")


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity; the core count where there is none)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def spawn(fn: Callable[..., Any], world_size: int, args: Sequence[Any] = (),
          options: SpawnOptions | None = None) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` ranks; their results by rank."""
    options = options or SpawnOptions()
    check_ranks(world_size, "world_size")
    if getattr(fn, "__module__", "__main__") == "__main__" or "<" in fn.__qualname__:
        raise ConfigError(f"fn: {fn!r} must be a module-level function importable by name "
                          "(not defined in __main__, not a lambda or a nested function)")
    with _stopped_by_signals(), tempfile.TemporaryDirectory(prefix="dlsched-spawn-") as tmp:
        folder = Path(tmp)
        procs: list[subprocess.Popen[bytes]] = []
        watch, alive = os.pipe()  # the ranks read ``watch``; only this process holds ``alive``
        try:
            for rank in range(world_size):
                procs.append(_start(folder, rank, world_size, fn, args, options, watch))
            _wait(procs, folder, options)
        finally:
            _kill_all(procs)
            os.close(watch)
            os.close(alive)
        return [_result(folder, rank) for rank in range(world_size)]


STOP_SIGNALS = ("SIGTERM", "SIGHUP")
"""Signals whose default action would end the parent without its ``finally`` blocks: while
ranks run they raise SystemExit(128 + the signal's number) instead (143 for SIGTERM, the
status a shell reports for a process the signal ended), so the ranks are killed and the
spawn folder removed on the way out (SIGINT raises KeyboardInterrupt, which unwinds the same
way)."""


@contextmanager
def _stopped_by_signals() -> Iterator[None]:
    """While the block runs, ``STOP_SIGNALS`` whose handler is the default one raise
    SystemExit (once: a repeated signal does not interrupt the killing of the ranks); the
    handlers are restored on the way out. Main thread only (Python runs handlers there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    numbers = [getattr(signal, name) for name in STOP_SIGNALS if hasattr(signal, name)]
    previous = {n: signal.getsignal(n) for n in numbers}
    trapped = [n for n in numbers if previous[n] is signal.SIG_DFL]
    stopping: list[int] = []

    def stop(number: int, _frame: object) -> None:
        if not stopping:
            stopping.append(number)
            raise SystemExit(128 + number)

    for number in trapped:
        signal.signal(number, stop)
    try:
        yield
    finally:
        for number in trapped:
            signal.signal(number, previous[number])


def _start(folder: Path, rank: int, world_size: int, fn: Callable[..., Any],
           args: Sequence[Any], options: SpawnOptions, watch: int) -> subprocess.Popen[bytes]:
    spec = {"path": list(sys.path), "rank": rank, "world_size": world_size,
            "store": str(folder / "store"), "backend": options.backend,
            "timeout_s": options.timeout_s, "threads": options.threads,
            "comm_nice": options.comm_nice,
            "call": pickle.dumps((fn, tuple(args)))}
    spec_path = folder / f"spec-{rank}.pkl"
    spec_path.write_bytes(pickle.dumps(spec))
    env = dict(os.environ) | (options.env(rank) if options.env else {})
    command = [*(options.prefix(rank) if options.prefix else ()), sys.executable, "-m",
               "dlsched.runtime.spawn", str(spec_path), str(watch),
               str(0 if options.prefix else os.getpid())]  # a prefix may fork: its own pid
    session: dict[str, Any] = ({"start_new_session": True} if options.own_sessions
                               else {"process_group": 0})
    with (folder / f"log-{rank}.txt").open("wb") as log:
        return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                pass_fds=(watch,), **session)


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


PR_SET_PDEATHSIG = 1
"""prctl option: the signal this process gets when its parent dies (linux/prctl.h)."""


def rank_guard(watch: int, parent: int) -> None:
    """Make this rank die with its parent (process ``parent``), first thing in a rank: on
    Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)``; on every platform a daemon thread that
    blocks reading ``watch`` (the pipe whose write end only the parent holds) and ends the
    process at end-of-file. A parent already gone before the request (``parent``, when not
    0, is no longer this process's parent) ends the rank at once."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # no prctl here: the pipe below still ends the rank
    threading.Thread(target=_exit_at_end_of_file, args=(watch,), name="dlsched-parent-watch",
                     daemon=True).start()
    if os.getppid() != parent and parent != 0:
        os._exit(_ORPHANED)


_ORPHANED = 129
"""Exit status of a rank whose parent is gone (nobody reads it but the tests)."""


def _exit_at_end_of_file(fd: int) -> None:
    while True:
        try:
            if not os.read(fd, 1):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    os._exit(_ORPHANED)


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
    rank_guard(int(sys.argv[2]), int(sys.argv[3]))
    status = _worker(sys.argv[1])
    # The rank's result or error is on disk now. Skip the interpreter's teardown, as
    # multiprocessing's children do: torch's C++ threads can still be joinable when static
    # destructors run, which aborts the process ("terminate called without an active
    # exception", SIGABRT, in 2 of 6 two-rank gloo runs measured here) after its work is done.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
