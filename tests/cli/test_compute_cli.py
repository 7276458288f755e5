"""``dlsched compute``: JSON fields, the calibration cases, and bad input."""

import json

import pytest

from dlsched.training.step import step_row

FIELDS = {"model", "batch_size", "device", "precision", "forward_s", "backward_s", "step_s",
          "mfu", "gpu_busy_s", "launch_bound"}


def test_json_rows_carry_the_fields(run_cli):
    """--json prints one row with the issue's fields; step = forward + backward."""
    code, out, err = run_cli("compute", "--model", "resnet50", "--batch-size", "32",
                             "--device", "h100", "--precision", "tf32", "--json")
    assert code == 0, err
    [row] = json.loads(out)["rows"]
    assert set(row) >= FIELDS
    assert row["step_s"] == pytest.approx(row["forward_s"] + row["backward_s"])
    assert 0 < row["mfu"] < 1
    assert 0 <= row["launch_bound"] < 1 and row["gpu_busy_s"] <= row["step_s"]


@pytest.mark.parametrize(("args", "field"), [
    (["--model", "gpt9", "--batch-size", "1"], "--model: unknown model 'gpt9'; accepted:"),
    (["--model", "gpt2", "--batch-size", "1", "--device", "tpu"],
     "--device: unknown GPU 'tpu'; accepted:"),
    (["--model", "gpt2", "--batch-size", "1", "--device", "no/such.yaml"],
     "--device: file 'no/such.yaml' does not exist"),
    (["--model", "gpt2", "--batch-size", "1", "--precision", "int8"],
     "--precision: 'int8' is not run by h100; accepted:"),
    (["--model", "gpt2", "--batch-size", "1", "--device", "v100", "--precision", "bf16"],
     "--precision: 'bf16' is not run by v100; accepted: fp32, fp16"),
    (["--model", "gpt2", "--batch-size", "0"], "--batch-size: "),
    (["--model", "gpt2", "--batch-size", "nan"], "--batch-size: nan is not a whole number"),
    (["--model", "gpt2", "--batch-size", "2.5"], "--batch-size: 2.5 is not a whole number"),
    (["--model", "resnet50", "--batch-size", "1", "--no-lm-head"], "--lm-head: only the GPT"),
])
def test_bad_input_is_one_line_exit_2(run_cli, args, field):
    """Unknown model/device/precision and bad batch sizes: exit 2, one line starting with
    the option (was the bare field for --device, --model, --precision, --batch-size: e.g.
    'device: unknown GPU')."""
    code, _, err = run_cli("compute", *args)
    assert code == 2
    assert err.startswith(f"error: {field}") and len(err.strip().splitlines()) == 1, err


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
    assert all(abs(case["error"]) < 0.15 for case in json.loads(text)["rows"])
    assert "wrote GPU file" in err
    code, text, err = run_cli("compute", "--model", "gpt2", "--no-lm-head", "--batch-size",
                              "8", "--precision", "bf16", "--device", str(out), "--json")
    assert code == 0, err
    assert json.loads(text)["rows"][0]["step_s"] == pytest.approx(46.8e-3, rel=0.15)


def test_calibrate_refuses_bad_cases_and_outputs(run_cli, tmp_path):
    """A precision the GPU does not run, or a non-YAML output: exit 2, nothing written."""
    bad = tmp_path / "m.yaml"
    bad.write_text("device: a100\ncases: [{model: resnet50, batch_size: 8, precision: fp8, "
                   "step: 1 ms}]\n")
    code, _, err = run_cli("compute", "calibrate", str(bad))
    assert code == 2 and "precision" in err
    code, _, err = run_cli("compute", "calibrate", "--out", str(tmp_path / "gpu.txt"))
    assert code == 2 and "--out" in err and not (tmp_path / "gpu.txt").exists()


def _steps(tmp_path, lines, constants=None):
    path = tmp_path / "m.yaml"
    head = "device: h100\n" + (f"constants: {constants}\n" if constants else "")
    path.write_text(head + "cases:\n" + "".join(f"  - {line}\n" for line in lines))
    return path


def test_calibrate_refuses_too_few_cases_and_impossible_times(run_cli, tmp_path):
    """One case for many constants, a 1 us ResNet-50 step (faster than the H100's peak
    allows), and a fit off by 100x: exit 2 with one line naming the problem, no GPU file
    written; --force lets the too-few-cases fit through."""
    out = tmp_path / "gpu.yaml"
    one = _steps(tmp_path, ["{model: resnet50, batch_size: 32, precision: fp32, step: 43 ms}"])
    code, _, err = run_cli("compute", "calibrate", str(one), "--out", str(out))
    assert code == 2 and "cases: 1 measured times" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
    code, _, err = run_cli("compute", "calibrate", str(one), "--out", str(out), "--force")
    assert code == 0, err
    fast = _steps(tmp_path, ["{model: resnet50, batch_size: 256, precision: bf16, step: 1 us}"])
    code, _, err = run_cli("compute", "calibrate", str(fast), "--force")
    assert code == 2 and "faster than the h100 peak allows" in err
    scattered = _steps(tmp_path, [
        "{model: resnet50, batch_size: 32, precision: fp32, step: 27.1 ms}",
        "{model: resnet50, batch_size: 32, precision: fp32, step: 2710 ms}",
        "{model: resnet50, batch_size: 32, precision: fp32, step: 271 ms}"],
        constants="[efficiency.conv.fp32]")
    code, _, err = run_cli("compute", "calibrate", str(scattered))
    assert code == 2 and "worst error" in err and "resnet50 b32 fp32" in err


def test_calibrate_out_may_not_be_its_input(run_cli, tmp_path):
    """--out naming the measurements file is refused before any work."""
    path = _steps(tmp_path, ["{model: resnet50, batch_size: 32, precision: fp32, step: 43 ms}"])
    before = path.read_text()
    code, _, err = run_cli("compute", "calibrate", str(path), "--out", str(path), "--force")
    assert code == 2 and "--out" in err and path.read_text() == before


def test_measure_out_may_not_be_its_base(run_cli, tmp_path):
    """``compute measure --base g.yaml --out g.yaml`` is refused before any kernel is timed
    (it would overwrite the GPU file it starts from)."""
    path = tmp_path / "g.yaml"
    path.write_text("name: g\n")
    code, _, err = run_cli("compute", "measure", "--device", "cpu", "--tiny", "--base",
                           str(path), "--out", str(path))
    assert code == 2 and "--out" in err and "--base" in err
    assert path.read_text() == "name: g\n"
