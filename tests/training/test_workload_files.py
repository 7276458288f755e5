"""ASTRA-sim 1.0 workload files in the Themis artifact's formats (small files of our own):
checkpoint headers, model-parallel groups that split a dimension, and --workload-files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlsched.errors import ConfigError
from dlsched.hardware import Dimension, DimKind, Topology, load_topology
from dlsched.interop import format_astra_workload, parse_astra_workload, read_astra_workload
from dlsched.training import run_training, subtopology
from dlsched.training.astra import workload_from_astra

CHECKPOINTED = Path("examples/astra/workload_transformer_checkpoints.txt")
# The artifact's DLRM layout: a bare last-bottom-layer index and tab/space padding.
DLRM = ("HYBRID_DLRM\t1\t\t\n3   \t\n"
        "Embedding\t    -1\t1000   \tALLTOALL    4096\t300   \t    ALLTOALL\t4096\t300   \t"
        "    ALLREDUCE\t65536\t98\n"
        "MLP_Bottom_0   \t-1\t2000   \tNONE\t    0   \t    2000   \tNONE\t    0       \t"
        "2000   \tNONE\t    0       \t10\n"
        "MLP_Top_0\t-1\t3000\tNONE\t0\t3000\tNONE\t0\t3000\tNONE\t0\t10\n")


def test_checkpoint_header_is_read_and_round_trips(tmp_path: Path) -> None:
    """``checkpoints: 2 0 3 checkpoint_initiates: 2 5 2``: layers 5 and 2 recompute the
    forward from checkpoints 3 and 0 (layers 3-4 and 0-1); the text round-trips."""
    astra = read_astra_workload(CHECKPOINTED)
    assert astra.model_parallel_npus == 16
    assert astra.recompute_ranges() == ((3, 5), (0, 2))
    again = tmp_path / "again.txt"
    again.write_text(format_astra_workload(astra))
    assert read_astra_workload(again) == astra


def test_recomputed_forwards_are_simulated() -> None:
    """The recomputed forwards add their compute (4 layers' forward) to the iteration."""
    net = load_topology("2D-SW_SW")
    astra = read_astra_workload(CHECKPOINTED)
    workload = workload_from_astra(astra, net)
    plain = workload_from_astra(parse_astra_workload(
        CHECKPOINTED.read_text().replace("checkpoints: 2 0 3 checkpoint_initiates: 2 5 2", "")),
        net)
    again = sum(astra.layers[j].forward_compute_s for j in (0, 1, 3, 4))
    assert workload.compute_s == pytest.approx(plain.compute_s + again)
    assert run_training(workload, net, "baseline", chunks=4).iteration_s > \
        run_training(plain, net, "baseline", chunks=4).iteration_s + again * (1 - 1e-9)


def test_model_parallel_group_splits_a_dimension() -> None:
    """A group of 16 NPUs on 4 x 16: the first dimension whole and 4 of the second; the data
    parallel rest is the other 4-of-16 part (before, the reader rejected the file)."""
    net = Topology("4x16", (Dimension(DimKind.RING, 4, 1e11, 0.0),
                            Dimension(DimKind.SWITCH, 16, 5e10, 0.0)))
    workload = workload_from_astra(read_astra_workload(CHECKPOINTED), net)
    mp = subtopology(net, "mp", workload.model_parallel)
    dp = subtopology(net, "dp", workload.model_parallel)
    assert [d.size for d in mp.topology.dims] == [4, 4] and mp.dim_map == (0, 1)
    assert [d.size for d in dp.topology.dims] == [4] and dp.dim_map == (1,)
    assert run_training(workload, net, "themis", chunks=4).iteration_s > workload.compute_s
    artifact_like = workload_from_astra(read_astra_workload(CHECKPOINTED),
                                        load_topology("2D-SW_SW"))
    assert artifact_like.model_parallel == 16


def test_dlrm_artifact_layout_is_read() -> None:
    """The bare bottom-layer index and padded columns of the artifact's DLRM files parse."""
    astra = parse_astra_workload(DLRM)
    assert astra.dlrm_last_bottom_layer == 1
    assert astra.layers[0].forward_comm.num_bytes == 4096
    assert astra.layers[0].weight_grad_comm.num_bytes == 65536


@pytest.mark.parametrize(("header", "field"), [
    ("DATA checkpoints: 1 0", "checkpoints"),
    ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 checkpoints: 1 1 "
     "checkpoint_initiates: 1 0", "checkpoint_initiates"),
    ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 checkpoints: 3 0",
     "checkpoints"),
    ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 checkpoints: 1 9",
     "checkpoints")])
def test_bad_checkpoint_headers_name_the_field(header: str, field: str) -> None:
    """Checkpoints outside FWD_IN_BCKWD, an initiator with no checkpoint before it, a short
    list and a layer that does not exist: one-line errors naming the option."""
    text = f"{header}\n2\n" + "".join(f"l{i} -1 10 NONE 0 10 NONE 0 10 NONE 0 1\n"
                                       for i in range(2))
    with pytest.raises(ConfigError, match=f"{field}:") as error:
        parse_astra_workload(text)
    assert "\n" not in str(error.value)


def test_workload_files_reproduction(run_cli, tmp_path: Path) -> None:
    """``reproduce themis-training --workload-files DIR --json``: every file on the six
    topologies, both latencies, every policy, with the keys the issue asks for."""
    (tmp_path / "dlrm_small.txt").write_text(DLRM)
    (tmp_path / "transformer.txt").write_text(CHECKPOINTED.read_text())
    code, out, err = run_cli("reproduce", "themis-training", "--workload-files", str(tmp_path),
                             "--json", "--jobs", "1")
    assert code == 0, err
    document = json.loads(out)
    rows = document["rows"]
    assert len(rows) == 2 * 6 * 2 * 5
    keys = {"workload", "topology", "latency", "method", "policy", "iteration_s", "compute_s",
            "exposed_comm_s"}
    assert all(keys <= row.keys() and row["method"] == "files" for row in rows)
    assert {s["workload"] for s in document["summary"]} == {"dlrm_small", "transformer"}


def test_reproduction_rejects_bad_method_and_directory(run_cli, tmp_path: Path) -> None:
    """An unknown --method, --compute with the paper's method, and a directory without
    workloads: exit 2 with a one-line error."""
    for args in (("--method", "fast"), ("--compute", "comm-only"),
                 ("--workload-files", str(tmp_path))):
        code, _, err = run_cli("reproduce", "themis-training", *args)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
