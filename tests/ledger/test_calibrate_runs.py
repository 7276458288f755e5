"""``dlsched calibrate runs`` and ``dlsched validate --ledger``: a fit recovers the GEMM
efficiency (and, from launch-bound runs, the host's launch cost) that generated its runs,
refuses what the runs cannot support with one line, and
the CLI writes a GPU file the planner reads without ever overwriting its input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dlsched.config import bundled_presets
from dlsched.errors import ConfigError
from dlsched.experiments import vtrain
from dlsched.ledger.calibrate import BOUNDS, HOST, fit_runs, with_efficiency
from dlsched.ledger.user_runs import UserRun, load_runs, price

# CSV indices of vTrain rows: GEMM-heavy (hidden 2048, TP 1; 27, at microbatch 1 and PP 2,
# partly launch-bound: a 1% dearer launch makes it 0.47% slower), GEMM-bound only (microbatch
# 2-8, PP 1: under 0.01%) and launch-bound (hidden 1024, TP 2-4: 0.87-0.91%).
GEMM_BOUND = (27, 120, 273, 284)
GEMM_ONLY = (120, 273, 284, 56)
LAUNCH_BOUND = (114, 505, 913)
TRUE_EFFICIENCY = 0.62
TRUE_HOST = 1.8  # launch costs 1.8 x the preset's (77.44 -> 139.392 us forward)


def _runs(indices: tuple[int, ...]) -> list[dict[str, Any]]:
    rows = vtrain.load_rows()
    return [vtrain.ledger_run(rows[i], i) for i in indices]


def _synthetic(tmp_path: Path, indices: tuple[int, ...], efficiency: float,
               scale: float = 1.0, host: float = 1.0) -> list[dict[str, Any]]:
    """Runs whose measured time is dlsched's own prediction at ``efficiency`` and launch
    costs ``host`` x the preset's (x ``scale``)."""
    gpu = tmp_path / "truth.yaml"
    gpu.write_text(yaml.safe_dump(with_efficiency(bundled_presets("gpus.yaml")["a100"],
                                                  efficiency, host)))
    runs = _runs(indices)
    for run in runs:
        predicted = price(UserRun.model_validate(run), str(gpu)).predicted
        run["measured"] = [{"metric": "iteration_s", "value": predicted * scale}]
    return runs


def _validated(runs: list[dict[str, Any]]) -> list[UserRun]:
    return [UserRun.model_validate(run) for run in runs]


def test_the_fit_recovers_the_efficiency_that_generated_the_runs(tmp_path: Path) -> None:
    """Runs priced by dlsched at a GEMM efficiency of 0.62 (the preset has 0.7549) give back
    0.62: jointly, per run, and with every run left out in turn (errors then ~0)."""
    fit = fit_runs(_validated(_synthetic(tmp_path, GEMM_BOUND, TRUE_EFFICIENCY)), "synthetic")
    assert fit.value == pytest.approx(TRUE_EFFICIENCY, abs=1e-3)
    assert fit.per_run_range[0] == pytest.approx(TRUE_EFFICIENCY, abs=1e-3)
    assert fit.per_run_range[1] == pytest.approx(TRUE_EFFICIENCY, abs=1e-3)
    assert fit.standard_error < 1e-3
    assert fit.loo_mean_abs_error < 1e-3
    assert all(r["preset_error"] < -0.02 for r in fit.rows)  # the preset is fast on them
    assert fit.document["efficiency"]["gemm"]["bf16"] == pytest.approx(TRUE_EFFICIENCY,
                                                                       abs=1e-3)
    # row 27 is partly launch-bound, so the launch cost is fitted too: the preset's comes back
    assert fit.host_fitted and fit.host == pytest.approx(1.0, abs=2e-3)
    assert not any("best-shape" in note for note in fit.notes)  # 0.62 < 271.2 / 312 = 0.869


