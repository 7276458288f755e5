"""``dlsched compute measure``: the fit recovering known constants from the grid, and the
command's mechanics end to end on torch's CPU build (the CUDA path where a GPU is present)."""

import json

import pytest

from dlsched.hardware.gpu import get_gpu, gpu_from_data
from dlsched.models.measure import fit_grid, grid, predicted


def test_fit_recovers_the_constants_that_timed_the_grid():
    """Timings the model gives a GPU with known constants are fitted back to them, class by
    class (launch overheads, memory, GEMM, convolution, transpose, attention)."""
    base = get_gpu("h100")
    data = base.spec.model_dump()
    data.update(memory_efficiency=0.8, transpose_efficiency=0.3, kernel_overhead=12e-6,
                backward_overhead=30e-6)
    data["efficiency"]["gemm"].update(fp32=0.7, tf32=0.55, bf16=0.65)
    data["efficiency"]["conv"].update(fp32=0.35, tf32=0.5, bf16=0.6)
    data["efficiency"]["attention"].update(bf16=0.45)
    truth = gpu_from_data(data, "truth")
    kernels = grid(("fp32", "tf32", "bf16"), tiny=False)
    fitted, names = fit_grid(base, [(k, predicted(truth, k)) for k in kernels], "test")
    spec = fitted.spec
    assert spec.kernel_overhead == pytest.approx(12e-6)
    assert spec.backward_overhead == pytest.approx(30e-6)
    assert spec.memory_efficiency == pytest.approx(0.8, rel=1e-3)
    assert spec.transpose_efficiency == pytest.approx(0.3, rel=1e-3)
    for kind, precision, value in (("gemm", "tf32", 0.55), ("gemm", "bf16", 0.65),
                                   ("conv", "fp32", 0.35), ("conv", "bf16", 0.6),
                                   ("attention", "bf16", 0.45)):
        assert getattr(spec.efficiency[kind], precision) == pytest.approx(value, rel=1e-3)
    assert "efficiency.gemm.fp8" not in names  # not timed: the base's value is kept
    assert spec.efficiency["gemm"].fp8 == base.spec.efficiency["gemm"].fp8
    assert all("compute measure" in spec.sources[name] for name in names)


def test_measure_on_cpu_writes_a_gpu_file_compute_reads(run_cli, tmp_path):
    """On torch's CPU build the tiny grid runs end to end: every kernel class timed and
    fitted, a GPU file written that ``compute --device`` accepts, JSON rows."""
    pytest.importorskip("torch")
    out = tmp_path / "my-cpu.yaml"
    code, text, err = run_cli("compute", "measure", "--device", "cpu", "--tiny", "--out",
                              str(out), "--json")
    assert code == 0, err
    result = json.loads(text)
    assert {row["kernel"] for row in result["rows"]} == {
        "launch", "elementwise", "gemm", "conv", "attention"}
    assert all(row["measured_s"] > 0 and row["predicted_s"] > 0 for row in result["rows"])
    assert {"kernel_overhead", "memory_efficiency", "transpose_efficiency",
            "efficiency.gemm.fp32", "efficiency.conv.bf16"} <= set(result["fitted"])
    code, text, err = run_cli("compute", "--model", "resnet50", "--batch-size", "2",
                              "--device", str(out), "--precision", "fp32", "--json")
    assert code == 0, err
    assert json.loads(text)["rows"][0]["device"] == "my-cpu"


def test_measure_refuses_bad_devices_and_outputs(run_cli, tmp_path):
    """An unknown --device or a non-YAML --out: exit 2 in one line, nothing written."""
    code, _, err = run_cli("compute", "measure", "--device", "tpu", "--out",
                           str(tmp_path / "g.yaml"))
    assert code == 2 and "--device" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli("compute", "measure", "--device", "cpu", "--out",
                           str(tmp_path / "g.txt"))
    assert code == 2 and "--out" in err and not (tmp_path / "g.txt").exists()


def test_measure_on_cuda(run_cli, tmp_path):
    """Where a CUDA GPU is present, the tiny grid runs on it and the file names its preset's
    peaks; skipped elsewhere."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU here")
    out = tmp_path / "gpu.yaml"
    code, text, err = run_cli("compute", "measure", "--device", "cuda", "--tiny", "--out",
                              str(out), "--json")
    assert code == 0, err
    assert json.loads(text)["gpu"]["sms"] >= 1


def test_a_tiny_fitted_fraction_is_written_as_a_valid_one():
    """A fraction fitted far below 1 (a CPU against a GPU's peaks) keeps 4 significant
    digits in the GPU file, not 4 decimals that would round it to an invalid 0."""
    from dlsched.models.calibration import gpu_document

    data = get_gpu("h100").spec.model_dump()
    data.update(transpose_efficiency=3.21e-6)
    data["efficiency"]["gemm"]["fp32"] = 1.234567e-7
    document = gpu_document(gpu_from_data(data, "tiny"))
    assert document["transpose_efficiency"] == 3.21e-6
    assert document["efficiency"]["gemm"]["fp32"] == 1.235e-7
    assert gpu_from_data(document, "again").spec.transpose_efficiency == 3.21e-6
