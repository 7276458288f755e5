"""The one guard between a command's input files and its output files.

Every command that reads or writes files calls ``check_files`` with all of them before any
work: each output must be writable (``validation.check_output_path``), no two outputs may be
one file and no output may be one of the inputs. Paths are compared as the file system sees
them, not as they are spelled: an existing file by its device and inode (``os.stat`` follows
symbolic links, and hard links share an inode), a path that does not exist yet by its
resolved absolute form (``os.path.realpath``: ``./a.json``, ``/abs/a.json`` and a symlinked
folder are one path). The error names both options. Outputs are then written atomically
(``dlsched.report.files``), so a refused or failed run leaves every file as it was.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from dlsched.errors import ConfigError
from dlsched.validation import check_output_path

OutputFiles = Mapping[str, tuple[str | Path | None, tuple[str, ...]]]
"""``{option: (path or None, accepted suffixes)}`` of the files a command writes."""
InputFiles = Mapping[str, str | Path | None]
"""``{option: path or None}`` of the files a command reads (a name that is no file, such as
a preset, never matches an output)."""

SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")
"""Files SQLite keeps beside a database (write-ahead log, shared memory, rollback journal)."""


def file_identity(path: str | Path) -> tuple[object, ...]:
    """What makes two paths one file: (device, inode) of an existing file, else the resolved
    absolute path."""
    try:
        status = os.stat(path)
    except (OSError, ValueError):
        return ("path", os.path.realpath(path))
    return ("inode", status.st_dev, status.st_ino)


def check_files(outputs: OutputFiles, inputs: InputFiles | None = None) -> None:
    """Refuse, before any work, an output that cannot be written, two outputs on one file
    and an output that is an input (it would be overwritten); ConfigError naming both
    options (and the other spelling when the two differ)."""
    seen: dict[tuple[object, ...], tuple[str, str]] = {}
    for option, path in (inputs or {}).items():
        if path is not None and not Path(path).is_dir():
            seen.setdefault(file_identity(path), (f"{option} (an input)", str(path)))
    for option, (path, suffixes) in outputs.items():
        if path is None:
            continue
        check_output_path(path, option, suffixes)
        key = file_identity(path)
        if key in seen:
            other, spelled = seen[key]
            also = "" if spelled == str(path) else f" as {spelled!r}"
            raise ConfigError(f"{option}: {str(path)!r} is also given to {other}{also}; "
                              "accepted: a different file per output, none of them an input")
        seen[key] = (option, str(path))


def database_files(option: str, path: Path | None) -> dict[str, tuple[Path | None, tuple]]:
    """A SQLite results file and the side files SQLite writes beside it, as outputs."""
    if path is None:
        return {}
    return {option: (path, ()), **{f"{option} (its {side} file)": (Path(f"{path}{side}"), ())
                                   for side in SQLITE_SIDE_FILES}}