def test_a_fit_above_the_best_shape_matmul_rate_says_so(tmp_path: Path) -> None:
    """Runs generated at 0.95 of the peak, above the A100's best-shape matmul rate (271.2 of
    312 TFLOP/s = 0.869, Bekman's MAMF table): fitted, with a note that the runs did less work
    than priced."""
    fit = fit_runs(_validated(_synthetic(tmp_path, GEMM_ONLY, 0.95)), "synthetic")
    assert fit.value == pytest.approx(0.95, abs=1e-3)
    assert any("above the best-shape matmul rate" in note and "0.869" in note
               for note in fit.notes)


def test_runs_that_are_not_launch_bound_keep_the_presets_launch_cost(tmp_path: Path) -> None:
    """GEMM-bound runs do not say what a launch costs: the launch cost is kept at the
    preset's 77.44 us and a note says why; the efficiency is fitted as before."""
    fit = fit_runs(_validated(_synthetic(tmp_path, GEMM_ONLY, TRUE_EFFICIENCY)), "synthetic")
    assert fit.value == pytest.approx(TRUE_EFFICIENCY, abs=1e-3)
    assert not fit.host_fitted and fit.host == 1.0 and fit.host_standard_error == 0.0
    assert max(r["launch_elasticity"] for r in fit.rows) < 0.1
    assert any(note.startswith(f"{HOST} not fitted") for note in fit.notes)
    assert fit.document["kernel_overhead"] == "77.44 us"
    assert fit.document["sources"][HOST] == bundled_presets("gpus.yaml")["a100"]["sources"][HOST]


def test_launch_bound_runs_give_back_the_launch_cost_that_generated_them(
        tmp_path: Path) -> None:
    """Runs priced at a GEMM efficiency of 0.62 and launch costs 1.8 x the preset's (GEMM-
    bound and launch-bound vTrain layouts together): both constants come back, every run
    left out is predicted exactly, and the GPU file carries 1.8 x 77.44 = 139.392 us forward
    and 1.8 x 23.81 = 42.858 us backward, marked fitted."""
    runs = _synthetic(tmp_path, GEMM_BOUND + LAUNCH_BOUND, TRUE_EFFICIENCY, host=TRUE_HOST)
    fit = fit_runs(_validated(runs), "synthetic")
    assert fit.host_fitted
    assert fit.value == pytest.approx(TRUE_EFFICIENCY, abs=2e-3)
    assert fit.host == pytest.approx(TRUE_HOST, rel=2e-3)
    assert fit.host_standard_error < 0.01
    assert fit.loo_mean_abs_error < 2e-3
    assert max(r["launch_elasticity"] for r in fit.rows) > 0.5  # the launch-bound rows
    # the preset (launches 1.8x too cheap) predicts the launch-bound runs fast
    assert all(r["preset_error"] < -0.1 for r in fit.rows if r["launch_elasticity"] > 0.5)
    forward = float(fit.document["kernel_overhead"].split()[0])
    backward = float(fit.document["backward_overhead"].split()[0])
    assert forward == pytest.approx(139.392, rel=2e-3)
    assert backward == pytest.approx(42.858, rel=2e-3)
    assert fit.document["provenance"]["kernel_overhead"] == "fitted"


def test_a_noisy_sample_reports_its_spread(tmp_path: Path) -> None:
    """Runs measured 10% slower or faster than the generating model in turn: the fit is near
    the truth and its standard error and per-run range widen with the noise."""
    runs = _synthetic(tmp_path, GEMM_BOUND, TRUE_EFFICIENCY)
    for index, run in enumerate(runs):
        run["measured"][0]["value"] *= 1.1 if index % 2 else 0.9
    fit = fit_runs(_validated(runs), "noisy")
    assert abs(fit.value - TRUE_EFFICIENCY) < 0.05
    assert fit.standard_error > 0.01
    assert fit.per_run_range[0] < TRUE_EFFICIENCY < fit.per_run_range[1]
    assert fit.loo_mean_abs_error > 0.05


