"""One system type (issue 47): ``job.cluster.System`` is the GPU's full document, the node and
the network; a node preset, a system file (``dlsched plan --cluster my-system.yaml``) and an
inline GPU or node document all give it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dlsched.config import bundled_presets
from dlsched.errors import ConfigError
from dlsched.hardware.gpu import GpuSpec, get_gpu
from dlsched.hardware.nodes import Node, node_presets
from dlsched.job.cluster import System, load_cluster, node_cluster
from dlsched.job.model_spec import load_spec

GIB = 2**30


def _write(tmp_path: Path, document: dict[str, Any], name: str = "system.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document))
    return str(path)


def test_a_node_preset_and_its_system_file_are_one_system(tmp_path: Path) -> None:
    """16 GPUs of dgx-h100 from the preset and from a file naming it: equal systems, the GPU
    the h100 preset's whole document (80 GiB, its sources), two dimensions (8 GPUs on
    NVSwitch, 2 nodes over the NICs)."""
    from_preset = node_cluster("dgx-h100", 16)
    from_file = load_cluster(_write(tmp_path, {"node": "dgx-h100", "gpus": 16}), None, None)
    assert from_file == from_preset
    assert isinstance(from_file.gpu, GpuSpec) and isinstance(from_file.node, Node)
    assert from_file.gpu == get_gpu("h100").spec and from_file.memory == 80 * GIB
    assert from_file.gpu.sources and from_file.node is node_presets()["dgx-h100"]
    assert from_file.topology.shape == from_preset.topology.shape
    assert [d.size for d in from_file.topology.dims] == [8, 2]
    assert from_file.name == "16xdgx-h100" and from_file.num_gpus == 16


def test_inline_gpu_and_node_documents(tmp_path: Path) -> None:
    """A made-up node (4 GPUs, 100 GB/s intra, 10 GB/s NIC) with an A100's document at half
    its peaks, inline: 8 GPUs are 4 inside x 2 nodes at the file's rates; the GPU is the
    document given (its memory the A100's 80 GiB), its compute half the A100's."""
    gpu = dict(bundled_presets("gpus.yaml")["a100"], name="half-a100")
    gpu["peak"] = {key: f"{float(rate.split()[0]) / 2} TFLOP/s"
                   for key, rate in gpu["peak"].items()}
    node = {"name": "box", "gpus": 4, "gpu": "a100",
            "intra": {"bandwidth": "100 GB/s", "latency": "1 us"},
            "nic": {"bandwidth": "10 GB/s", "latency": "5 us"}, "source": "made up"}
    system = load_cluster(_write(tmp_path, {"gpu": gpu, "node": node, "gpus": 8}), None, None)
    assert [(d.size, d.bandwidth) for d in system.topology.dims] == [(4, 100e9), (2, 10e9)]
    assert system.gpu.name == "half-a100" and system.memory == 80 * GIB
    half, full = get_gpu(system.gpu), get_gpu("a100")
    assert half.peak_flops("bf16") == full.peak_flops("bf16") / 2
    assert system.name == "8xbox" and system.source == "made up"


def test_a_system_file_plans(tmp_path: Path, run_cli: Any) -> None:
    """``dlsched plan --cluster FILE``: 8 GPUs of dgx-a100 named by a file price as the preset
    does; the file's own GPU (the A100 at half its peaks) makes the iteration slower."""
    plan = ("plan", "--model", "gpt-1.7b", "--global-batch", "64", "--tp", "1", "--pp", "1",
            "--dp", "8", "--chunks", "1", "--microbatch-size", "8", "--schedule", "1f1b",
            "--recompute", "full", "--no-sequence-parallel", "--zero", "0", "--precision",
            "fp16", "--json", "--cluster")
    code, out, err = run_cli(*plan, "dgx-a100", "--gpus", "8")
    assert code == 0, err
    preset = json.loads(out)["rows"][0]["iteration_s"]
    code, out, err = run_cli(*plan, _write(tmp_path, {"node": "dgx-a100", "gpus": 8}))
    assert code == 0, err
    assert json.loads(out)["rows"][0]["iteration_s"] == preset
    gpu = dict(bundled_presets("gpus.yaml")["a100"], name="half-a100")
    gpu["peak"] = {key: f"{float(rate.split()[0]) / 2} TFLOP/s"
                   for key, rate in gpu["peak"].items()}
    slow = _write(tmp_path, {"node": "dgx-a100", "gpus": 8, "gpu": gpu}, "slow.yaml")
    code, out, err = run_cli(*plan, slow)
    assert code == 0, err
    assert json.loads(out)["rows"][0]["iteration_s"] > preset


def test_a_network_system_and_the_refusals(tmp_path: Path) -> None:
    """A topology preset as the network: its NPUs are the GPUs (the a100 by default). Each
    mistake is refused with its field: an unknown node, a node and a network at once, a GPU
    count that is not whole nodes, an unknown GPU."""
    system = System(network="3D-FC_Ring_SW")
    assert system.gpu.name == "a100" and system.num_gpus == system.network.num_npus
    with pytest.raises(ConfigError, match=r"^node: unknown node preset 'dgx-z'; accepted: "):
        System(node="dgx-z", gpus=8)
    with pytest.raises(ConfigError, match=r"^system: give a node \(with gpus\) or a network"):
        System(node="dgx-a100", gpus=8, network="3D-FC_Ring_SW")
    with pytest.raises(ConfigError, match=r"^gpus: 12 must be a multiple of 8"):
        load_cluster(_write(tmp_path, {"node": "dgx-a100", "gpus": 12}), None, None)
    with pytest.raises(ConfigError, match=r"^gpu: unknown GPU 'z100'"):
        load_cluster(_write(tmp_path, {"node": "dgx-a100", "gpus": 8, "gpu": "z100"}), None,
                     None)


def test_the_example_system_file_is_the_dgx_a100_network() -> None:
    """examples/plan/my-system.yaml (a node of its own with the dgx-a100 figures, 16 A100s):
    the same dimensions as --cluster dgx-a100 --gpus 16, the a100 document; --gpus and --gpu
    replace the file's."""
    example = str(Path(__file__).parents[2] / "examples" / "plan" / "my-system.yaml")
    system, preset = load_cluster(example, None, None), node_cluster("dgx-a100", 16)
    assert system.topology.dims == preset.topology.dims
    assert system.gpu == preset.gpu and system.name == "my-system"
    assert system.node is not None and system.node.name == "my-a100-node"
    bigger = load_cluster(example, 32, "h100")
    assert (bigger.num_gpus, bigger.gpu.name) == (32, "h100")


@pytest.mark.parametrize(("load", "field", "reason"), [
    (lambda: load_spec("gpt9"), "model", "unknown model 'gpt9'; accepted: gpt-1.7b,"),
    (lambda: load_spec("none.yaml"), "model", "no such file 'none.yaml'"),
    (lambda: load_cluster("nope", None, None), "cluster", "topology: 'nope' is neither"),
])
def test_the_python_api_names_the_field_not_a_cli_option(load, field, reason) -> None:
    """``load_spec`` / ``load_cluster`` refuse naming their field (``model: unknown model``),
    no ``--model``: the CLI names its option (``ConfigError.renamed``, tests/cli)."""
    with pytest.raises(ConfigError) as error:
        load()
    assert error.value.field == field and error.value.reason.startswith(reason)
    assert str(error.value).startswith(f"{field}: {reason}") and "--" not in str(error.value)
