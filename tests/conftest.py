"""Shared test helpers: run the CLI in-process and capture its exit code and output."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest

from dlsched.cli.app import main


@pytest.fixture
def run_cli(monkeypatch: pytest.MonkeyPatch,
            capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """``run_cli("collective", "--json")`` -> (exit code, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["dlsched", *args])
        code = 0
        try:
            main()
        except SystemExit as done:
            code = int(done.code or 0)
        out, err = capsys.readouterr()
        return code, out, err

    return run
