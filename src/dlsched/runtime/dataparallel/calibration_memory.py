"""Memory a network calibration needs (``calibrate.time_loads`` on every rank), checked
against the machine's available memory before any rank starts.

A rank holds its process (Python, torch and the gloo process group) and the buffers of the
size being timed (``calibrate.size_buffers``: views of one tensor, so the largest size, not
the sum of the sizes); with ``load="both"`` the queued streams hold ``STREAM_LENGTH`` buffers
of a size at once, so ``STREAM_LENGTH`` x the largest size. Gloo reduces two CPU ranks in
place: on the 2-core VM (2026-12-01, torch 2.13.0+cpu) a rank timing 4 KiB, 1 MiB and 256 MiB
peaked at 489-491 MiB resident (VmHWM), its process alone 223 MiB, so the buffers cost their
257 MiB and 9 MiB more; with ``load="both"`` it peaked at 2294-2296 MiB (8 x 256 MiB queued,
the old per-size buffers and per-repeat streams freed in between).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dlsched.errors import ConfigError
from dlsched.units import format_bytes

RANK_PROCESS_BYTES = 256 * 2**20
"""Resident bytes of one rank before its buffers: 223 MiB measured on the 2-core VM (Python,
torch 2.13.0+cpu, a gloo group of 2; see the module docstring), rounded up."""
MEMINFO = Path("/proc/meminfo")


def rank_buffer_bytes(sizes: Sequence[int], load: str, stream_length: int) -> int:
    """Peak buffer bytes one rank holds timing ``sizes`` (bytes) under ``load``: the largest
    size (float32 elements, at least one), ``stream_length`` times it with ``load="both"``
    (queued streams)."""
    largest = max(max(1, size // 4) * 4 for size in sizes)
    return largest * (stream_length if load == "both" else 1)


def available_memory() -> int | None:
    """Bytes the kernel estimates can be allocated without swapping (``MemAvailable`` of
    /proc/meminfo), or None where there is no such file (not Linux)."""
    try:
        text = MEMINFO.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(":")
        fields = value.split()
        if name == "MemAvailable" and fields:
            return int(fields[0]) * (1024 if fields[1:] == ["kB"] else 1)
    return None


def check_calibration_memory(sizes: Sequence[int], workers: int, load: str,
                             stream_length: int, available: int | None = None) -> int:
    """The bytes ``workers`` ranks need to time ``sizes`` under ``load`` (``RANK_PROCESS_BYTES``
    + ``rank_buffer_bytes`` each); ConfigError naming max-size, with the largest size that
    fits, when that exceeds ``available`` (default: ``available_memory()``; no check where
    it is unknown)."""
    per_rank = RANK_PROCESS_BYTES + rank_buffer_bytes(sizes, load, stream_length)
    needed = workers * per_rank
    available = available_memory() if available is None else available
    if available is None or needed <= available:
        return needed
    copies = stream_length if load == "both" else 1
    fits = (available // workers - RANK_PROCESS_BYTES) // copies
    accepted = (f"max-size up to {format_bytes(fits)} on {workers} ranks" if fits >= 4
                else "fewer --workers")
    buffers = (f"{copies} buffers of the largest size queued at once (--load both)"
               if copies > 1 else "a buffer of the largest size")
    raise ConfigError(
        f"max-size: {format_bytes(max(sizes))} all-reduces on {workers} ranks need "
        f"{format_bytes(needed)} of memory (per rank {format_bytes(RANK_PROCESS_BYTES)} for "
        f"its process and {buffers}), but {format_bytes(available)} is available "
        f"(MemAvailable); accepted: {accepted}")
