"""Outputs: one check for every file a command writes; JSON output is always valid JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from dlsched.report import to_json

CHAIN = ("--model", "gpt2-xl", "--devices", "2x8-NVLink-100Gb", "--microbatches", "4",
         "--planner", "gpipe")


def test_pipeline_plan_refuses_save_and_trace_on_the_same_file(tmp_path: Path, run_cli,
                                                               monkeypatch) -> None:
    """--save x.json --trace x.json: refused before planning (the trace overwrote the plan)."""
    from dlsched.pipeline import compare

    def never(*_: Any, **__: Any) -> None:
        raise AssertionError("planned although the outputs clash")

    monkeypatch.setattr(compare, "run_planner", never)
    same = str(tmp_path / "x.json")
    code, _, err = run_cli("pipeline", "plan", *CHAIN, "--save", same, "--trace", same)
    assert code == 2 and "--save" in err and "is also given to --trace" in err


def test_an_output_may_not_overwrite_an_input(tmp_path: Path, run_cli) -> None:
    """run pipeline PLAN --trace PLAN would overwrite the plan it runs: refused."""
    plan = tmp_path / "plan.json"
    plan.write_text("{}")
    code, _, err = run_cli("run", "pipeline", str(plan), "--trace", str(plan))
    assert code == 2 and "is also given to PLAN (an input)" in err
    assert plan.read_text() == "{}"


def test_json_never_holds_infinity_or_nan() -> None:
    """A non-finite float (a 1e308 prediction over a measured time overflows) is written as
    null, so the output is valid JSON (json.loads with strict constants)."""
    row = {"error": 1e308 / 1e-3 - 1, "nan": math.nan, "rows": [{"x": -math.inf}, 1.5]}
    text = to_json(row)

    def refuse(constant: str) -> None:
        raise AssertionError(f"invalid JSON constant {constant}")

    assert json.loads(text, parse_constant=refuse) == {"error": None, "nan": None,
                                                       "rows": [{"x": None}, 1.5]}


def test_a_plan_file_with_an_absurd_prediction_is_refused(tmp_path: Path, run_cli) -> None:
    """predicted_iteration_s 1e308 (which printed "error": Infinity) is out of range."""
    saved = tmp_path / "plan.json"
    code, _, err = run_cli("pipeline", "plan", *CHAIN[:-2], "--planner", "gpipe", "--for-torch",
                           "--save", str(saved), "--json")
    assert code == 0, err
    document = json.loads(saved.read_text())
    document["predicted_iteration_s"] = 1e308
    saved.write_text(json.dumps(document))
    code, _, err = run_cli("pipeline", "export", str(saved), "--torch-csv",
                           str(tmp_path / "o.csv"))
    assert code == 2 and "predicted_iteration_s" in err and "1e+06 s" in err


def test_calibrate_refuses_an_unknown_fit_before_timing(tmp_path: Path, run_cli,
                                                        monkeypatch) -> None:
    """--model foo is refused at once (it was refused after a 31 s calibration)."""
    import importlib

    spawn = importlib.import_module("dlsched.runtime.spawn")  # the package exports spawn()

    def never(*_: Any, **__: Any) -> None:
        raise AssertionError("calibrated although --model is unknown")

    monkeypatch.setattr(spawn, "spawn", never)
    code, _, err = run_cli("calibrate", "--model", "foo", "--out", str(tmp_path / "n.yaml"))
    assert code == 2 and "--model: 'foo' is not a fit; accepted: alpha-beta, ring, piecewise" \
        in err
