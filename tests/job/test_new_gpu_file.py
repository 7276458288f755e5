"""Adding a GPU is a file, no code (docs/architecture.md, "Where to add what"): a GPU file in a
temporary directory is usable by ``dlsched compute``, ``dlsched plan --gpu`` and ``dlsched
validate --ledger --gpu`` alike, and each prices with its constants."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from dlsched.config import bundled_presets
from dlsched.ledger import load_ledger

PLAN = ("plan", "--model", "gpt-1.7b", "--cluster", "dgx-a100", "--gpus", "8",
        "--global-batch", "64", "--tp", "1", "--pp", "1", "--dp", "8", "--chunks", "1",
        "--microbatch-size", "8", "--schedule", "1f1b", "--recompute", "full",
        "--no-sequence-parallel", "--zero", "0", "--precision", "fp16", "--json")


def _half_a100(tmp_path: Path) -> Path:
    """A made-up GPU: the a100 preset's document with every peak rate halved."""
    document = dict(bundled_presets("gpus.yaml")["a100"])
    document["description"] = "a made-up GPU: an A100 at half its peak rates"
    document["peak"] = {precision: f"{float(rate.split()[0]) / 2} TFLOP/s"
                        for precision, rate in document["peak"].items()}
    path = tmp_path / "half-a100.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def _json(run_cli: Any, *args: str) -> dict[str, Any]:
    code, out, err = run_cli(*args)
    assert code == 0, err
    return json.loads(out)


def test_a_gpu_file_is_usable_by_compute_plan_and_validate(tmp_path: Path,
                                                           run_cli: Any) -> None:
    gpu = str(_half_a100(tmp_path))
    compute = ("compute", "--model", "gpt2", "--batch-size", "8", "--precision", "bf16",
               "--json", "--device")
    fast, = _json(run_cli, *compute, "a100")["rows"]
    slow, = _json(run_cli, *compute, gpu)["rows"]
    assert slow["step_s"] > fast["step_s"]
    given = _json(run_cli, *PLAN)["rows"][0]["iteration_s"]
    halved = _json(run_cli, *PLAN, "--gpu", gpu)["rows"][0]["iteration_s"]
    assert halved > given
    row = next(r for r in load_ledger("sc21") if r.id == "sc21-t1-gpt-1.7b")
    runs = tmp_path / "runs.yaml"
    runs.write_text(yaml.safe_dump([row.model_dump(mode="json")]))
    on_a100 = _json(run_cli, "validate", "--ledger", str(runs), "--json")
    on_file = _json(run_cli, "validate", "--ledger", str(runs), "--gpu", gpu, "--json")
    assert on_file["summary"]["priced"] == on_a100["summary"]["priced"] == 1
    assert on_file["rows"][0]["predicted"] < on_a100["rows"][0]["predicted"]  # TFLOP/s
