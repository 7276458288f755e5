"""The calibrated compute model: op times by hand, the fit recovering known constants, the
bundled presets against the measured and published steps they were fitted to."""

import math

import pytest

from dlsched.errors import ConfigError
from dlsched.hardware.gpu import get_gpu, gpu_from_data
from dlsched.models import CalibratedCompute, Op, calibrated, device_compute, get_model
from dlsched.models.calibration import Case, CaseSpec, fit_constants, load_measurements
from dlsched.models.zoo import model_names

TOY = {"name": "toy", "peak": {"fp32": 10e12, "tf32": 80e12, "bf16": 100e12},
       "memory_bandwidth": 1e12, "memory_efficiency": 0.5, "kernel_overhead": 10e-6,
       "efficiency": {"gemm": {"fp32": 0.8, "tf32": 0.5, "bf16": 0.4},
                      "attention": {"fp32": 0.8, "tf32": 0.5, "bf16": 0.4},
                      "conv": {"fp32": 0.6, "tf32": 0.3, "bf16": 0.2},
                      "elementwise": {"fp32": 1.0, "tf32": 1.0, "bf16": 1.0}}}


def toy(**changes):
    return gpu_from_data(TOY | changes, "toy")


def test_gemm_op_time_by_hand():
    """2e12 FLOP at 100 TFLOP/s x 0.4 = 50 ms, memory 4e9 B / 0.5 TB/s = 8 ms: compute
    bound, plus one kernel's 10 us; backward twice the work and kernels."""
    compute = CalibratedCompute(toy(), "bf16", autocast=False)
    op = Op("gemm", flops=1e12, elements=1e9, weights=0.0)
    assert compute.op_time(op, 2) == pytest.approx(0.050 + 10e-6)
    assert compute.op_time(op, 2, backward=True) == pytest.approx(0.100 + 20e-6)


def test_elementwise_op_is_memory_bound_by_hand():
    """1e9 elements x 2 passes x 4 B (fp32) = 8e9 B at 0.5 TB/s = 16 ms, 3 kernels."""
    compute = CalibratedCompute(toy(), "fp32")
    op = Op("elementwise", flops=1e9, elements=2e9, kernels=3)
    assert compute.op_time(op, 1) == pytest.approx(8e9 / 0.5e12 + 3 * 10e-6)


def test_autocast_adds_one_weight_cast_per_pass():
    """A 16-bit product under autocast also casts its weights (6 B per element, 1 kernel)."""
    gpu = toy()
    op = Op("gemm", flops=1e12, elements=0.0, weights=1e9)
    plain = CalibratedCompute(gpu, "bf16", autocast=False).op_time(op, 1)
    cast = CalibratedCompute(gpu, "bf16", autocast=True).op_time(op, 1)
    assert cast - plain == pytest.approx(6e9 / 0.5e12 + 10e-6)


def test_tensor_parallel_splits_only_split_ops():
    """Under TP 4 a split product costs 1/4, a repeated norm the same (without SP)."""
    gpu = toy(kernel_overhead=0.0)
    one, four = CalibratedCompute(gpu, "bf16"), CalibratedCompute(gpu, "bf16",
                                                                   tensor_parallel=4)
    gemm = Op("gemm", flops=1e12)
    norm = Op("elementwise", elements=1e9, split=False)
    assert four.op_time(gemm, 1) == pytest.approx(one.op_time(gemm, 1) / 4)
    assert four.op_time(norm, 1) == pytest.approx(one.op_time(norm, 1))
    sp = CalibratedCompute(gpu, "bf16", tensor_parallel=4, sequence_parallel=True)
    assert sp.op_time(norm, 1) == pytest.approx(one.op_time(norm, 1) / 4)


@pytest.mark.parametrize("name", model_names())
def test_zoo_ops_carry_the_layers_flops(name):
    """Every zoo model's ops add up to its layers' forward FLOP."""
    model = get_model(name)
    ops = sum(op.flops for layer in model.layers for op in layer.ops)
    assert ops == pytest.approx(sum(layer.forward_flops for layer in model.layers))


def test_fit_recovers_known_constants():
    """Steps predicted by a GPU with known constants are fitted back to those constants."""
    truth = toy(kernel_overhead=20e-6, memory_efficiency=0.7)
    specs = [CaseSpec(model="resnet50", batch_size=b, precision=p, step=1.0)
             for b in (8, 64, 256) for p in ("fp32", "bf16")]
    specs += [CaseSpec(model="gpt2", lm_head=False, batch_size=b, precision=p, step=1.0)
              for b in (1, 8) for p in ("fp32", "bf16")]
    cases = []
    for spec in specs:
        model = get_model(spec.model, lm_head=spec.lm_head)
        step = sum(Case(spec, model, (1.0,)).predict(truth))
        cases.append(Case(spec.model_copy(update={"step": step}), model, (step,)))
    fit = fit_constants(toy(), cases)
    assert fit.worst_error() < 1e-4
    spec = fit.gpu.spec
    assert spec.kernel_overhead == pytest.approx(20e-6, rel=1e-3)
    assert spec.memory_efficiency == pytest.approx(0.7, rel=1e-3)
    assert spec.efficiency["gemm"].bf16 == pytest.approx(0.4, rel=1e-3)
    assert spec.efficiency["conv"].fp32 == pytest.approx(0.6, rel=1e-3)


