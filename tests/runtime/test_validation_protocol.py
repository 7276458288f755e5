"""The validation protocol's summary (benchmarks/validate_runtime.py), on hand-made rows."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
validate = pytest.importorskip("benchmarks.validate_runtime")
common = pytest.importorskip("benchmarks.common")


def _rows(times: dict[str, float], errors: dict[str, float]) -> list[dict]:
    return [{"model": "gpt", "policy": p, "measured_s": t, "error": errors[p],
             "iterations_s": [t] * 5} for p, t in times.items()]


def test_dlsched_rank_counts_strictly_faster_plans() -> None:
    """dlsched at 100 ms among 90, 100 and 120 ms: one plan faster, rank 2 (a tie shares)."""
    rows = _rows({"wfbp": 0.090, "dlsched": 0.100, "ddp": 0.100, "torch-ddp": 0.120},
                 dict.fromkeys(("wfbp", "dlsched", "ddp", "torch-ddp"), 0.0))
    assert validate.dlsched_rank(rows) == 2


def test_summary_by_hand() -> None:
    """Two runs: errors +10%, -20%, +5% (2 within 15%, mean |e| 11.7%) and +16%, 0, -5% (2,
    7%); dlsched measured 100 then 110 ms against torch DDP 120 and 100 ms (-16.7%, +10%);
    its run-to-run spread (110 - 100) / 105; DDP's plan on the executor (run 1 only) 108 ms
    against 120 ms; a refused run is listed with its reason."""
    first = _rows({"wfbp": 0.090, "dlsched": 0.100, "ddp": 0.108, "torch-ddp": 0.120},
                  {"wfbp": 0.10, "dlsched": -0.20, "ddp": 0.05, "torch-ddp": 0.05})
    second = _rows({"wfbp": 0.095, "dlsched": 0.110, "torch-ddp": 0.100},
                   {"wfbp": 0.16, "dlsched": 0.0, "torch-ddp": -0.05})
    summary = validate.summarize([{"rows": first}, {"rows": second},
                                  {"rows": [], "refused": "calibration: refused"}])
    one, two = summary["per_run"]
    assert (one["within"], two["within"]) == (3, 2)
    assert one["mae"] == pytest.approx(0.40 / 4) and two["mae"] == pytest.approx(0.07)
    assert one["dlsched_rank"] == {"gpt": "2 of 4"} and two["dlsched_rank"] == {"gpt": "3 of 3"}
    assert one["same_plan_over_ddp"]["gpt"] == pytest.approx((0.108 / 0.120 - 1,) * 3)
    assert two["same_plan_over_ddp"] == {}
    assert summary["same_plan_over_ddp"]["gpt"][0] == pytest.approx(0.108 / 0.110 - 1)
    assert one["dlsched_over_ddp"]["gpt"] == pytest.approx((0.100 / 0.120 - 1,) * 3)
    assert two["dlsched_over_ddp"]["gpt"] == pytest.approx((0.10,) * 3)
    point, low, high = summary["dlsched_over_ddp"]["gpt"]
    assert point == pytest.approx(0.105 / 0.110 - 1)  # medians of the pooled 10 iterations
    assert low <= point <= high
    mine = next(p for p in summary["per_policy"] if p["policy"] == "dlsched")
    assert mine["run_spread"] == pytest.approx(0.010 / 0.105)
    assert mine["mean_error"] == pytest.approx(-0.10) and mine["min_error"] == -0.20
    assert summary["refused"] == ["calibration: refused"]


def test_machine_slug_and_held_out() -> None:
    """A processor line becomes its model's words; the setting developed on counts as held out
    on another processor, every other setting on any processor."""
    assert validate.machine_slug("Intel(R) Xeon(R) Processor, x86_64") == "intel-xeon-processor"
    assert validate.machine_slug("AMD EPYC, x86_64") == "amd-epyc"
    assert validate.held_out(4, 10, "AMD EPYC, x86_64") is False
    assert validate.held_out(4, 10, "Intel(R) Xeon(R) Processor, x86_64") is True
    assert validate.held_out(3, 10, "AMD EPYC, x86_64") is True
    assert validate.held_out(2, None, "AMD EPYC, x86_64") is True


def test_ratio_interval() -> None:
    """Iterations all 2.0 s against all 1.0 s: +100%, every resample alike; 20 iterations
    alternating 0.9 and 1.1 s against 1.0 s: median 1.0 s, 0 difference, an interval that
    contains it and is not empty (the resampled medians move between 0.9 and 1.1)."""
    assert common.ratio_interval([2.0] * 7, [1.0] * 7) == pytest.approx((1.0, 1.0, 1.0))
    point, low, high = common.ratio_interval([0.9, 1.1] * 10, [1.0] * 20)
    assert point == pytest.approx(0.0) and -0.1 - 1e-9 <= low < 0 < high <= 0.1 + 1e-9


def test_steal_seconds_from_proc_stat(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The ``cpu`` line's eighth number is steal, in clock ticks: 37858 ticks at 100 per
    second are 378.58 s; a line without it gives None."""
    stat = tmp_path / "stat"
    stat.write_text("cpu  8183321 33094 1192018 5444648 10095 0 229409 37858 0 0\ncpu0 1 2\n")
    real = Path

    def fake(path: str) -> Path:
        return stat if path == "/proc/stat" else real(path)

    monkeypatch.setattr(common, "Path", fake)
    monkeypatch.setattr(common.os, "sysconf", lambda name: 100)
    assert common.steal_seconds() == pytest.approx(378.58)
    stat.write_text("cpu  1 2 3 4\n")
    assert common.steal_seconds() is None
