"""A ledger row's ``hardware`` section gives the one system type (``job.cluster.System``) that
``dlsched plan`` runs on, and the evaluator prices the row on exactly that system."""

from __future__ import annotations

import pytest

from dlsched.errors import ConfigError
from dlsched.hardware.gpu import get_gpu
from dlsched.job.cluster import System, node_cluster
from dlsched.ledger import load_ledger
from dlsched.ledger.predict import job_and_layout
from dlsched.ledger.schema import Hardware

ROWS = {row.id: row for row in load_ledger()}


def test_the_section_is_the_evaluators_system() -> None:
    """SC21's 1.7B row: 32 A100s of dgx-a100, the a100 preset's whole document (80 GiB),
    4 nodes of 8 GPUs; the job the evaluator prices holds an equal system."""
    row = ROWS["sc21-t1-gpt-1.7b"]
    system = row.hardware.system()
    assert isinstance(system, System) and system == node_cluster("dgx-a100", 32)
    assert system.gpu == get_gpu("a100").spec and system.memory == 80 * 2**30
    assert [d.size for d in system.topology.dims] == [8, 4]
    job, _ = job_and_layout(row)
    assert job.cluster == system


def test_a_segmented_gb200_run_is_64_gpus_of_each_domain() -> None:
    """Megatron-Bridge's GB200 405B row: 256 GPUs placed as 64 of each NVL72 rack (Slurm
    segments): 64 GPUs on NVLink x 4 domains over the NICs."""
    system = ROWS["megatron-bridge-2602-gb200-llama3.1-405b"].hardware.system()
    assert [d.size for d in system.topology.dims] == [64, 4]
    assert system.gpu.name == "gb200"


def test_what_no_preset_describes_is_refused_naming_the_field() -> None:
    """A published NIC rate other than the preset's (100 Gb/s against dgx-h100's 400) and a
    GPU with no preset are refused with their field."""
    section = {"gpu": "h100-sxm", "gpus": 16, "cluster": "c", "gpus_per_node": 8,
               "inter_node_gbps_per_gpu": 100.0}
    with pytest.raises(ConfigError, match=r"^hardware\.inter_node_gbps_per_gpu: 100 Gb/s "
                                          r"differs from the dgx-h100 preset's 400 Gb/s"):
        Hardware.model_validate(section).system()
    inside_a_node = Hardware.model_validate({**section, "gpus": 8})  # no NIC crossed
    assert inside_a_node.system().num_gpus == 8


def test_a_gpu_count_no_node_holds_is_refused_naming_the_rows_key() -> None:
    """A row of 12 GPUs on 8-GPU nodes: its refusal names the row's own key, hardware.gpus
    (the System names its field gpus; plan's edge says --gpus, a ledger row's file does not
    have that option)."""
    row = ROWS["sc21-t1-gpt-1.7b"]
    twelve = row.model_copy(update={"hardware": row.hardware.model_copy(update={"gpus": 12})})
    with pytest.raises(ConfigError, match=r"^sc21-t1-gpt-1\.7b: hardware\.gpus: 12 must be a "
                                          r"multiple of 8 \(GPUs per dgx-a100 node\)"):
        job_and_layout(twelve)
