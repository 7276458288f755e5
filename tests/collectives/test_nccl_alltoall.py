"""NCCL's All-to-All (collectives.nccl_alltoall): direct per-peer sends at NCCL's credited
NVLink rate and one NIC's rate, checked by hand."""

import pytest

from dlsched.collectives.nccl import NcclNode
from dlsched.collectives.nccl_alltoall import (
    alltoall_latency,
    nccl_alltoall_seconds,
    nic_rate,
    nvlink_rate,
)
from dlsched.job.cluster import node_cluster
from dlsched.job.communication.collective_costs import curve

H100 = NcclNode("hopper", 450e9, 50e9)
B200 = NcclNode("blackwell", 900e9, 50e9)


def test_credited_rates() -> None:
    # topo.h: 20.6 of 25 GB/s per NVLink 4 (Jeaugey's 370 GB/s on an H100), 40.1 of 50 on NVLink 5
    assert nvlink_rate(H100) == pytest.approx(450e9 * 20.6 / 25)
    assert nvlink_rate(H100) == pytest.approx(370.8e9)
    assert nvlink_rate(B200) == pytest.approx(721.8e9)
    assert nic_rate(H100) == pytest.approx(48e9)  # search.cc's first inter speed <= 50 GB/s


def test_one_node_is_direct_over_nvlink() -> None:
    d = 512e6  # bytes per rank
    # 8 ranks: 7/8 of the buffer once over NVLink (a Bruck exchange would send 1.5 x d)
    expected = alltoall_latency(B200, 1) + d * 7 / 8 / 721.8e9
    assert nccl_alltoall_seconds(B200, d, 8, 1) == pytest.approx(expected)
    assert alltoall_latency(B200, 1) == pytest.approx((8.4 + 3.4) * 1e-6)


def test_two_nodes_wait_for_the_nic() -> None:
    d = 134.2e6
    # 16 ranks over 2 nodes: 7/16 d over NVLink, 8/16 d through one 48 GB/s NIC
    nic_s = d * 8 / 16 / 48e9
    assert nic_s > d * 7 / 16 / 370.8e9
    assert nccl_alltoall_seconds(H100, d, 8, 2) == pytest.approx((8.4 + 14.0) * 1e-6 + nic_s)
    assert nccl_alltoall_seconds(H100, d, 1, 1) == 0.0
    assert nccl_alltoall_seconds(H100, 0.0, 8, 2) == 0.0


def test_job_curve_is_nccls_on_a_node_preset() -> None:
    cluster = node_cluster("dgx-b200", 8)
    group = cluster.group_topology(1, 8)
    d = 2**29
    assert curve(group, "all-to-all", "baseline").seconds(d) == pytest.approx(
        nccl_alltoall_seconds(group.node, d, 8, 1), rel=1e-3)
    # Themis keeps its simulated schedule
    assert curve(group, "all-to-all", "themis").seconds(d) > \
        curve(group, "all-to-all", "baseline").seconds(d)
