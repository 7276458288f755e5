"""Topologies: presets, files with units, and clear errors for bad input."""

import json

import pytest

from dlsched.errors import ConfigError
from dlsched.hardware import (
    DimAlgorithm,
    Dimension,
    DimKind,
    load_topology,
    preset_names,
    topology_from_data,
)

PAPER_TOPOLOGIES = ("2D-SW_SW", "3D-SW_SW_SW_homo", "3D-SW_SW_SW_hetero", "3D-FC_Ring_SW",
                    "4D-Ring_SW_SW_SW", "4D-Ring_FC_Ring_SW")


def test_paper_presets_have_1024_npus_and_table_bandwidths():
    """The six Themis Table 2 topologies: 1024 NPUs each; spot-check bandwidths in B/s."""
    for name in PAPER_TOPOLOGIES:
        assert load_topology(name).num_npus == 1024
    net = load_topology("4D-Ring_FC_Ring_SW")
    assert [d.bandwidth for d in net.dims] == [375e9, 175e9, 150e9, 100e9]
    assert [d.latency for d in net.dims] == pytest.approx([20e-9, 700e-9, 700e-9, 1700e-9])
    assert [d.algorithm for d in net.dims] == [DimAlgorithm.RING, DimAlgorithm.DIRECT,
                                               DimAlgorithm.RING, DimAlgorithm.HALVING_DOUBLING]


def test_all_presets_load():
    """Every bundled preset validates, including the HGX, Zion and TPUv4-like systems."""
    names = preset_names()
    for expected in ("DGX2-like_SW_SW", "HGX-H100-like_SW_SW_SW", "Zion-like_FC_SW",
                     "TPUv4-like_Ring_Ring_Ring", *PAPER_TOPOLOGIES):
        assert expected in names
    for name in names:
        assert load_topology(name).total_bandwidth > 0


def test_default_algorithm_by_kind_and_override():
    """Ring->ring, FC->direct, Switch->halving-doubling unless the file says otherwise."""
    net = topology_from_data({"dims": [
        {"kind": "Ring", "size": 6, "bandwidth": "100 GB/s"},
        {"kind": "Switch", "size": 6, "bandwidth": "100 GB/s", "algorithm": "ring"},
    ]})
    assert net.dims[0].algorithm is DimAlgorithm.RING
    assert net.dims[1].algorithm is DimAlgorithm.RING


def test_topology_file_with_units(tmp_path):
    """A JSON file with human units is parsed into bytes/s and seconds."""
    path = tmp_path / "net.json"
    path.write_text(json.dumps({"name": "mine", "dims": [
        {"kind": "FullyConnected", "size": 4, "bandwidth": "100 Gb/s", "latency": "1 us"}]}))
    net = load_topology(path)
    assert net.name == "mine"
    assert net.dims[0].bandwidth == pytest.approx(12.5e9)
    assert net.dims[0].latency == pytest.approx(1e-6)


@pytest.mark.parametrize(("dim", "field", "needle"), [
    ({"kind": "Torus", "size": 4, "bandwidth": "1 GB/s"}, "kind", "Ring"),
    ({"kind": "Ring", "size": 1, "bandwidth": "1 GB/s"}, "size", ">= 2"),
    ({"kind": "Switch", "size": 6, "bandwidth": "1 GB/s"}, "size", "power-of-two"),
    ({"kind": "Ring", "size": 4, "bandwidth": "0 GB/s"}, "bandwidth", ">= 1 B/s"),
    ({"kind": "Ring", "size": 4, "bandwidth": "1 GB/s", "latency": "-5 ns"}, "latency", ">= 0"),
    ({"kind": "Ring", "size": 4, "bandwidth": "fast"}, "bandwidth", "GB/s"),
    ({"kind": "Ring", "size": 4, "bandwidth": "1 GB/s", "algorithm": "tree"}, "algorithm",
     "halving-doubling"),
])
def test_bad_dimension_names_field_and_accepted_values(dim, field, needle):
    """Each bad value gives a ConfigError naming the field path and what is accepted."""
    with pytest.raises(ConfigError) as error:
        topology_from_data({"dims": [{"kind": "Ring", "size": 2, "bandwidth": 1.0}, dim]})
    message = str(error.value)
    assert "dims[1]" in message
    assert field in message
    assert needle in message


def test_unknown_preset_lists_presets():
    """An unknown name lists the presets."""
    with pytest.raises(ConfigError, match="2D-SW_SW"):
        load_topology("no-such-net")


def test_direct_construction_validates_too():
    """The Python API refuses a bad Dimension as well."""
    with pytest.raises(ValueError, match="size"):
        Dimension(DimKind.SWITCH, 12, 1e9)
