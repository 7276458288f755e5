"""The calibrated compute model: op times by hand, the fit recovering known constants, the
bundled presets against the measured and published steps they were fitted to."""

import math

import pytest

from dlsched.errors import ConfigError
from dlsched.hardware.gpu import get_gpu, gpu_from_data
from dlsched.models import CalibratedCompute, Op, calibrated, device_compute, get_model
from dlsched.models.calibration import Case, CaseSpec, fit_constants, load_measurements
from dlsched.models.zoo import model_names

TOY = {"name": "toy", "peak": {"fp32": 10e12, "tf32": 80e12, "bf16": 100e12}, "sms": 132,
       "memory_bandwidth": 1e12, "memory_efficiency": 0.5, "transpose_efficiency": 0.25,
       "kernel_overhead": 10e-6, "backward_overhead": 5e-6,
       "efficiency": {"gemm": {"fp32": 0.8, "tf32": 0.5, "bf16": 0.4},
                      "attention": {"fp32": 0.8, "tf32": 0.5, "bf16": 0.4},
                      "conv": {"fp32": 0.6, "tf32": 0.3, "bf16": 0.2},
                      "elementwise": {"fp32": 1.0, "tf32": 1.0, "bf16": 1.0}}}


def toy(**changes):
    return gpu_from_data(TOY | changes, "toy")


def test_gemm_op_time_by_hand():
    """2e12 FLOP at 100 TFLOP/s x 0.4 = 50 ms, memory 4e9 B / 0.5 TB/s = 8 ms: compute
    bound; alone, its one kernel waits for its 10 us launch. Backward: twice the work in two
    kernels launched 5 us apart (the first after 5 us)."""
    compute = CalibratedCompute(toy(), "bf16", autocast=False)
    op = Op("gemm", flops=1e12, elements=1e9, weights=0.0)
    assert compute.op_time(op, 2) == pytest.approx(0.050 + 10e-6)
    assert compute.op_time(op, 2, backward=True) == pytest.approx(0.100 + 5e-6)


def test_elementwise_op_is_memory_bound_by_hand():
    """1e9 elements x 2 passes x 4 B (fp32) = 8e9 B at 0.5 TB/s = 16 ms in 3 kernels."""
    compute = CalibratedCompute(toy(), "fp32")
    op = Op("elementwise", flops=1e9, elements=2e9, kernels=3)
    work = compute.work(op, 1)
    assert work.gpu_s == pytest.approx(8e9 / 0.5e12) and work.launches == 3


def test_autocast_casts_weights_and_fp32_inputs():
    """A 16-bit product under autocast also casts its weights (6 B per element, 1 kernel);
    one marked cast_input also its FP32 input (m x k elements per sample)."""
    gpu = toy()
    op = Op("gemm", flops=1e12, elements=0.0, weights=1e9)
    plain = CalibratedCompute(gpu, "bf16", autocast=False).work(op, 1)
    cast = CalibratedCompute(gpu, "bf16", autocast=True).work(op, 1)
    assert cast.gpu_s - plain.gpu_s == pytest.approx(6e9 / 0.5e12)
    assert cast.launches - plain.launches == 1
    wide = Op("gemm", flops=1e12, weights=0.0, shape=(1000, 64, 512, 0), cast_input=True)
    extra = (CalibratedCompute(gpu, "bf16").work(wide, 4).gpu_s
             - CalibratedCompute(gpu, "bf16", autocast=False).work(wide, 4).gpu_s)
    assert extra == pytest.approx(1000 * 512 * 4 * 6 / 0.5e12)


