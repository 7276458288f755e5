"""The progress hook a domain's ``compare`` takes: a wrapper around the names it runs (the
CLI passes a progress bar), called as ``progress(names, len(names))``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

Progress = Callable[[Sequence[str], int], Iterable[str]]


def quiet(names: Sequence[str], total: int) -> Iterable[str]:
    """No progress shown: the names as they are."""
    return names
