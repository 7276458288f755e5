"""NCCL's tuner model (``job.communication.nccl_costs``): hand-computed times from NCCL's
constants, the groups a node preset's cluster builds, the evaluator's curve, and the model
beside vTrain's measured A100 all-reduce tables (nccl-tests; a measurement independent of the
training rows the evaluator is validated on)."""

from __future__ import annotations

import csv
import io
from importlib import resources

import pytest

from dlsched.job.cluster import load_cluster
from dlsched.job.communication.collective_costs import curve
from dlsched.job.communication.nccl_costs import NcclGroup, NcclNode, nccl_choice, nccl_seconds

A100 = NcclNode("ampere", 300e9, 25e9, cpu="amd")  # dgx-a100: 12 NVLinks, one HDR NIC per GPU
H100 = NcclNode("hopper", 450e9, 50e9)  # dgx-h100: 18 NVLinks
MIB = 2**20


def test_small_all_reduce_on_eight_a100s_is_ring_ll() -> None:
    """1 MiB on 8 A100s: ring LL, latency 6.6 + 14 steps x 0.6 us, bandwidth 240 GB/s (12
    links x NCCL's 20 GB/s) / 4 (LL) x 8 / 14 (bus to algorithm)."""
    choice = nccl_choice(A100, "all-reduce", MIB, 8, 1)
    assert (choice.algorithm, choice.protocol) == ("ring", "LL")
    assert choice.seconds == pytest.approx(15.0e-6 + MIB / (60e9 * 8 / 14))


def test_large_all_reduce_on_eight_a100s_is_ring_simple() -> None:
    """1 GiB on 8 A100s: ring Simple, 8.4 + 14 x 3.4 us and 240 GB/s x 8 / 14."""
    choice = nccl_choice(A100, "all-reduce", 1024 * MIB, 8, 1)
    assert (choice.algorithm, choice.protocol) == ("ring", "Simple")
    assert choice.seconds == pytest.approx(56e-6 + 1024 * MIB / (240e9 * 8 / 14))


def test_nvls_on_hopper_at_large_sizes() -> None:
    """8 H100s, 1 GiB: NVLS (23 us, 6 channels of 60 GB/s split in 12 of 30: 360 GB/s x 5/6)
    beats the ring (360 GB/s x 8 / 14); an A100 has no NVLS."""
    choice = nccl_choice(H100, "all-reduce", 1024 * MIB, 8, 1)
    assert (choice.algorithm, choice.protocol) == ("nvls", "Simple")
    assert choice.seconds == pytest.approx(23e-6 + 1024 * MIB / 300e9)
    assert nccl_choice(A100, "all-reduce", 1024 * MIB, 8, 1).algorithm == "ring"


def test_all_gather_is_half_an_all_reduce_at_large_sizes() -> None:
    """A ring all-gather takes n - 1 steps of the buffer's 1/n, an all-reduce twice as many."""
    gather = nccl_choice(A100, "all-gather", 1024 * MIB, 8, 1)
    assert gather.seconds == pytest.approx(8.4e-6 + 7 * 3.4e-6 + 1024 * MIB / (240e9 * 8 / 7))


def test_across_nodes_the_nic_bounds_the_ring() -> None:
    """One GPU per node on 4 A100 nodes (a DP group): one 25 GB/s NIC, searched at 24 GB/s,
    so 1 GiB takes at least 1 GiB / (24 GB/s x 4 / 6) on the ring."""
    seconds = nccl_choice(A100, "all-reduce", 1024 * MIB, 1, 4).seconds
    assert seconds >= 1024 * MIB / (24e9 * 4 / 6)
    assert seconds < 1.2 * 1024 * MIB / (24e9 * 4 / 6)


@pytest.mark.parametrize(("stride", "size", "expected"),
                         [(1, 8, (8, 1)), (8, 2, (1, 2)), (4, 4, (2, 2)), (1, 16, (8, 2))])
def test_groups_of_a_node_preset_cluster(stride: int, size: int,
                                         expected: tuple[int, int]) -> None:
    """A group's GPUs per node and nodes on 16 GPUs of dgx-a100."""
    group = load_cluster("dgx-a100", 16, None).group_topology(stride, size)
    assert isinstance(group, NcclGroup)
    assert (group.ranks_per_node, group.nodes) == expected


def test_the_evaluators_curve_follows_the_model() -> None:
    """The baseline curve of an 8-GPU TP group interpolates the model within 2%."""
    group = load_cluster("dgx-a100", 8, None).group_topology(1, 8)
    for op in ("all-reduce", "all-gather", "reduce-scatter"):
        priced = curve(group, op, "baseline")
        for size in (3 * MIB // 2, 5 * MIB, 24 * MIB, 300 * MIB):
            assert priced.seconds(size) == pytest.approx(nccl_seconds(group, op, size), rel=0.02)


def _measured(gpus: int) -> list[tuple[int, float]]:
    """(bytes, seconds) of vTrain's nccl-tests table: the mean of out-of-place and in-place."""
    name = f"vtrain_a100_allreduce_{gpus}gpu.csv"
    text = resources.files("dlsched.experiments").joinpath("data", name).read_text()
    return [(int(r[0]), (float(r[3]) + float(r[5])) / 2e9)
            for r in list(csv.reader(io.StringIO(text)))[1:]]


@pytest.mark.parametrize("gpus", [2, 4, 8])
def test_beside_vtrains_measured_all_reduces(gpus: int) -> None:
    """NCCL's model is never slower than these measurements, and within 2.3x of them at every
    size (1 MiB - 1 GiB, worst 0.44 on 2 GPUs at 1 MiB); on 8 GPUs from 64 MiB within 15% (0.88-
    0.96). What is off is the small-message time (8 GPUs: measured 92 us at 1 MiB, modelled 46)
    and the 2-GPU bandwidth (measured 197 GB/s at 1 GiB, credited 240; docs/validation.md)."""
    for size, seconds in _measured(gpus):
        ratio = nccl_choice(A100, "all-reduce", size, gpus, 1).seconds / seconds
        assert 1 / 2.3 < ratio <= 1.0
        if gpus == 8 and size >= 64 * MIB:
            assert ratio > 0.85
