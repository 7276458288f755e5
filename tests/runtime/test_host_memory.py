"""Freed host memory kept in the process: a second allocation of the same size faults no pages
(glibc only; each case in a fresh interpreter, so the settings do not leak into the suite)."""

import platform
import subprocess
import sys

import pytest

from dlsched.runtime.host_memory import keep_freed_memory

BYTES = 96 << 20
PAGES = BYTES // 4096

_PROBE = "\n".join([
    "import resource, sys",
    "from dlsched.runtime.host_memory import keep_freed_memory",
    "applied = keep_freed_memory()",
    "def touch():",
    f"    block = bytearray({BYTES})",
    f"    block[::4096] = b'x' * {PAGES}",
    "touch()",
    "before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt",
    "touch()",
    "print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)",
])

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc" or sys.platform != "linux",
                           reason="glibc malloc only")


def _second_touch(keep: str) -> tuple[bool, int]:
    result = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                            check=True, env={"DLSCHED_KEEP_FREED_MEMORY": keep,
                                             "PYTHONPATH": ":".join(sys.path)})
    applied, faults = result.stdout.split()
    return applied == "True", int(faults)


@glibc
def test_kept_memory_is_reused_without_faults() -> None:
    applied, faults = _second_touch("1")
    assert applied
    assert faults < PAGES // 10


@glibc
def test_glibc_defaults_fault_the_block_in_again() -> None:
    applied, faults = _second_touch("0")
    assert not applied
    assert faults > PAGES // 2


def test_switched_off_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLSCHED_KEEP_FREED_MEMORY", "0")
    assert keep_freed_memory() is False
