"""Every file a command writes is announced (on stderr with --json); table commands have
--json."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest


def tiny_cnn() -> object:
    """A small CNN for a fast two-rank run (built by the spawned ranks by import path)."""
    from dlsched.runtime.models import resnet_cnn

    return resnet_cnn(widths=(4,))


def _announced(err: str, path: Path) -> bool:
    return any(line.startswith("wrote ") and line.endswith(f": {path}")
               for line in err.splitlines())


def test_topologies_and_device_presets_print_json_rows(run_cli) -> None:
    """``topologies --json`` and ``pipeline devices --json``: one row per preset, SI units."""
    code, out, _ = run_cli("topologies", "--json")
    assert code == 0
    rows = json.loads(out)["rows"]
    themis = {row["name"]: row for row in rows}["4D-Ring_FC_Ring_SW"]
    assert themis["npus"] == 1024 == math.prod(d["size"] for d in themis["dims"])
    assert all(d["bandwidth"] > 0 and d["latency_s"] >= 0 for d in themis["dims"])
    code, out, _ = run_cli("pipeline", "devices", "--json")
    assert code == 0
    assert all(row["gpus"] >= 1 and row["summary"] for row in json.loads(out)["rows"])


def test_pipeline_export_and_run_announce_every_file(run_cli, tmp_path: Path) -> None:
    """export --json announces the action table and the mapping on stderr and prints a row
    per stage; run --json announces its trace and plot (they were written silently)."""
    pytest.importorskip("torch", reason="run pipeline needs torch")
    from dlsched.pipeline.plans.plan import PipelinePlan, Stage
    from dlsched.pipeline.plans.plan_file import save_plan
    from dlsched.pipeline.plans.schedules import gpipe_orders
    from dlsched.runtime.pipeline.model import load_model
    from dlsched.runtime.pipeline.run import saved_for_model

    stages = (Stage(0, 3, (0,)), Stage(3, 6, (1,)))
    plan = PipelinePlan("gpipe", stages, gpipe_orders(stages, 2, 2), 2)
    save_plan(saved_for_model(plan, load_model("gpt-tiny"), 2, ("cpu0", "cpu1"), 0.01),
              tmp_path / "plan.json")
    csv, trace, png = tmp_path / "order.csv", tmp_path / "t.json", tmp_path / "p.png"
    code, out, err = run_cli("pipeline", "export", str(tmp_path / "plan.json"), "--torch-csv",
                             str(csv), "--json")
    assert code == 0, err
    assert [row["rank"] for row in json.loads(out)["rows"]] == [0, 1]
    assert _announced(err, csv) and _announced(err, tmp_path / "order.stages.json")
    code, out, err = run_cli("run", "pipeline", str(tmp_path / "plan.json"), "--iterations",
                             "1", "--warmup", "0", "--trace", str(trace), "--plot", str(png),
                             "--json")
    assert code == 0, err
    assert json.loads(out)["rows"][0]["planner"] == "gpipe"
    assert _announced(err, trace) and _announced(err, png)


def test_train_dataparallel_announces_its_trace_and_plot(run_cli, tmp_path: Path) -> None:
    """--trace and --plot of run dataparallel are announced (on stderr with --json)."""
    pytest.importorskip("torch", reason="run dataparallel needs torch")
    trace, png = tmp_path / "t.json", tmp_path / "p.png"
    code, out, err = run_cli("run", "dataparallel", "--module", f"{__name__}:tiny_cnn",
                             "--input-shape", "2,3,8,8", "--workers", "2", "--network",
                             "ring:1Gb/s,20us", "--policy", "wfbp", "--iterations", "3",
                             "--warmup", "1", "--trace", str(trace), "--plot", str(png),
                             "--json")
    assert code == 0, err
    assert [row["policy"] for row in json.loads(out)["rows"]] == ["wfbp"]
    assert _announced(err, trace) and _announced(err, png)


def test_profile_prints_json_rows_and_announces_its_file(run_cli, tmp_path: Path) -> None:
    """``dlsched profile --json``: a row per parameter tensor, totals that are their sums, the
    written profile announced on one stderr line."""
    pytest.importorskip("torch", reason="profile needs torch")
    out = tmp_path / "p.csv"
    code, text, err = run_cli("profile", "--module", f"{__name__}:tiny_cnn", "--input-shape",
                              "2,3,8,8", "--out", str(out), "--warmup", "0", "--repeats", "1",
                              "--json")
    assert code == 0, err
    document = json.loads(text)
    assert document["forward_s"] == pytest.approx(
        sum(row["forward_time_s"] for row in document["rows"]))
    assert _announced(err, out) and out.exists()
