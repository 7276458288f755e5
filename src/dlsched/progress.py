"""Progress on stderr for long runs: the hook a domain's ``compare`` takes (``Progress``: a
wrapper around the names it runs, called as ``progress(names, len(names))``), ``quiet`` (no
progress), the bar the CLI passes (``progress_bar``) and a spinner for work without a count
(``activity``).

The bar and the spinner are drawn when stderr is a terminal and silent otherwise (CI, pipes,
``--json``), so redirected tables and JSON stay clean. The bar has a spinner and the elapsed
time, so it keeps moving while one long item (a large pipeline plan, a large collective's
search) is being computed. They live here, beside the hook, so that a domain running them
never calls back into the command line.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

from rich.console import Console

Progress = Callable[[Sequence[str], int], Iterable[str]]
Item = TypeVar("Item")

console = Console(stderr=True, width=None if sys.stderr.isatty() else 140)
"""Status output on stderr (notes, progress); piped output gets a wide fixed width."""


def quiet(names: Sequence[str], total: int) -> Iterable[str]:
    """No progress shown: the names as they are."""
    return names


def progress_bar(description: str, silent: bool) -> Callable[[Iterable[Item], int],
                                                             Iterator[Item]]:
    """A ``progress(items, total)`` wrapper drawing a rich bar unless ``silent`` or stderr is
    not a terminal."""

    def wrap(items: Iterable[Item], total: int) -> Iterator[Item]:
        if silent or not console.is_terminal:
            yield from items
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as Bar

        columns = (SpinnerColumn(), TextColumn("[progress.description]{task.description}"),
                   BarColumn(), MofNCompleteColumn(), TextColumn("elapsed"), TimeElapsedColumn(),
                   TextColumn("left"), TimeRemainingColumn())
        with Bar(*columns, console=console, transient=True) as bar:
            yield from bar.track(items, total=total, description=description)

    return wrap


@contextmanager
def activity(description: str, silent: bool) -> Iterator[None]:
    """A spinner with ``description`` and the elapsed time on stderr while the block runs,
    unless ``silent`` or stderr is not a terminal; gone when the block ends."""
    if silent or not console.is_terminal:
        yield
        return
    from rich.progress import Progress as Bar
    from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = (SpinnerColumn(), TextColumn("[progress.description]{task.description}"),
               TextColumn("elapsed"), TimeElapsedColumn())
    with Bar(*columns, console=console, transient=True) as bar:
        bar.add_task(description, total=None)
        yield