def test_nchw_conversion_is_priced_as_its_traffic():
    """A bf16 convolution in NCHW reads and writes its input and output once more (2 B per
    element each way) at the transpose rate, twice that in the backward, with no launch of
    its own; fp32 and channels-last pay nothing."""
    gpu = toy()
    op = Op("conv", flops=1e9, elements=0.0, weights=0.0, shape=(64, 128, 3, 56, 28))
    moved = 2 * 2 * (64 * 56 * 56 + 128 * 28 * 28) * 8 / (1e12 * 0.25)
    nchw, nhwc = (CalibratedCompute(gpu, "bf16", channels_last=cl, autocast=False)
                  for cl in (False, True))
    for backward, scale in ((False, 1), (True, 2)):
        gap = nchw.work(op, 8, backward).gpu_s - nhwc.work(op, 8, backward).gpu_s
        assert gap == pytest.approx(scale * moved)
        assert nchw.work(op, 8, backward).launches == nhwc.work(op, 8, backward).launches
    fp32 = CalibratedCompute(gpu, "fp32", channels_last=False)
    assert fp32.work(op, 8).gpu_s == CalibratedCompute(gpu, "fp32", channels_last=True).work(
        op, 8).gpu_s


def test_tile_and_wave_quantization_by_hand():
    """132 tiles of 128x128 fill one wave of 132 SMs; 133 tiles need a second wave (K too
    short to split): 133 / 264 of the rate. A 128x128 output with a long K is split into 32
    slices: 32 of 132 SMs busy. Tile efficiency: reuse relative to 128x128's, capped."""
    from dlsched.models.kernels import attention_utilization, gemm_utilization, tile_efficiency

    assert gemm_utilization(128 * 132, 128, 4096, 1, 132) == pytest.approx(1.0)
    assert gemm_utilization(128 * 133, 128, 128, 1, 132) == pytest.approx(133 / 264, rel=0.01)
    assert gemm_utilization(128, 128, 10**6, 1, 132) == pytest.approx(32 / 132)
    assert (tile_efficiency(64, 64), tile_efficiency(128, 128), tile_efficiency(256, 128)) == (
        0.5, 1.0, 1.0)
    # 8 query blocks x 96 (sample, head) problems = 768 blocks in 6 waves of 132.
    assert attention_utilization(1024, 96, 132) == pytest.approx(768 / (6 * 132))


def test_launches_overlap_the_gpu_along_the_chain():
    """Ten 1 us kernels launched 10 us apart end 1 us after the last launch (GPU starved
    91 us); ten 100 us kernels end 10 us + 1 ms after the start (launches hidden)."""
    from dlsched.models.timeline import Clock, Work

    short = Clock()
    assert short.span([Work(1e-6, 1)] * 10, 10e-6) == pytest.approx(101e-6)
    assert short.idle == pytest.approx(91e-6)
    long = Clock()
    assert long.span([Work(100e-6, 1)] * 10, 10e-6) == pytest.approx(1010e-6)
    assert long.idle == pytest.approx(10e-6)


def test_a_step_is_bounded_by_the_max_and_the_sum():
    """A whole step lies between max(GPU busy, host launch time) and their sum; its layers'
    times add up to it."""
    compute = calibrated("h100", "bf16")
    model = get_model("bert-base")
    step = compute.step(model, 8)
    ops = [op for layer in model.layers
           for op in layer.ops or (Op("gemm", layer.forward_flops, kernels=0),)]
    works = [compute.work(op, 8, backward) for op in ops for backward in (False, True)]
    host = sum(w.launches for w in works[0::2]) * compute.gpu.spec.kernel_overhead + sum(
        w.launches for w in works[1::2]) * compute.gpu.spec.backward_overhead
    gpu = sum(w.gpu_s for w in works)
    assert step.gpu_busy_s == pytest.approx(gpu)
    assert max(gpu, host) <= step.step_s * (1 + 1e-9) <= gpu + host
    assert sum(compute.layer_times(model, 8)[0]) == pytest.approx(sum(step.forward))
    assert 0 < step.launch_bound < 1


