"""The plan validator and the lower bounds."""

import pytest

from dlsched.collectives import (
    ChunkRoute,
    CollectiveOp,
    CollectivePlan,
    Phase,
    PlanError,
    Stage,
    ideal_time,
    order_mix_bound,
    validate_plan,
)
from dlsched.hardware import Dimension, DimKind, Topology, load_topology

RS, AG = Phase.REDUCE_SCATTER, Phase.ALL_GATHER
NET = Topology("2d", (Dimension(DimKind.RING, 4, 1e9), Dimension(DimKind.RING, 4, 1e9)))


def _plan(*routes: tuple[int, tuple[Stage, ...]], size: int = 200) -> CollectivePlan:
    return CollectivePlan(NET, CollectiveOp.ALL_REDUCE, size,
                          tuple(ChunkRoute(i, s, st) for i, (s, st) in enumerate(routes)))


GOOD = (Stage(RS, 0), Stage(RS, 1), Stage(AG, 1), Stage(AG, 0))


def test_valid_plan_passes():
    """RS on every dimension then AG on every dimension, sizes adding up."""
    validate_plan(_plan((100, GOOD), (100, (Stage(RS, 1), Stage(RS, 0), Stage(AG, 0),
                                             Stage(AG, 1)))))


@pytest.mark.parametrize(("stages", "needle"), [
    ((Stage(RS, 0), Stage(AG, 1), Stage(AG, 0)), "RS on every dimension"),
    ((Stage(RS, 0), Stage(RS, 0), Stage(AG, 1), Stage(AG, 0)), "RS on every dimension"),
    ((Stage(RS, 0), Stage(AG, 1), Stage(RS, 1), Stage(AG, 0)), "every dimension"),
    ((*GOOD, Stage(AG, 0)), "beyond"),
])
def test_bad_routes_are_marked(stages, needle):
    """A broken chunk is named and marked in the printed plan."""
    with pytest.raises(PlanError, match=needle) as error:
        validate_plan(_plan((100, GOOD), (100, stages)))
    assert "-> c1" in str(error.value)


def test_lost_bytes_are_caught():
    """Chunk sizes must add up to the buffer size."""
    with pytest.raises(PlanError, match="add up"):
        validate_plan(_plan((100, GOOD), (99, GOOD)))


def test_ideal_time_all_reduce():
    """2 S (1 - 1/P) / sum of bandwidths: 2 x 1e9 x 15/16 / 2e9 s."""
    assert ideal_time(NET, CollectiveOp.ALL_REDUCE, 10**9) == pytest.approx(15 / 16)


def test_order_mix_bound_is_tighter_than_ideal_when_bandwidths_are_extreme():
    """With a 1000x slower second dimension, no order mix can use the fast dimension enough:
    the LP bound exceeds the ideal."""
    net = Topology("skewed", (Dimension(DimKind.RING, 2, 1000e9), Dimension(DimKind.RING, 2, 1e9)))
    ideal = ideal_time(net, CollectiveOp.ALL_REDUCE, 10**9)
    assert order_mix_bound(net, CollectiveOp.ALL_REDUCE, 10**9) > 1.5 * ideal


def test_order_mix_bound_equals_ideal_on_balanced_paper_topology():
    """On the paper's topologies a perfect mix exists, so the bound equals the ideal."""
    net = load_topology("4D-Ring_FC_Ring_SW")
    assert order_mix_bound(net, CollectiveOp.ALL_REDUCE, 10**9) == pytest.approx(
        ideal_time(net, CollectiveOp.ALL_REDUCE, 10**9))
