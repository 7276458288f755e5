"""Without torch, every runtime command ends in the same one-line error naming the extra,
after its inputs are checked and before it writes anything (exit 2, no traceback)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

MESSAGE = ("error: torch: not installed; the runtime commands need the optional extra: "
           "pip install 'dlsched[torch]' (CPU: pip install torch==2.13.0)\n")


@pytest.fixture
def torch_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch looks uninstalled to the checks (whether or not this Python has it)."""
    find_spec = importlib.util.find_spec

    def without_torch(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name == "torch" else find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", without_torch)


@pytest.mark.parametrize("args", [
    ("profile", "--out", "profile.csv"),
    ("calibrate", "--out", "network.yaml"),
    ("pipeline", "profile", "--chain", "chain.yaml"),
])
def test_runtime_commands_name_the_missing_extra(run_cli: Any, torch_absent: None,
                                                 tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 args: tuple[str, ...]) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(*args)
    assert (code, out, err) == (2, "", MESSAGE)
    assert list(tmp_path.iterdir()) == []


def test_inputs_are_checked_before_torch(run_cli: Any, torch_absent: None, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli("calibrate", "--points", "1")
    assert code == 2 and err.startswith("error: --points: 1 is out of range"), err