def test_tensor_parallel_splits_only_split_ops():
    """Under TP 4 a split product costs 1/4, a repeated norm the same (without SP)."""
    gpu = toy(kernel_overhead=0.0)
    one, four = CalibratedCompute(gpu, "bf16"), CalibratedCompute(gpu, "bf16",
                                                                   tensor_parallel=4)
    gemm = Op("gemm", flops=1e12)
    norm = Op("elementwise", elements=1e9, split=False)
    assert four.work(gemm, 1).gpu_s == pytest.approx(one.work(gemm, 1).gpu_s / 4)
    assert four.work(norm, 1).gpu_s == pytest.approx(one.work(norm, 1).gpu_s)
    sp = CalibratedCompute(gpu, "bf16", tensor_parallel=4, sequence_parallel=True)
    assert sp.work(norm, 1).gpu_s == pytest.approx(one.work(norm, 1).gpu_s / 4)


def test_fp8_gemms_run_at_the_fp8_rate_with_their_casts():
    """On h100 in fp8 a large GEMM runs at the fp8 rate (its own fraction of a peak twice as
    high as bf16's) plus Transformer Engine's casts; attention keeps bf16's rate; the A100 has no
    FP8. Check against vLLM's H100 measurement (PR 49363, M=128, N=12288, K=5376, weights
    pre-quantized): FP8 was 1.65x BF16; the model says 1.94x (memory-bound at that M, FP8
    halving the weight bytes), within 20%."""
    from dlsched.models.ops import matmul

    bf16, fp8 = calibrated("h100", "bf16", autocast=False), calibrated("h100", "fp8",
                                                                      autocast=False)
    big = matmul("big", 8192, 8192, 8192, bias=False)
    casts = (8192 * 8192 + 8192 * 8192) * 4 / fp8.gpu.memory_rate  # input and weight
    speedup = 2 * fp8.gpu.efficiency("gemm", "fp8") / bf16.gpu.efficiency("gemm", "bf16")
    assert fp8.work(big, 1).gpu_s == pytest.approx(bf16.work(big, 1).gpu_s / speedup + casts,
                                                   rel=0.01)
    assert fp8.work(big, 1).launches == bf16.work(big, 1).launches + 2
    attention = Op("attention", 1e12, shape=(1024, 1024, 16, 0))
    assert fp8.work(attention, 8).gpu_s == bf16.work(attention, 8).gpu_s
    vllm = matmul("vllm", 5376, 12288, 128, bias=False)  # pre-quantized: no casts timed
    casts = (128 * 5376 + 5376 * 12288) * 4 / fp8.gpu.memory_rate
    gemm_fp8 = fp8.work(vllm, 1).gpu_s - casts
    assert bf16.work(vllm, 1).gpu_s / gemm_fp8 == pytest.approx(1.65, rel=0.2)
    with pytest.raises(ConfigError, match="precision"):
        calibrated("a100", "fp8")


@pytest.mark.parametrize("name", model_names())
def test_zoo_ops_carry_the_layers_flops(name):
    """Every zoo model's ops add up to its layers' forward FLOP."""
    model = get_model(name)
    ops = sum(op.flops for layer in model.layers for op in layer.ops)
    assert ops == pytest.approx(sum(layer.forward_flops for layer in model.layers))


def test_fit_recovers_known_constants():
    """Steps predicted by a GPU with known constants are fitted back to those constants."""
    truth = toy(memory_efficiency=0.7)
    specs = [CaseSpec(model="resnet50", batch_size=b, precision=p, step=1.0)
             for b in (8, 64, 256) for p in ("fp32", "bf16")]
    specs += [CaseSpec(model="gpt2", lm_head=False, batch_size=b, precision=p, step=1.0)
              for b in (1, 8) for p in ("fp32", "bf16")]
    cases = []
    for spec in specs:
        model = get_model(spec.model, lm_head=spec.lm_head)
        step = sum(Case(spec, model, (1.0,)).predict(truth))
        cases.append(Case(spec.model_copy(update={"step": step}), model, (step,)))
    fit = fit_constants(toy(), cases, constants=(
        "memory_efficiency", "efficiency.gemm.bf16", "efficiency.conv.fp32"))
    assert fit.worst_error() < 2e-3
    spec = fit.gpu.spec
    assert spec.memory_efficiency == pytest.approx(0.7, rel=2e-2)
    assert spec.efficiency["gemm"].bf16 == pytest.approx(0.4, rel=2e-2)
    assert spec.efficiency["conv"].fp32 == pytest.approx(0.6, rel=2e-2)


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
    assert calibrated("v100-fp16").precision == "fp16"
    with pytest.raises(ConfigError, match="v100-amp"):
        calibrated("v100-amp")  # the pre-0.1.0 spelling of v100-fp16 is gone
    assert device_compute("a100", efficiency=0.5).peak_flops == 312e12
    with pytest.raises(ConfigError, match="h100"):
        device_compute("tpu9")
    with pytest.raises(ConfigError, match="accepted: fp32, fp16"):
        calibrated("v100", "tf32")
    with pytest.raises(ConfigError, match="efficiency"):
        gpu_from_data(TOY | {"efficiency": {"gemm": TOY["efficiency"]["gemm"]}}, "bad")


