"""Compute model arithmetic and per-layer profile loading."""

import json

import pytest

from dlsched.errors import ConfigError
from dlsched.models import ComputeModel, Layer, Model, device_compute, load_profile


def test_forward_time_is_flops_over_effective_peak_and_backward_twice():
    """1e12 FLOP/sample x 4 samples at 100 TFLOP/s x 0.5 = 80 ms; backward 160 ms."""
    compute = ComputeModel(100e12, 0.5)
    layer = Layer("l", 10, forward_flops=1e12)
    assert compute.forward_time(layer, 4) == pytest.approx(0.08)
    assert compute.backward_time(layer, 4) == pytest.approx(0.16)


def test_profiled_times_win_over_flops():
    """A layer's measured times are used as they are."""
    compute = ComputeModel(1e12)
    model = Model("m", (Layer("a", 1, 1e9, forward_time=0.003, backward_time=0.005),))
    assert compute.layer_times(model, 32) == ([0.003], [0.005])


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"peak_flops": 0}, "peak_flops"), ({"peak_flops": 1e12, "efficiency": 1.5}, "efficiency"),
])
def test_bad_compute_model(kwargs, field):
    """Bad device numbers name the field."""
    with pytest.raises(ConfigError, match=field):
        ComputeModel(**kwargs)


@pytest.mark.parametrize(("device", "channels_last", "images_per_s"),
                         [("v100-fp32", False, 356), ("v100-fp16", True, 1156)])
def test_calibrated_devices_reproduce_their_published_throughput(device, channels_last,
                                                                 images_per_s):
    """ResNet-50 at batch 256 trains at the published img/s the v100 preset was fitted to
    (within 2%): batch / (forward + backward)."""
    from dlsched.models import calibrated, get_model

    compute = calibrated(device, channels_last=channels_last)
    forward, backward = compute.layer_times(get_model("resnet50"), 256)
    assert 256 / (sum(forward) + sum(backward)) == pytest.approx(images_per_s, rel=0.02)


def test_backward_ratio_applies_to_an_explicit_efficiency():
    """With --efficiency the user's model is peak x efficiency, backward = ratio x forward."""
    from dlsched.models import get_model

    model = get_model("resnet50")
    compute = device_compute("v100-fp32", efficiency=0.5, backward_ratio=1.5)
    forward, backward = compute.layer_times(model, 32)
    assert compute.peak_flops == 15.7e12
    assert sum(backward) == pytest.approx(1.5 * sum(forward))
    flops = 32 * sum(layer.forward_flops for layer in model.layers)
    assert sum(forward) == pytest.approx(flops / (15.7e12 * 0.5))


def test_named_device():
    """Named accelerators; unknown ones list the accepted names."""
    assert device_compute("a100").peak_flops == 312e12
    with pytest.raises(ConfigError, match="h100"):
        device_compute("tpu9")


def test_csv_profile(tmp_path):
    """CSV rows become layers with measured times."""
    path = tmp_path / "net.csv"
    path.write_text("name,params,forward_time_s,backward_time_s\nfc1,100,0.001,0.002\n"
                    "fc2,50,0.0005,0.001\n")
    model = load_profile(path)
    assert [layer.name for layer in model.layers] == ["fc1", "fc2"]
    assert model.layers[1].backward_time == 0.001
    assert model.num_params == 150


def test_json_profile_and_errors(tmp_path):
    """JSON profiles load; a negative time names the row and field."""
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"name": "x", "layers": [
        {"name": "a", "params": 1, "forward_time_s": 0.1, "backward_time_s": 0.2}]}))
    assert load_profile(path).name == "x"
    path.write_text(json.dumps({"layers": [
        {"name": "a", "params": 1, "forward_time_s": -0.1, "backward_time_s": 0.2}]}))
    with pytest.raises(ConfigError, match=r"layers\[0\]\.forward_time_s"):
        load_profile(path)
