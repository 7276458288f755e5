"""The progress bar: drawn on a terminal, silent when piped or quiet; items pass unchanged."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from dlsched import progress as progress_module


@pytest.mark.parametrize(("terminal", "quiet", "drawn"),
                         [(True, False, True), (True, True, False), (False, False, False)])
def test_bar_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch, terminal: bool, quiet: bool,
                                drawn: bool) -> None:
    """On a terminal the bar shows the description and the count done; piped or quiet, the
    output stays empty. The items come through in order either way."""
    out = io.StringIO()
    monkeypatch.setattr(progress_module, "console",
                        Console(file=out, force_terminal=terminal, width=100))
    wrap = progress_module.progress_bar("crunching", quiet)
    assert list(wrap(iter(range(5)), 5)) == list(range(5))
    text = out.getvalue()
    assert ("crunching" in text and "5/5" in text) == drawn
    assert (text == "") == (not drawn)


@pytest.mark.parametrize(("terminal", "quiet", "drawn"),
                         [(True, False, True), (True, True, False), (False, False, False)])
def test_activity_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch, terminal: bool,
                                     quiet: bool, drawn: bool) -> None:
    """The spinner for work without a count (spawned ranks) names what runs and the elapsed
    time on a terminal; piped or quiet it prints nothing; the block's result is unchanged."""
    out = io.StringIO()
    monkeypatch.setattr(progress_module, "console",
                        Console(file=out, force_terminal=terminal, width=100))
    with progress_module.activity("training on 2 ranks", quiet):
        result = sum(range(5))
    assert result == 10
    text = out.getvalue()
    assert ("training on 2 ranks" in text and "elapsed" in text) == drawn
    assert (text == "") == (not drawn)
