"""``dlsched run dataparallel``, ``profile`` and ``calibrate`` from the command line."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch", reason="optional torch extra not installed")

from dlsched.runtime.models import resnet_cnn


def tiny() -> object:
    """A 2-stage CNN small enough for a fast end-to-end run."""
    return resnet_cnn(widths=(4, 8))


def test_train_dataparallel_prints_measured_and_predicted(tmp_path, run_cli) -> None:
    """Two ranks, two policies and DDP in two rounds: one row each with measured (the median
    of 2 rounds x 3 iterations), predicted and error; the measured timeline is written as a
    Chrome trace and a PNG."""
    trace, plot = tmp_path / "t.json", tmp_path / "p.png"
    code, out, err = run_cli("run", "dataparallel", "--module", f"{__name__}:tiny",
                             "--input-shape", "2,3,16,16", "--workers", "2", "--network",
                             "ring:1Gb/s,20us", "--policy", "wfbp,dlsched,torch-ddp",
                             "--iterations", "4", "--warmup", "1", "--rounds", "2", "--json",
                             "--trace",
                             str(trace), "--plot", str(plot))
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert [r["policy"] for r in rows] == ["wfbp", "dlsched", "torch-ddp"]
    for row in rows:
        # the prediction never beats the bound (equal up to float rounding when a profiled
        # layer time makes the schedule tight)
        assert row["measured_iterations"] == 2 * 3
        assert row["measured_s"] > 0 and row["predicted_s"] >= row["bound_s"] * (1 - 1e-12) > 0
        assert abs(row["error"] - (row["predicted_s"] / row["measured_s"] - 1)) < 1e-12
    events = json.loads(trace.read_text())["traceEvents"]
    assert {"backward", "forward"} <= {e.get("cat") for e in events}
    assert plot.stat().st_size > 0


def test_bad_runtime_options_exit_2_before_spawning(tmp_path, run_cli) -> None:
    """Unknown policy, bad shape, bad output suffix, load, nice or profile place: exit 2
    naming the option."""
    code, _, err = run_cli("run", "dataparallel", "--policy", "fastest")
    assert code == 2 and "policy" in err
    code, _, err = run_cli("profile", "--module", f"{__name__}:tiny", "--input-shape", "2,x",
                           "--out", str(tmp_path / "p.csv"))
    assert code == 2 and "input-shape" in err
    code, _, err = run_cli("calibrate", "--out", str(tmp_path / "n.txt"))
    assert code == 2 and "--out" in err
    code, _, err = run_cli("calibrate", "--out", str(tmp_path / "n.yaml"), "--load", "gpu")
    assert code == 2 and "load" in err and "compute" in err
    code, _, err = run_cli("calibrate", "--out", str(tmp_path / "n.yaml"), "--comm-nice", "30")
    assert code == 2 and err.startswith("error: --comm-nice: ")
    code, _, err = run_cli("run", "dataparallel", "--network", "ring:1Gb/s,0us",
                           "--profile-in", "gpu")
    assert code == 2 and err.startswith("error: --profile-in: ") and "training, passes" in err
    code, _, err = run_cli("run", "dataparallel", "--network", "ring:1Gb/s,0us",
                           "--rounds", "0")
    assert code == 2 and "rounds" in err and "1 to 100" in err
