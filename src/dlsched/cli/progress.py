"""A progress bar for long runs: shown on a terminal, silent otherwise (CI, pipes, --json)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from rich.progress import track

from dlsched.cli.options import console

Item = TypeVar("Item")


def progress_bar(description: str, quiet: bool) -> Callable[[Iterable[Item], int], Iterator[Item]]:
    """A ``progress(items, total)`` wrapper drawing a rich bar unless quiet or not a TTY."""

    def wrap(items: Iterable[Item], total: int) -> Iterator[Item]:
        if quiet or not console.is_terminal:
            yield from items
            return
        yield from track(items, description=description, total=total, console=console,
                         transient=True)

    return wrap
