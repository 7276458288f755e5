"""Device graphs: presets, the three file forms, validation errors and the device ordering."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dlsched.errors import ConfigError
from dlsched.hardware.device_config import device_preset_names, devices_from_data, load_devices
from dlsched.hardware.device_graph import DeviceGraph, graph_from_topology
from dlsched.hardware.topology_config import load_topology
from dlsched.pipeline.planners.ordering import device_order


@pytest.mark.parametrize("name", device_preset_names())
def test_presets_load(name: str) -> None:
    """Every preset builds a graph with positive links between distinct GPUs."""
    graph = load_devices(name)
    off = ~np.eye(graph.num_devices, dtype=bool)
    assert (graph.bandwidth[off] > 0).all()


def test_two_servers_preset_has_nic_between() -> None:
    """"2 servers x 8 GPUs, NVLink inside, 100 Gb/s between": 12.5 GB/s across servers."""
    graph = load_devices("2x8-NVLink-100Gb")
    assert graph.num_devices == 16
    assert graph.bandwidth[0, 1] == 300e9
    assert graph.bandwidth[0, 8] == 12.5e9
    assert graph.transfer_time(0, 8, 12.5e9) == pytest.approx(1.0 + 10e-6)
    assert graph.transfer_time(3, 3, 1e9) == 0.0


def test_graph_from_topology_uses_outermost_differing_dimension() -> None:
    """HGX: NPUs 0-7 share the NVSwitch dimension, NPU 8 is one leaf switch away."""
    graph = graph_from_topology(load_topology("HGX-H100-like_SW_SW_SW"), 16)
    assert graph.bandwidth[0, 7] == 450e9
    assert graph.bandwidth[0, 8] == 50e9
    assert graph.latency[0, 8] == pytest.approx(1700e-9)


def test_matrix_form_from_json(tmp_path) -> None:
    """The matrix form with units parses; the diagonal is ignored."""
    path = tmp_path / "g.json"
    path.write_text(json.dumps({
        "name": "three", "devices": [
            {"name": "a", "flops": "100 TFLOP/s", "memory": "16 GiB"},
            {"name": "b", "flops": "100 TFLOP/s", "memory": "16 GiB"},
            {"name": "c", "flops": "50 TFLOP/s", "memory": "16 GiB", "server": 1}],
        "bandwidth": [[0, "100 GB/s", "10 Gb/s"], ["100 GB/s", 0, "10 Gb/s"],
                      ["10 Gb/s", "10 Gb/s", 0]],
        "latency": [[0, "1 us", "5 us"], ["1 us", 0, "5 us"], ["5 us", "5 us", 0]]}))
    graph = load_devices(path)
    assert graph.devices[2].flops == 50e12
    assert graph.bandwidth[0, 2] == 1.25e9
    assert graph.latency[1, 2] == pytest.approx(5e-6)


@pytest.mark.parametrize("field", ["overhead", "transfer_overhead"])
def test_overheads_in_every_form(field: str) -> None:
    """``overhead`` per action and ``transfer_overhead`` per transfer ("1.5 ms") reach each
    GPU in the servers, matrix and topology forms; 0 when not given."""
    gpu = {"flops": "1 TFLOP/s", "memory": "1 GiB", field: "1.5 ms"}
    servers = devices_from_data({"servers": [
        {"count": 2, "gpu": gpu, "link": {"bandwidth": "1 GB/s"}},
        {"count": 1, "gpu": {"flops": 1e12, "memory": 2**30}, "link": {"bandwidth": 1e9}}],
        "inter": {"bandwidth": 1e9}})
    assert [getattr(d, field) for d in servers.devices] == pytest.approx([1.5e-3, 1.5e-3, 0.0])
    matrix = devices_from_data({"devices": [{"name": "a", **gpu}, {"name": "b", **gpu}],
                                "bandwidth": [[0, 1e9], [1e9, 0]]})
    assert [getattr(d, field) for d in matrix.devices] == pytest.approx([1.5e-3] * 2)
    topology = devices_from_data({"topology": "2D-SW_SW", "count": 4, "gpu": gpu})
    assert [getattr(d, field) for d in topology.devices] == pytest.approx([1.5e-3] * 4)


@pytest.mark.parametrize(("data", "message"), [
    ({"servers": [{"count": 0, "gpu": {"flops": 1, "memory": 1},
                   "link": {"bandwidth": 1}}]}, "GPU count 0 is out of range"),
    ({"servers": [{"count": 2, "gpu": {"flops": "fast", "memory": 1},
                   "link": {"bandwidth": 1}}]}, "compute rate"),
    ({"servers": [{"count": 2, "gpu": {"flops": 1, "memory": 1}, "link": {"bandwidth": 1}}] * 2},
     "inter: needed"),
    ({"devices": [{"name": "a", "flops": 1, "memory": 1}], "bandwidth": [[1, 2]]},
     "expected 1 rows of 1 entries"),
    ({"devices": [{"name": "a", "flops": 1, "memory": 1}] * 2, "bandwidth": [[0, 0], [0, 0]]},
     r"bandwidth\[0\]\[1\]: bandwidth 0 is out of range"),
    ({"nodes": 3}, "one of the keys servers, devices, topology"),
    ({"topology": "2D-SW_SW", "count": 5000, "gpu": {"flops": 1, "memory": 1}},
     "outside 1..1024"),
    ({"servers": [{"count": 2, "gpu": {"flops": 1, "memory": 1, "overhead": "nan ms"},
                   "link": {"bandwidth": 1}}]}, "overhead"),
    ({"servers": [{"count": 2, "gpu": {"flops": 1, "memory": 1, "overhead": "-1 ms"},
                   "link": {"bandwidth": 1}}]}, "overhead"),
])
def test_bad_device_files(data: dict, message: str) -> None:
    """Bad documents fail with a message naming the field."""
    with pytest.raises(ConfigError, match=message):
        devices_from_data(data)


def test_unknown_preset_lists_presets() -> None:
    """An unknown name lists the presets."""
    with pytest.raises(ConfigError, match="presets: 1x8-NVLink"):
        load_devices("dgx-9000")


def test_ordering_groups_servers_of_a_shuffled_graph() -> None:
    """Recursive bisection puts the GPUs of each server next to each other."""
    graph = load_devices("4x4-PCIe-25Gb")
    shuffle = np.random.default_rng(7).permutation(graph.num_devices)
    shuffled = DeviceGraph("shuffled", tuple(graph.devices[i] for i in shuffle),
                           graph.bandwidth[np.ix_(shuffle, shuffle)],
                           graph.latency[np.ix_(shuffle, shuffle)])
    servers = [shuffled.devices[i].server for i in device_order(shuffled)]
    assert all(len(set(servers[k:k + 4])) == 1 for k in range(0, 16, 4))
