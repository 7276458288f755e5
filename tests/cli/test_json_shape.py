"""Every ``--json`` prints one shape: an object whose ``rows`` is a list of objects (the
README's promise), with whatever else the command adds beside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

GRID = ("domain: collective\naxes: {policy: [baseline, themis], chunks: [2, 4]}\n"
        "fixed: {size: 1 MB, topology: 2D-SW_SW}\nbaseline: baseline\n")


def _rows(run_cli, *args: str) -> list[dict]:
    code, out, err = run_cli(*args, "--json")
    assert code == 0, err
    document = json.loads(out)
    assert isinstance(document, dict) and isinstance(document["rows"], list), document
    assert all(isinstance(row, dict) for row in document["rows"])
    return document["rows"]


@pytest.mark.parametrize("args", [
    ("collective", "--topology", "2D-SW_SW", "--size", "1 MB", "--policy", "baseline"),
    ("topologies",),
    ("dataparallel", "--model", "vgg16", "--policy", "wfbp"),
    ("pipeline", "devices"),
    ("train", "--workload", "resnet152", "--topology", "2D-SW_SW", "--policy", "baseline",
     "--iterations", "1"),
    ("compute", "--model", "resnet50", "--batch-size", "32"),
    ("compute", "calibrate"),
    ("reproduce", "megatron", "--rows", "gpt-1.7b", "--max-plan-gpus", "0"),
], ids=lambda args: "-".join(args[:2]))
def test_a_command_prints_rows(run_cli, args: tuple[str, ...]) -> None:
    assert _rows(run_cli, *args)


def test_pipeline_plan_and_export_print_rows(run_cli, tmp_path: Path, chain_file: Path) -> None:
    plan = tmp_path / "plan.json"
    assert _rows(run_cli, "pipeline", "plan", "--model", str(chain_file), "--devices",
                 "1x8-NVLink", "--microbatches", "4", "--planner", "gpipe", "--for-torch",
                 "--save", str(plan))
    assert _rows(run_cli, "pipeline", "export", str(plan), "--torch-csv",
                 str(tmp_path / "plan.csv"))


def test_sweep_run_dry_run_and_summary_print_rows(run_cli, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """``sweep --json`` one row of what ran, ``--dry-run --json`` a row per timed scenario,
    ``summary --json`` the speedup table's rows."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "g.yaml").write_text(GRID)
    [ran] = _rows(run_cli, "sweep", "g.yaml", "--db", "r.db", "--jobs", "1")
    assert (ran["ran"], ran["stored"], ran["errors"]) == (4, 4, 0)
    assert _rows(run_cli, "sweep", "g.yaml", "--db", "r.db", "--dry-run", "--resume")
    assert _rows(run_cli, "sweep", "summary", "r.db")
