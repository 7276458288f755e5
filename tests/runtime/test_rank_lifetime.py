"""Spawned ranks die with their parent, however it ends: stopped by SIGTERM or SIGINT (it
kills its ranks, then exits), killed by SIGKILL (each rank's parent-death signal and its
watch on the parent's pipe). The ranks are found in /proc by their command line, which holds
the spawn folder inside this test's own temporary directory."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="optional torch extra not installed")

HANG_GUARD_S = 60.0
"""How long to wait for ranks to appear or vanish before failing (a guard against hanging,
not a speed requirement: on an idle machine both take about a second)."""


def _live_processes(marker: str) -> list[int]:
    """Pids of the processes (zombies excluded: they have ended) whose command line holds
    ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = next(line for line in (entry / "status").read_text().splitlines()
                         if line.startswith("State:"))
        except (OSError, StopIteration):
            continue
        if marker in command and "Z" not in state.split()[1]:
            found.append(int(entry.name))
    return found


def _wait_for(condition: object, what: str) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {HANG_GUARD_S:g} s")
        time.sleep(0.1)


def _interruptible() -> None:
    """SIGINT back to its default in the parent (a shell's background job inherits it
    ignored, and Python then installs no KeyboardInterrupt handler)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_calibration(tmp_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``dlsched calibrate`` on 2 ranks of tiny all-reduces, many repeats (it runs for
    seconds); the ranks' spawn folder is under ``tmp_path`` (TMPDIR)."""
    env = os.environ | {"TMPDIR": str(tmp_path), "PYTHONPATH": os.pathsep.join(sys.path)}
    parent = subprocess.Popen(
        [sys.executable, "-m", "dlsched", "calibrate", "--workers", "2", "--min-size", "4 B",
         "--max-size", "8 B", "--points", "2", "--repeats", "1000", "--out",
         str(tmp_path / "net.yaml")], env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, preexec_fn=_interruptible)
    marker = f"{tmp_path}{os.sep}dlsched-spawn-"
    try:
        _wait_for(lambda: len(_live_processes(marker)) == 2 or parent.poll() is not None,
                  "2 ranks started")
    except AssertionError:
        parent.kill()
        raise
    assert parent.poll() is None, parent.stderr.read() if parent.stderr else ""
    return parent, marker


@needs_torch
@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs Linux's /proc")
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL],
                         ids=["SIGTERM", "SIGINT", "SIGKILL"])
def test_no_rank_outlives_a_stopped_or_killed_parent(tmp_path: Path,
                                                     stop: signal.Signals) -> None:
    """The parent is signalled mid-run: every rank is gone soon after; SIGTERM ends the
    parent with status 143 (128 + 15) after it removed its spawn folder, SIGINT with the
    CLI's 130 ("interrupted")."""
    parent, marker = _start_calibration(tmp_path)
    ranks = _live_processes(marker)
    parent.send_signal(stop)
    code = parent.wait(timeout=HANG_GUARD_S)
    _wait_for(lambda: not _live_processes(marker), f"ranks {ranks} gone")
    assert code == {signal.SIGTERM: 143, signal.SIGINT: 130, signal.SIGKILL: -9}[stop]
    if stop != signal.SIGKILL:
        assert not list(tmp_path.glob("dlsched-spawn-*"))  # cleaned up on the way out
    assert not (tmp_path / "net.yaml").exists()


@pytest.mark.skipif(not hasattr(os, "pipe"), reason="needs pipes")
def test_a_rank_ends_when_its_parents_pipe_closes_without_a_death_signal(tmp_path: Path
                                                                           ) -> None:
    """The watchdog alone (as on a platform without prctl): the parent (this test) stays
    alive and only closes its end of the pipe; the guarded process exits with status 129
    instead of sleeping its minute."""
    watch, alive = os.pipe()
    code = ("import sys, time; from dlsched.runtime.spawn import rank_guard; "
            "rank_guard(int(sys.argv[1]), 0); print('guarded', flush=True); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", code, str(watch)], pass_fds=(watch,),
                             stdout=subprocess.PIPE, text=True,
                             env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)})
    os.close(watch)
    assert child.stdout is not None and child.stdout.readline() == "guarded\n"
    assert child.poll() is None
    os.close(alive)
    assert child.wait(timeout=HANG_GUARD_S) == 129


def test_a_rank_whose_parent_is_already_gone_ends_at_once() -> None:
    """``rank_guard`` given a parent pid that is not this process's parent exits 129 (the
    parent died before the guard was set), even with the pipe still open."""
    watch, alive = os.pipe()
    code = ("import sys; from dlsched.runtime.spawn import rank_guard; "
            "rank_guard(int(sys.argv[1]), 1); print('not reached')")
    done = subprocess.run([sys.executable, "-c", code, str(watch)], pass_fds=(watch,),
                          capture_output=True, text=True, timeout=HANG_GUARD_S,
                          env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)})
    os.close(watch)
    os.close(alive)
    assert (done.returncode, done.stdout) == (129, "")
