"""Shared test helpers: run the CLI in-process and capture its exit code and output; a tiny
chain file for quick pipeline runs."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

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


@pytest.fixture
def chain_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A four-block chain for quick pipeline runs (a module may define its own)."""
    path = tmp_path_factory.mktemp("chain") / "tiny.yaml"
    path.write_text("name: tiny\nblocks:\n" + "".join(
        f"  - {{name: b{i}, forward_flops: {i + 1}e11, activation: 4 MB, params: 20 MB}}\n"
        for i in range(4)))
    return path
