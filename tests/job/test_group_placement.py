"""Where a group's ranks fall across NVLink domains (job.group_placement) and the sub-network
``System.group_topology`` prices for it, by hand."""

from __future__ import annotations

import pytest

from dlsched.hardware.topology import DimAlgorithm
from dlsched.job.cluster import node_cluster
from dlsched.job.communication.nccl_costs import NcclGroup
from dlsched.job.group_placement import Placement, placement


@pytest.mark.parametrize(("domain", "gpus", "stride", "size", "expected"), [
    (8, 64, 1, 8, Placement(8, 1, False)),  # a TP group filling a node
    (8, 64, 4, 4, Placement(2, 2, False)),  # 2 ranks in each of 2 nodes, every copy alike
    (8, 64, 8, 8, Placement(1, 8, False)),  # one rank per node
    (72, 72, 1, 48, Placement(48, 1, False)),  # fewer GPUs than a domain: all inside it
    # 144 GPUs of two 72-GPU racks: the DP copy on ranks 64-79 holds 8 in each rack
    (72, 144, 1, 16, Placement(8, 2, True)),
    # the block of 48 at ranks 48-95 holds 24 in each rack (priced before as 48 on NVLink)
    (72, 144, 1, 48, Placement(24, 2, True)),
    # PP 9 ranks 16 apart: 5 in one rack, 4 in the other; 3 divides 9 and is <= 4
    (72, 144, 16, 9, Placement(3, 3, True)),
    # 216 GPUs, blocks of 27: ranks 54-80 hold 18 and 9; 9 divides 27
    (72, 216, 1, 27, Placement(9, 3, True)),
])
def test_placement_by_hand(domain: int, gpus: int, stride: int, size: int,
                           expected: Placement) -> None:
    assert placement(domain, gpus, stride, size) == expected


def test_placement_refuses_a_non_positive_argument() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        placement(72, 144, 0, 9)


def test_a_straddling_group_is_priced_across_the_nics() -> None:
    """On two GB200 NVL72 racks the DP group of 16 is 8 NVLink ranks x 2 racks for NCCL, the
    PP group of 9 is 3 x 3 with a ring over its 3 racks (halving-doubling needs a power of
    two); an aligned group on DGX H100 nodes is as before."""
    racks = node_cluster("gb200-nvl72", 144)
    dp = racks.group_topology(1, 16)
    assert isinstance(dp, NcclGroup) and (dp.ranks_per_node, dp.nodes) == (8, 2)
    assert [d.size for d in dp.dims] == [8, 2] and racks.placement(1, 16) == Placement(8, 2, True)
    pp = racks.group_topology(16, 9)
    assert [d.size for d in pp.dims] == [3, 3]  # type: ignore[union-attr]
    assert pp.dims[1].algorithm is DimAlgorithm.RING  # type: ignore[union-attr]
    assert not racks.placement(1, 8).straddles and not racks.placement(72, 2).straddles  # type: ignore[union-attr]
    assert racks.placement(1, 1) is None
    nodes = node_cluster("dgx-h100", 64)
    tp = nodes.group_topology(1, 8)
    assert isinstance(tp, NcclGroup) and (tp.ranks_per_node, tp.nodes) == (8, 1)
    dp8 = nodes.group_topology(8, 8)
    assert isinstance(dp8, NcclGroup) and (dp8.ranks_per_node, dp8.nodes) == (1, 8)
    assert nodes.group_topology(1, 1) is None
