"""A run that cannot produce anything says so: a reproduction whose every scenario fails
exits 1, and ``calibrate --backend nccl`` without CUDA is refused before any rank starts."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

import pytest


def _fails(scenario: Any) -> list[dict]:
    raise ValueError(f"no result for {scenario!r}")


def test_a_reproduction_whose_every_scenario_fails_exits_1(run_cli, monkeypatch) -> None:
    """Every scenario raising: exit 1 and one error line, not exit 0 with empty tables."""
    from dlsched.experiments import themis

    two = themis.scenarios()[:2]
    monkeypatch.setattr(themis, "run_scenario", _fails)
    monkeypatch.setattr(themis, "scenarios", lambda options: two)
    code, out, err = run_cli("reproduce", "themis", "--jobs", "1", "--json")
    assert code == 1 and out == "", (code, out)
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: themis: every scenario failed (2; the first: ") and \
        "no result for" in last, err


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_calibrate_with_nccl_on_a_cpu_torch_is_refused_before_spawning(
        run_cli, monkeypatch, tmp_path: Path) -> None:
    """The old command spawned the ranks, which then failed; now one line, exit 2, nothing
    spawned and no network file written."""
    import torch

    spawn = importlib.import_module("dlsched.runtime.spawn")  # the package exports spawn()

    def never(*_: Any, **__: Any) -> None:
        raise AssertionError("ranks spawned although nccl cannot run")

    monkeypatch.setattr(spawn, "spawn", never)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "n.yaml"
    code, _, err = run_cli("calibrate", "--backend", "nccl", "--out", str(out))
    assert code == 2 and err.startswith("error: --backend: nccl needs CUDA GPUs and NCCL; "), err
    assert "sees no CUDA GPU; accepted: gloo" in err and not out.exists()
