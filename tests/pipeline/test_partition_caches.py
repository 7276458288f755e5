"""Range costs and partition rankings shared by the planners of one instance (issue 23, item
4): on GPUs of equal FLOP/s DAPPLE's and PipeDream's identical-GPU pricing is dlsched's, so
one table and one ranking serve them all; on mixed GPUs they stay apart."""

from __future__ import annotations

from dlsched.hardware.device_graph import server_graph
from dlsched.pipeline import PipelineProblem
from dlsched.pipeline.chain import synthetic_chain
from dlsched.pipeline.estimate import best_sync_partitions
from dlsched.pipeline.partition import range_costs


def _problem(flops: tuple[float, float]) -> PipelineProblem:
    chain = synthetic_chain([1e-3, 2e-3, 1e-3, 3e-3, 2e-3, 1e-3], [2e-3, 4e-3, 2e-3, 6e-3, 4e-3,
                                                                   2e-3],
                            [1e7] * 6, [1e8] * 6)
    graph = server_graph("two", [(4, flops[0], 2**40, 1e11, 1e-6), (4, flops[1], 2**40, 1e11,
                                                                     1e-6)], 1e10, 1e-5)
    return PipelineProblem(chain, graph, 8)


def test_identical_pricing_shares_the_table_only_where_it_changes_nothing() -> None:
    """Equal GPUs: one table for both pricings, and each keep is the prefix of one ranking,
    equal to the ranking on a fresh instance. Mixed GPUs: two tables whose periods differ."""
    order = list(range(8))
    equal = _problem((1e12, 1e12))
    shared = range_costs(equal, order, identical=True)
    assert range_costs(equal, order, identical=False) is shared
    ranking = best_sync_partitions(equal, shared, 5)
    assert best_sync_partitions(equal, shared, 1, identical=True) == ranking[:1]
    fresh = _problem((1e12, 1e12))
    assert best_sync_partitions(fresh, range_costs(fresh, order, identical=True), 5) == ranking
    mixed = _problem((1e12, 2e12))
    alike, actual = (range_costs(mixed, order, identical=flag) for flag in (True, False))
    assert alike is not actual
    assert any((alike.runs[run].period != actual.runs[run].period).any() for run in actual.runs)
