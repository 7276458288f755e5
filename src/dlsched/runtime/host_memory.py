"""Keep freed host memory inside the process (glibc malloc) instead of returning it to the OS.

A CPU pipeline rank allocates every microbatch's activations and frees them in its backward.
With glibc's defaults, large blocks come from fresh ``mmap`` regions and a heap whose free top
is trimmed, so the next allocations fault their pages in again (zeroed by the kernel; where
transparent huge pages are ``always`` perhaps whole 2 MiB pages, not measured). How much
depends on the schedule, which the model must not: on the 16-core machine lent to this project
(2026-11-26, Intel Xeon, glibc 2.39, THP ``always``, gpt-small, 8 microbatches of 8 sequences,
2 ranks) stage 0's forwards took 9.0 ms each in GPipe order, which holds all 8 microbatches'
activations, against 5.6-7.9 ms in 1F1B; with the settings below both took 5.5-6.2 ms and the
iterations measured 141-162 ms in GPipe and 141-144 ms in 1F1B (178-182 and 151-152 ms
without). On the project's 2-core VM (glibc 2.36, THP ``madvise``) the defaults fault a few
thousand pages per iteration and a probe saw no difference beyond its noise.

The settings (``mallopt``; the same as the ``MALLOC_*_`` environment variables): blocks below
256 MiB come from the heap (no per-tensor ``mmap``), the heap's free top is kept up to 2 GiB
(no trimming), it grows in 256 MiB steps, and at most 2 arenas. They are applied by every
pipeline rank at start and by the block profile, so the profile, the calibration and the
measured plans run under the same allocator. ``DLSCHED_KEEP_FREED_MEMORY=0`` leaves glibc's
defaults (to measure the difference); elsewhere than glibc nothing changes.
"""

from __future__ import annotations

import ctypes
import os
import sys

_SETTINGS = ((-3, 256 << 20),   # M_MMAP_THRESHOLD
             (-1, 2**31 - 1),   # M_TRIM_THRESHOLD
             (-2, 256 << 20),   # M_TOP_PAD
             (-8, 2))           # M_ARENA_MAX
"""(mallopt parameter, value): glibc's malloc.h numbers; values in bytes (arenas: a count)."""

_FALLBACK_MMAP_THRESHOLD = 32 << 20
"""glibc builds that refuse a threshold above HEAP_MAX_SIZE / 2 accept this one (64-bit)."""


def keep_freed_memory() -> bool:
    """Apply the settings to this process's glibc malloc; True if every one was accepted,
    False where the process has no glibc ``mallopt`` or ``DLSCHED_KEEP_FREED_MEMORY`` is 0."""
    if os.environ.get("DLSCHED_KEEP_FREED_MEMORY", "1") == "0" or sys.platform != "linux":
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    accepted = [mallopt(parameter, value) == 1 for parameter, value in _SETTINGS]
    if not accepted[0]:
        accepted[0] = mallopt(_SETTINGS[0][0], _FALLBACK_MMAP_THRESHOLD) == 1
    return all(accepted)
