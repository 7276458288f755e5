"""Atomic output files: every file dlsched writes appears whole or not at all.

A writer gets a temporary file in the destination's own folder (same file system, so the
final ``os.replace`` is one atomic rename) and the destination is replaced only once the
writer has finished; a writer that fails, or a process stopped halfway, leaves the old file
(possibly an input a user cares about) as it was and no partial output behind.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_output(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` (same suffix, so writers that infer the format
    from it work); on a clean exit it replaces ``path`` atomically, on an error it is removed.
    Missing parent folders are created. An existing destination keeps its permissions."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{path.suffix}",
                                    dir=path.parent)
    os.close(handle)
    temporary = Path(name)
    try:
        yield temporary
        with contextlib.suppress(OSError):
            os.chmod(temporary, path.stat().st_mode & 0o7777 if path.exists()
                     else 0o666 & ~_umask())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def _umask() -> int:
    """The process's file-creation mask (read by setting and restoring it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text(path: str | Path, text: str) -> Path:
    """Write UTF-8 ``text`` to ``path`` atomically (creating folders) and return the path."""
    with atomic_output(path) as temporary:
        temporary.write_text(text, encoding="utf-8")
    return Path(path)
