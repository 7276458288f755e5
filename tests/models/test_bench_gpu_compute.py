"""The GPU benchmark's parts that need no GPU: its cases, preset choice, the section it
writes, and the skip without a GPU."""

import pytest
from benchmarks import bench_gpu_compute as bench


def test_cases_cover_every_precision_and_channels_last_for_convolutions():
    """Each model runs fp32, tf32, bf16 at each batch; convolutional ones also bf16 NHWC."""
    cases = bench.cases(["resnet50", "gpt2"])
    assert len(cases) == 2 * 4 + 1 * 3
    assert all(not c.channels_last for c in cases if c.model == "gpt2")
    assert {c.precision for c in cases} == {"fp32", "tf32", "bf16"}


@pytest.mark.parametrize(("name", "preset"), [("NVIDIA H100 80GB HBM3", "h100"),
                                              ("NVIDIA H200", "h200"),
                                              ("NVIDIA A100-SXM4-80GB", "a100"),
                                              ("Tesla V100-SXM2-32GB", "v100"),
                                              ("NVIDIA B300 SXM6 AC", "b300"),
                                              ("NVIDIA GB300", "gb300"),
                                              ("NVIDIA B200", "b200"),
                                              ("NVIDIA GB200", "gb200"),
                                              ("NVIDIA GeForce RTX 4090", None)])
def test_preset_from_device_name(name, preset):
    """The calibrated preset follows the CUDA device name; unknown GPUs get none."""
    assert bench.preset_for(name) == preset


def test_fitted_cases_are_predicted_as_the_preset_says():
    """The prediction of a fitted case is the calibrated step (GPT-2 without its head)."""
    row = bench.predicted(bench.Case("gpt2", 8, "bf16"), "h100")
    assert row["step_s"] == pytest.approx(46.8e-3, rel=0.15)


def test_section_names_device_and_counts_held_out():
    """The section names the device and says how many held-out cases are within 25%."""
    rows = [{"case": "a", "measured_s": 0.1, "predicted_s": 0.11, "error": 0.1, "fitted": True},
            {"case": "b", "measured_s": 0.1, "predicted_s": 0.14, "error": 0.4, "fitted": False}]
    text = bench.section("NVIDIA H100", "h100", rows)
    assert "NVIDIA H100" in text and "| b | 100.0 | 140.0 | +40.0 | no |" in text
    assert "0 of 1 within 25%" in text


def test_skips_without_a_gpu(monkeypatch, capsys):
    """Without CUDA the benchmark says why and writes nothing."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(bench, "write_section", lambda *a: pytest.fail("wrote a section"))
    monkeypatch.setattr("sys.argv", ["bench_gpu_compute"])
    bench.main()
    assert "skipped: no CUDA GPU" in capsys.readouterr().out
