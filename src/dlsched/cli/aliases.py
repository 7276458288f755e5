"""Old spellings kept for one release after a rename, each printing a one-line note on stderr.

Commands were renamed so that the name says what runs (``dlsched run dataparallel`` executes on
torch, was ``dlsched train dataparallel``) and options so that one name has one meaning
(``pipeline plan --link-sharing fifo|ps``, was ``--network``, which elsewhere names the
all-reduce cost model).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from dlsched.errors import ConfigError

Command = TypeVar("Command", bound=Callable[..., Any])


def deprecation_note(old: str, new: str) -> None:
    """Print on stderr, on one line, that ``old`` is deprecated in favour of ``new``."""
    print(f"note: '{old}' is deprecated and goes in the next release; use '{new}'",
          file=sys.stderr)


def deprecated_command(command: Command, old: str, new: str) -> Command:
    """``command`` under its old name: the same options and behaviour after the note."""

    @functools.wraps(command)
    def alias(*args: Any, **kwargs: Any) -> Any:
        deprecation_note(old, new)
        return command(*args, **kwargs)

    return alias  # type: ignore[return-value]


def renamed_option(value: Any, old_value: Any, new: str, old: str, default: Any) -> Any:
    """The value of option ``new`` when its old spelling ``old`` may have been given
    (``old_value``; None when not): the old value with a note, ConfigError when both were given
    with different values."""
    if old_value is None:
        return value
    deprecation_note(old, new)
    if value != default and value != old_value:
        raise ConfigError(f"{new}: given as {value!r} and under its old spelling {old} as "
                          f"{old_value!r}; give only {new}")
    return old_value
