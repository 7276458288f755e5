"""``dlsched compute``: JSON fields, the calibration cases, and bad input."""

import json

import pytest

from dlsched.cli.compute import step_row

FIELDS = {"model", "batch_size", "device", "precision", "forward_s", "backward_s", "step_s",
          "mfu"}


def test_json_rows_carry_the_fields(run_cli):
    """--json prints one row with the issue's fields; step = forward + backward."""
    code, out, err = run_cli("compute", "--model", "resnet50", "--batch-size", "32",
                             "--device", "h100", "--precision", "tf32", "--json")
    assert code == 0, err
    [row] = json.loads(out)
    assert set(row) >= FIELDS
    assert row["step_s"] == pytest.approx(row["forward_s"] + row["backward_s"])
    assert 0 < row["mfu"] < 1


@pytest.mark.parametrize(("args", "field"), [
    (["--model", "gpt9", "--batch-size", "1"], "model"),
    (["--model", "gpt2", "--batch-size", "1", "--device", "tpu"], "device"),
    (["--model", "gpt2", "--batch-size", "1", "--precision", "int8"], "precision"),
    (["--model", "gpt2", "--batch-size", "1", "--device", "v100", "--precision", "bf16"],
     "precision"),
    (["--model", "gpt2", "--batch-size", "0"], "batch-size"),
    (["--model", "gpt2", "--batch-size", "nan"], "batch-size"),
    (["--model", "gpt2", "--batch-size", "2.5"], "batch-size"),
    (["--model", "resnet50", "--batch-size", "1", "--no-lm-head"], "lm_head"),
])
def test_bad_input_is_one_line_exit_2(run_cli, args, field):
    """Unknown model/device/precision and bad batch sizes: exit 2, the field named."""
    code, _, err = run_cli("compute", *args)
    assert code == 2
    assert field in err and len(err.strip().splitlines()) == 1


MEASURED = [("resnet50", 32, "fp32", False, True, 43.8e-3),
            ("resnet50", 256, "tf32", False, True, 137.3e-3),
            ("resnet50", 256, "bf16", True, True, 64.1e-3),
            ("gpt2", 8, "bf16", False, False, 46.8e-3)]


@pytest.mark.parametrize(("model", "batch", "precision", "channels_last", "head", "step"),
                         MEASURED)
def test_calibration_cases_within_15_percent(model, batch, precision, channels_last, head,
                                             step):
    """What ``dlsched compute`` predicts for measured H100 steps is within 15%."""
    row = step_row(model, batch, "h100", precision, channels_last, head)
    assert abs(row["step_s"] / step - 1) < 0.15


def test_calibrate_writes_a_gpu_file_compute_reads(run_cli, tmp_path):
    """calibrate --out writes the fitted GPU; compute --device FILE predicts with it (the
    bundled H100 steps: every case within 15%)."""
    out = tmp_path / "fits" / "gpu.yaml"
    code, text, err = run_cli("compute", "calibrate", "--out", str(out), "--json")
    assert code == 0, err
    assert all(abs(case["error"]) < 0.15 for case in json.loads(text)["cases"])
    assert "wrote GPU file" in err
    code, text, err = run_cli("compute", "--model", "gpt2", "--no-lm-head", "--batch-size",
                              "8", "--precision", "bf16", "--device", str(out), "--json")
    assert code == 0, err
    assert json.loads(text)[0]["step_s"] == pytest.approx(46.8e-3, rel=0.15)


def test_calibrate_refuses_bad_cases_and_outputs(run_cli, tmp_path):
    """A precision the GPU does not run, or a non-YAML output: exit 2, nothing written."""
    bad = tmp_path / "m.yaml"
    bad.write_text("device: h100\ncases: [{model: resnet50, batch_size: 8, precision: fp8, "
                   "step: 1 ms}]\n")
    code, _, err = run_cli("compute", "calibrate", str(bad))
    assert code == 2 and "precision" in err
    code, _, err = run_cli("compute", "calibrate", "--out", str(tmp_path / "gpu.txt"))
    assert code == 2 and "--out" in err and not (tmp_path / "gpu.txt").exists()