@pytest.mark.parametrize(("case", "message"), [
    ("two runs", "a fit needs at least 3"),
    ("launch-bound", "is not exercised"),
    ("too fast", "lands at its bound"),
    ("two gpus", "one GPU model at a time"),
])
def test_a_fit_the_runs_cannot_support_is_refused(tmp_path: Path, case: str,
                                                 message: str) -> None:
    """Too few runs, runs whose time does not depend on the GEMM efficiency, runs faster
    than any efficiency explains, runs on two GPU models: refused with the reason."""
    if case == "two runs":
        runs = _runs(GEMM_BOUND[:2])
    elif case == "launch-bound":
        runs = _runs(LAUNCH_BOUND)
    elif case == "too fast":
        runs = _synthetic(tmp_path, GEMM_BOUND, BOUNDS[1], scale=0.5)
    else:
        runs = _runs(GEMM_BOUND[:3])
        runs[0]["hardware"]["gpu"] = "h100-sxm"
    with pytest.raises(ConfigError, match=message) as refused:
        fit_runs(_validated(runs), case)
    assert "\n" not in str(refused.value)


def test_a_run_outside_the_schema_names_its_field(tmp_path: Path) -> None:
    """A runs file with a mistyped field is refused naming the run and the field."""
    runs = _runs(GEMM_BOUND[:1])
    runs[0]["parallel"]["tp"] = 0
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump(runs))
    with pytest.raises(ConfigError, match=r"vtrain-single-0027: parallel\.tp"):
        load_runs(path)


def test_calibrate_runs_writes_a_gpu_file_plan_and_validate_read(
        tmp_path: Path, run_cli: Any) -> None:
    """The CLI fits, prints a row per run, writes a GPU file that ``plan --gpu`` prices with
    and ``validate --ledger --gpu`` scores the runs on (errors ~0: the runs were generated at
    the fitted efficiency), and refuses ``--out`` equal to its input before any work."""
    runs = tmp_path / "my-runs.yaml"
    runs.write_text(yaml.safe_dump(_synthetic(tmp_path, GEMM_BOUND[:3], TRUE_EFFICIENCY)))
    before = runs.read_text()
    code, _, err = run_cli("calibrate", "runs", str(runs), "--out", str(runs))
    assert code == 2 and "--out" in err and runs.read_text() == before
    out = tmp_path / "my-cluster.yaml"
    code, text, err = run_cli("calibrate", "runs", str(runs), "--out", str(out), "--json")
    assert code == 0, err
    fitted = json.loads(text)
    assert fitted["value"] == pytest.approx(TRUE_EFFICIENCY, abs=1e-3)
    assert len(fitted["rows"]) == 3 and out.exists()
    code, text, err = run_cli("validate", "--ledger", str(runs), "--gpu", str(out), "--json")
    assert code == 0, err
    scored = json.loads(text)
    assert scored["summary"]["priced"] == 3
    assert scored["summary"]["mean_abs_error"] < 1e-3
    code, text, err = run_cli("plan", "--model", "gpt3-175b", "--cluster", "dgx-a100",
                              "--gpus", "8", "--global-batch", "8", "--tp", "8", "--pp", "1",
                              "--dp", "1", "--chunks", "1", "--microbatch-size", "1",
                              "--schedule", "1f1b", "--recompute", "full",
                              "--no-sequence-parallel", "--zero", "3", "--gpu", str(out),
                              "--json")
    assert code == 0, err
    assert json.loads(text)["rows"][0]["iteration_s"] > 0


def test_the_template_calibrates_as_documented(tmp_path: Path, run_cli: Any) -> None:
    """docs/examples/my-runs.yaml loads, and its placeholder times (dlsched's own at 0.70)
    calibrate back to 0.70, as docs/validation.md says."""
    template = Path(__file__).parents[2] / "docs" / "examples" / "my-runs.yaml"
    assert len(load_runs(template)) == 4
    code, text, err = run_cli("calibrate", "runs", str(template), "--out",
                              str(tmp_path / "my-a100.yaml"), "--json")
    assert code == 0, err
    assert json.loads(text)["value"] == pytest.approx(0.70, abs=1e-3)