def test_every_preset_constant_has_a_source():
    """Every constant of every preset is named by one of its sources (key or text)."""
    constants = ("peak", "sms", "memory_bandwidth", "memory_efficiency", "kernel_overhead",
                 "backward_overhead", "transpose_efficiency", "efficiency.gemm",
                 "efficiency.conv", "efficiency.elementwise", "efficiency.attention")
    for name in ("v100", "a100", "h100", "h200"):
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


@pytest.mark.parametrize("device", ["v100", "a100", "h100", "h200"])
def test_every_zoo_model_runs_below_peak(device):
    """Every zoo model in every precision of every preset: a finite positive step whose MFU
    stays below 1 (no op beats its kind's peak; in FP32 below Winograd's 2.25)."""
    from dlsched.models.compute import mfu, training_flops

    gpu = get_gpu(device)
    for name in model_names():
        model = get_model(name)
        for precision in gpu.precisions():
            compute = CalibratedCompute(gpu, precision)
            forward, backward = compute.layer_times(model, 4)
            step = sum(forward) + sum(backward)
            assert math.isfinite(step) and step > 0, (name, precision)
            # FP32 3x3 convolutions run Winograd's algorithm: 2.25x fewer multiplies.
            bound = 2.25 if precision == "fp32" else 1.0
            assert mfu(training_flops(model, 4), step, 1, compute.peak_flops) < bound


def test_repeated_blocks_run_at_the_pace_of_the_slower_of_gpu_and_host():
    """A block run back to back: max(GPU seconds, launches x the host's overhead). A large
    GEMM after small elementwise kernels: GPU-bound, the small kernels' launches hidden, so
    less than the same layers priced from an idle host each; a block of tiny kernels: host-
    bound, one launch overhead per kernel."""
    from dlsched.models.layer import Layer

    compute = calibrated("h100", "bf16", autocast=False)
    small = Op("elementwise", elements=1e4, kernels=3)
    big = Op("gemm", 2 * 8192**3, shape=(8192, 8192, 8192, 0))
    layers = [Layer("norm", 0, ops=(small,)), Layer("mm", 0, ops=(big,))]
    works = [compute.work(op, 1) for op in (small, big)]
    gpu = sum(work.gpu_s for work in works)
    host = sum(work.launches for work in works) * 77.44e-6
    assert gpu > host
    assert compute.repeated_time(layers, 1, False) == pytest.approx(gpu, rel=1e-12)
    alone = sum(compute.forward_time(layer, 1) for layer in layers)
    assert compute.repeated_time(layers, 1, False) < alone
    tiny = [Layer(f"t{k}", 0, ops=(small,)) for k in range(4)]
    assert compute.repeated_time(tiny, 1, False) == pytest.approx(4 * 3 * 77.44e-6, rel=1e-12)
    backward = compute.repeated_time(tiny, 1, True)
    launches = sum(compute.work(small, 1, True).launches for _ in tiny)
    assert backward == pytest.approx(max(launches * 23.81e-6, 4 * compute.work(
        small, 1, True).gpu_s), rel=1e-12)