@pytest.mark.parametrize("bundle", [None, "a100", "v100"])
def test_presets_reproduce_the_steps_they_were_fitted_to(bundle):
    """The bundled h100 preset predicts every measured H100 step within 15% (each
    precision), and the a100/v100 presets the published ResNet-50 throughputs within 2%."""
    from importlib import resources

    path = None if bundle is None else resources.files("dlsched").joinpath(
        f"presets/calibration-{bundle}.yaml")
    data = load_measurements(path)
    limit = 0.15 if bundle is None else 0.02
    for case in data.cases:
        predicted = sum(case.predict(data.gpu))
        assert abs(predicted / case.measured[0] - 1) < limit, case.spec.label()


def test_named_devices_and_errors():
    """Preset names with precisions; unknown ones list what is accepted."""
    assert calibrated("h100-tf32").precision == "tf32"
    assert calibrated("v100").precision == "fp16"
    assert calibrated("v100-amp").precision == "fp16"
    assert device_compute("a100", efficiency=0.5).peak_flops == 312e12
    with pytest.raises(ConfigError, match="h100"):
        device_compute("tpu9")
    with pytest.raises(ConfigError, match="accepted: fp32, fp16"):
        calibrated("v100", "tf32")
    with pytest.raises(ConfigError, match="efficiency"):
        gpu_from_data(TOY | {"efficiency": {"gemm": TOY["efficiency"]["gemm"]}}, "bad")


def test_every_preset_constant_has_a_source():
    """Every constant of every preset is named by one of its sources (key or text)."""
    constants = ("peak", "memory_bandwidth", "memory_efficiency", "kernel_overhead",
                 "nchw_half_conv_efficiency", "efficiency.gemm", "efficiency.conv",
                 "efficiency.elementwise", "attention")
    for name in ("v100", "a100", "h100"):
        sources = get_gpu(name).spec.sources
        text = " ".join(f"{key} {value}" for key, value in sources.items())
        missing = [c for c in constants if c not in text]
        assert not missing, (name, missing)


def test_mfu_is_model_flops_over_peak_time():
    """MFU of a step = 3 x forward FLOP / (step x peak)."""
    from dlsched.models.compute import mfu, training_flops

    model = get_model("gpt2")
    flops = training_flops(model, 4)
    assert flops == pytest.approx(12 * sum(layer.forward_flops for layer in model.layers))
    assert mfu(flops, 2.0, 1, flops) == pytest.approx(0.5)
    with pytest.raises(ConfigError):
        mfu(flops, math.nan, 1, 1e12)


def test_cases_from_forward_backward_and_a_profile(tmp_path):
    """A case may give forward and backward, or a dlsched per-layer profile whose layers'
    times are summed; each is fitted as two quantities."""
    (tmp_path / "p.csv").write_text("name,params,forward_time_s,backward_time_s\n"
                                    "a,1,0.010,0.020\nb,1,0.005,0.010\n")
    (tmp_path / "m.yaml").write_text(
        "device: h100\nconstants: [efficiency.gemm.bf16]\ncases:\n"
        "  - {model: gpt2, lm_head: false, batch_size: 8, precision: bf16, profile: p.csv}\n"
        "  - {model: gpt2, lm_head: false, batch_size: 8, precision: bf16, forward: 15 ms,"
        " backward: 30 ms}\n")
    data = load_measurements(tmp_path / "m.yaml")
    assert data.cases[0].measured == pytest.approx((0.015, 0.030))
    assert data.cases[1].measured == pytest.approx((0.015, 0.030))
    fit = fit_constants(data.gpu, data.cases, data.source, data.constants)
    assert [label.split()[-1] for label, _, _ in fit.steps] == ["forward", "backward"] * 2
    (tmp_path / "bad.yaml").write_text(
        "device: h100\ncases: [{model: gpt2, batch_size: 8, precision: bf16, step: 1 ms,"
        " forward: 1 ms, backward: 2 ms}]\n")
    with pytest.raises(ConfigError, match="exactly one of"):
        load_measurements(tmp_path / "bad.yaml")


@pytest.mark.parametrize("device", ["v100", "a100", "h100"])
def test_every_zoo_model_runs_below_peak(device):
    """Every zoo model in every precision of every preset: a finite positive step whose MFU
    stays below 1 (no op beats its kind's peak)."""
    from dlsched.models.compute import mfu, training_flops

    gpu = get_gpu(device)
    for name in model_names():
        model = get_model(name)
        for precision in gpu.precisions():
            compute = CalibratedCompute(gpu, precision)
            forward, backward = compute.layer_times(model, 4)
            step = sum(forward) + sum(backward)
            assert math.isfinite(step) and step > 0, (name, precision)
            assert mfu(training_flops(model, 4), step, 1, compute.peak_flops) < 1.0
