"""What the planners of one instance share (issue 23, item 4): balanced cuts of several
weightings found together are each the min-max optimum; on GPUs of equal FLOP/s
DAPPLE's and PipeDream's identical-GPU pricing is dlsched's, so one range-cost table and one
ranking serve them all (on mixed GPUs they stay apart); schedules are written once per layout
(stages' GPUs, split and the other arguments), whatever the stages' blocks."""

from __future__ import annotations

from dlsched.hardware.device_graph import server_graph
from dlsched.pipeline import PipelineProblem, Stage
from dlsched.pipeline.chains.chain import synthetic_chain
from dlsched.pipeline.planners.estimate import best_sync_partitions
from dlsched.pipeline.planners.partition import balanced_partitions, range_costs, replica_load
from dlsched.pipeline.plans.schedules import interleaved_orders, one_f_one_b_orders, zb_h1_orders


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


def test_orders_are_written_once_per_layout_and_equal_fresh_ones() -> None:
    """The same GPUs and split with other blocks give the kept orders, equal to writing them
    afresh; other GPUs, caps, split or options give other orders."""
    stages = (Stage(0, 2, (0, 1)), Stage(2, 5, (2,)), Stage(5, 6, (3,)))
    moved = (Stage(0, 1, (0, 1)), Stage(1, 3, (2,)), Stage(3, 6, (3,)))
    for make in (one_f_one_b_orders, zb_h1_orders):
        kept = make(stages, 4, 6, (2, 1, 1))
        assert make(moved, 4, 6, (2, 1, 1)) is kept
        assert make.__wrapped__(moved, 4, 6, (2, 1, 1)) == kept
        assert make(stages, 4, 6) != kept
        other = (Stage(0, 2, (1, 0)), *stages[1:])
        assert make(other, 4, 6, (2, 1, 1)) == make.__wrapped__(other, 4, 6, (2, 1, 1)) != kept
    assert zb_h1_orders(stages, 4, 6, doubled=True) != zb_h1_orders(stages, 4, 6)
    groups = ((0, 1), (2, 3))
    assert interleaved_orders(2, 6, groups, 4) is interleaved_orders(2, 6, [[0, 1], [2, 3]], 4)


def test_balanced_cuts_found_together_are_each_the_min_max_optimum() -> None:
    """Six blocks on three groups (one of two replicas) under five weightings, cut in one
    batch: each partition's slowest stage (work x replica load x weight) is the smallest over
    every cut of the blocks into three non-empty ranges."""
    problem = _problem((1e12, 2e12))
    groups = [(0, 1), (4,), (5,)]
    weightings = [None, [1.0, 1.0, 2.0], [2.0, 1.0, 1.0], [1.5, 1.5, 1.0], [1.0, 3.0, 1.0]]
    work = problem.chain.forward_flops + problem.chain.backward_flops
    loads = [replica_load(problem.gpu_flops[list(group)], 8) for group in groups]
    for weights, stages in zip(weightings, balanced_partitions(problem, groups, weightings),
                               strict=True):
        factors = [load * (weights[k] if weights else 1.0) for k, load in enumerate(loads)]

        def slowest(cuts: tuple[int, ...], factors: list[float] = factors) -> float:
            bounds = (0, *cuts, 6)
            return max(work[bounds[k]:bounds[k + 1]].sum() * factors[k] for k in range(3))
        best = min(slowest((a, b)) for a in range(1, 5) for b in range(a + 1, 6))
        assert [st.devices for st in stages] == groups
        assert slowest((stages[1].first, stages[2].first)) == best
