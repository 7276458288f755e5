"""A progress bar for long runs, on stderr: shown when stderr is a terminal, silent otherwise
(CI, pipes, --json), so redirected tables and JSON stay clean.

The bar has a spinner and the elapsed time, so it keeps moving while one long item (a large
pipeline plan, a large collective's search) is being computed. ``activity`` is the same line
without a count, for work that runs elsewhere (spawned torch ranks) or has no known size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from dlsched.cli.options import status_console as console

Item = TypeVar("Item")


def progress_bar(description: str, quiet: bool) -> Callable[[Iterable[Item], int], Iterator[Item]]:
    """A ``progress(items, total)`` wrapper drawing a rich bar unless quiet or not a TTY."""

    def wrap(items: Iterable[Item], total: int) -> Iterator[Item]:
        if quiet or not console.is_terminal:
            yield from items
            return
        columns = (SpinnerColumn(), TextColumn("[progress.description]{task.description}"),
                   BarColumn(), MofNCompleteColumn(), TextColumn("elapsed"), TimeElapsedColumn(),
                   TextColumn("left"), TimeRemainingColumn())
        with Progress(*columns, console=console, transient=True) as progress:
            yield from progress.track(items, total=total, description=description)

    return wrap


@contextmanager
def activity(description: str, quiet: bool) -> Iterator[None]:
    """A spinner with ``description`` and the elapsed time on stderr while the block runs,
    unless quiet or not a TTY; gone when the block ends."""
    if quiet or not console.is_terminal:
        yield
        return
    columns = (SpinnerColumn(), TextColumn("[progress.description]{task.description}"),
               TextColumn("elapsed"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        progress.add_task(description, total=None)
        yield
