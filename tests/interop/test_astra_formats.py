"""ASTRA-sim readers: example files parse to hand-checked values, formats round-trip through
their writers, and bad files get errors naming the file, the line and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlsched.collectives import CollectiveOp, IntraPolicy
from dlsched.errors import ConfigError
from dlsched.hardware import DimAlgorithm, DimKind
from dlsched.interop import (
    AstraCommOp,
    AstraParallelism,
    comm_dimensions,
    read_astra_network,
    read_astra_system,
    read_astra_workload,
    write_astra_network,
    write_astra_system,
    write_astra_workload,
)

EXAMPLES = Path(__file__).parents[2] / "examples" / "astra"
GIB = 2**30


def test_network_yaml_maps_to_topology() -> None:
    net = read_astra_network(EXAMPLES / "network_3d.yml")
    assert net.name == "network_3d"
    assert [d.kind for d in net.dims] == [DimKind.FULLY_CONNECTED, DimKind.RING, DimKind.SWITCH]
    assert [d.size for d in net.dims] == [8, 16, 8]
    assert net.num_npus == 1024
    # GB/s with GB = 2^30 bytes
    assert [d.bandwidth for d in net.dims] == [175 * GIB, 100 * GIB, 50 * GIB]
    # ns per hop; a switch step is two hops (NPU -> switch -> NPU)
    assert net.dims[0].latency == pytest.approx(700e-9)
    assert net.dims[1].latency == pytest.approx(700e-9)
    assert net.dims[2].latency == pytest.approx(1700e-9)
    assert [d.algorithm for d in net.dims] == [DimAlgorithm.DIRECT, DimAlgorithm.RING,
                                               DimAlgorithm.HALVING_DOUBLING]


def test_network_round_trip(tmp_path: Path) -> None:
    net = read_astra_network(EXAMPLES / "network_3d.yml")
    write_astra_network(net, tmp_path / "network_3d.yml")
    again = read_astra_network(tmp_path / "network_3d.yml")
    assert again == net


def test_system_json_maps_to_collective_options(tmp_path: Path) -> None:
    system = read_astra_system(EXAMPLES / "system_themis.json")
    assert system.policy == "themis"
    assert system.intra is IntraPolicy.SCF
    assert system.chunks == 64 and system.concurrency == 1 and system.lifo
    assert system.ignored_keys == ("boost-mode",)
    assert system.compat().local_mem_bw == pytest.approx(1600e9)
    net = read_astra_network(EXAMPLES / "network_3d.yml")
    a2a = system.apply(net, CollectiveOp.ALL_TO_ALL)
    assert [d.algorithm for d in a2a.dims] == [DimAlgorithm.DIRECT] * 3
    assert system.apply(net, CollectiveOp.ALL_REDUCE) == net
    write_astra_system(system, tmp_path / "system.json")
    again = read_astra_system(tmp_path / "system.json")
    assert again.model_dump(exclude={"ignored_keys"}) == system.model_dump(
        exclude={"ignored_keys"})


@pytest.mark.parametrize(("key", "value"), [
    ("inter-dimension-scheduling", "offlineGreedyFlex"),
    ("inter-dimension-scheduling", "roundRobin"),
    ("intra-dimension-scheduling", "lessRemainingPhaseFirst"),
    ("all-reduce-implementation", "doubleBinaryTree")])
def test_system_rejects_values_not_implemented(tmp_path: Path, key: str, value: str) -> None:
    """ASTRA values dlsched does not implement are one-line errors naming key and value (before
    this, offlineGreedyFlex ran silently as Themis)."""
    path = tmp_path / "s.json"
    path.write_text(f'{{"{key}": "{value}"}}')
    with pytest.raises(ConfigError, match=f"{key}: '{value}' .* is not implemented") as error:
        read_astra_system(path)
    assert "\n" not in str(error.value)


def test_system_accepts_astra_1_0_underscore_implementations(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text('{"all-reduce-implementation": "ring_direct8_halvingDoubling",'
                    ' "inter-dimension-scheduling": "offlineGreedy"}')
    system = read_astra_system(path)
    assert system.algorithms(CollectiveOp.ALL_REDUCE) == (
        DimAlgorithm.RING, DimAlgorithm.DIRECT, DimAlgorithm.HALVING_DOUBLING)
    assert system.policy == "themis" and system.chunks == 64


def test_data_workload_values() -> None:
    workload = read_astra_workload(EXAMPLES / "workload_data.txt")
    assert workload.parallelism is AstraParallelism.DATA
    assert [layer.name for layer in workload.layers] == ["stem", "block1", "block2", "head"]
    stem = workload.layers[0]
    assert stem.forward_compute_s == pytest.approx(52000e-9)
    assert stem.input_grad_compute_s == pytest.approx(61000e-9)
    assert stem.weight_grad_compute_s == pytest.approx(48000e-9)
    assert stem.update_s == pytest.approx(120e-9)
    assert stem.forward_comm.op is AstraCommOp.NONE
    assert stem.weight_grad_comm.op.collective is CollectiveOp.ALL_REDUCE
    assert stem.weight_grad_comm.num_bytes == 37632
    assert stem.reserved == -1


def test_workload_cycle_length_is_configurable() -> None:
    workload = read_astra_workload(EXAMPLES / "workload_data.txt", cycle_s=1 / 1.4e9)
    assert workload.layers[0].forward_compute_s == pytest.approx(52000 / 1.4e9)


@pytest.mark.parametrize("name", ["workload_data.txt", "workload_transformer.txt",
                                  "workload_customized.txt", "workload_dlrm.txt"])
def test_workload_round_trip(tmp_path: Path, name: str) -> None:
    workload = read_astra_workload(EXAMPLES / name)
    write_astra_workload(workload, tmp_path / name)
    assert read_astra_workload(tmp_path / name) == workload


def test_hybrid_workloads() -> None:
    transformer = read_astra_workload(EXAMPLES / "workload_transformer.txt")
    assert transformer.model_parallel_npus == 8
    assert transformer.layers[1].forward_comm.num_bytes == 25165824
    custom = read_astra_workload(EXAMPLES / "workload_customized.txt")
    assert [custom.layer_parallelism(i) for i in range(3)] == [
        AstraParallelism.MODEL, AstraParallelism.HYBRID_DATA_MODEL, AstraParallelism.DATA]
    assert custom.layers[1].input_grad_comm.op.collective is CollectiveOp.REDUCE_SCATTER


def test_dlrm_example_last_bottom_layer_and_all_to_all() -> None:
    dlrm = read_astra_workload(EXAMPLES / "workload_dlrm.txt")
    assert dlrm.dlrm_last_bottom_layer == 2
    assert dlrm.layers[0].forward_comm.op.collective is CollectiveOp.ALL_TO_ALL
    assert dlrm.layers[0].forward_comm.num_bytes == 512 * 26 * 128 * 2


def test_dlrm_bare_bottom_layer(tmp_path: Path) -> None:
    path = tmp_path / "dlrm.txt"
    path.write_text("HYBRID_DLRM 1\n2\nemb -1 3 ALLTOALL 64 3 ALLTOALL 64 2 NONE 0 1\n"
                    "mlp -1 5 NONE 0 5 NONE 0 4 ALLREDUCE 128 2\n")
    workload = read_astra_workload(path)
    assert workload.dlrm_last_bottom_layer == 1
    write_astra_workload(workload, tmp_path / "again.txt")
    assert read_astra_workload(tmp_path / "again.txt") == workload


def test_comm_dimensions() -> None:
    sizes = (4, 8, 4, 8)
    assert comm_dimensions(AstraParallelism.DATA, "weight_grad", sizes) == (True,) * 4
    assert comm_dimensions(AstraParallelism.DATA, "forward", sizes) == (False,) * 4
    assert comm_dimensions(AstraParallelism.HYBRID_DATA_MODEL, "forward", sizes) == (
        True, False, False, False)
    assert comm_dimensions(AstraParallelism.HYBRID_MODEL_DATA, "weight_grad", sizes) == (
        True, False, False, False)
    assert comm_dimensions(AstraParallelism.HYBRID_TRANSFORMER, "input_grad", sizes, 32) == (
        True, True, False, False)
    assert comm_dimensions(AstraParallelism.HYBRID_TRANSFORMER, "weight_grad", sizes, 32) == (
        False, False, True, True)
    with pytest.raises(ValueError, match="model_parallel_NPU_group"):
        comm_dimensions(AstraParallelism.HYBRID_TRANSFORMER, "forward", sizes, 16)


NETWORK = "topology: [Ring, Switch]\nnpus_count: [4, 8]\nbandwidth: [100, 50]\nlatency: [5, 10]\n"


@pytest.mark.parametrize(("old", "new", "line", "field"), [
    ("[Ring, Switch]", "[Ring, Torus]", 1, "topology[1]"),
    ("[4, 8]", "[4, 1]", 2, "npus_count[1]"),
    ("bandwidth: [100, 50]", "bandwidth:\n  - 100\n  - -3", 5, "bandwidth[1]"),
    ("latency: [5, 10]", "latency: [5, .nan]", 4, "latency[1]"),
    ("latency: [5, 10]", "latency: [5]", 2, "npus_count"),
    ("latency: [5, 10]", "latency: [5, 10]\nlinks: [1]", 5, "links"),
    ("[4, 8]", "[4, 6]", 2, "dimension 2"),
    ("latency: [5, 10]", "latency: [[5], 10]", 4, "latency"),
    ("[4, 8]", "[4, 8192]", 2, "npus_count[1]"),
])
def test_bad_network_names_file_line_field(tmp_path: Path, old: str, new: str, line: int,
                                           field: str) -> None:
    path = tmp_path / "net.yml"
    path.write_text(NETWORK.replace(old, new))
    with pytest.raises(ConfigError) as error:
        read_astra_network(path)
    assert str(error.value).startswith(f"{path}:{line}: {field}: ")


@pytest.mark.parametrize(("text", "line", "field"), [
    ('{\n  "preferred-dataset-splits": 0\n}', 2, "preferred-dataset-splits"),
    ('{\n  "x": 1,\n  "scheduling-policy": "RANDOM"\n}', 2, "x"),
    ('{\n  "scheduling-policy": "RANDOM"\n}', 2, "scheduling-policy"),
    ('{\n"a": 1,\n  "all-reduce-implementation": ["ring", "doubleBinaryTree"]\n}', 2, "a"),
    ('{\n  "all-reduce-implementation": ["ring", "doubleBinaryTree"]\n}', 2,
     "all-reduce-implementation"),
    ('{\n  "intra-dimension-scheduling": "RG"\n}', 2, "intra-dimension-scheduling"),
    ('{\n  "endpoint-delay": 1,\n}', 3, "<document>"),
    ('{\n  "active-chunks-per-dimension": 100000\n}', 2, "active-chunks-per-dimension"),
])
def test_bad_system_names_file_line_field(tmp_path: Path, text: str, line: int,
                                          field: str) -> None:
    path = tmp_path / "sys.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        read_astra_system(path)
    assert str(error.value).startswith(f"{path}:{line}: {field}: ")


WORKLOAD = "DATA\n2\na -1 10 NONE 0 20 NONE 0 30 ALLREDUCE 100 5\nb -1 1 NONE 0 2 NONE 0 3 " \
           "ALLREDUCE 200 1\n"


@pytest.mark.parametrize(("old", "new", "line", "field"), [
    ("DATA", "DATAPARALLEL", 1, "parallelism"),
    ("DATA\n2", "DATA\n3", 2, "layer count"),
    ("DATA\n2", "DATA\ntwo", 2, "layer count"),
    ("30 ALLREDUCE 100 5\n", "30 ALLREDUCE 100\n", 3, "update time"),
    ("a -1 10 NONE", "a -1 1e999 NONE", 3, "forward compute"),
    ("3 ALLREDUCE 200", "3 BROADCAST 200", 4, "weight-grad comm type"),
    ("2 NONE 0 3", "2 NONE -4 3", 4, "input-grad comm size"),
    ("a -1 10", "a x 10", 3, "reserved"),
    ("DATA\n", "DATA pp\n", 1, "options"),
])
def test_bad_workload_names_file_line_field(tmp_path: Path, old: str, new: str, line: int,
                                            field: str) -> None:
    path = tmp_path / "w.txt"
    path.write_text(WORKLOAD.replace(old, new, 1))
    with pytest.raises(ConfigError) as error:
        read_astra_workload(path)
    assert str(error.value).startswith(f"{path}:{line}: {field}: ")


def test_missing_file_names_the_option(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"astra-network .*does not exist"):
        read_astra_network(tmp_path / "none.yml")
