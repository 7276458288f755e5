"""The latency-aware lower bound: hand-computed values, and never beaten by any plan."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.collectives import (
    ChunkRoute,
    CollectiveOp,
    CollectivePlan,
    IntraPolicy,
    Phase,
    Stage,
    latency_bound,
    order_mix_bound,
    run_collective,
    score_plan,
)
from dlsched.collectives.plan import route_from_order
from dlsched.hardware import Dimension, DimKind, Topology, load_topology

US = 1e-6


def test_single_ring_by_hand():
    """One ring of 4, 1 us steps, 1 GB/s, 1 MB All-Reduce: the RS transfer (0.75 ms) can start
    after its 3 us of steps, the AG's 0.75 ms after 6 us and must leave nothing behind; the
    binding window is [3 us, T]: both transfers (1.5 ms) after the first 3 us."""
    net = Topology("ring", (Dimension(DimKind.RING, 4, 1e9, US),))
    assert latency_bound(net, CollectiveOp.ALL_REDUCE, 10**6) == pytest.approx(3 * US + 1.5e-3)
    # A 1-byte buffer: the AG's transfer (0.75 B) still needs its 6 us release.
    assert latency_bound(net, CollectiveOp.ALL_REDUCE, 1) == pytest.approx(6 * US + 0.75e-9)


def test_single_ring_bound_is_reached_by_one_chunk_when_latency_dominates():
    """One chunk on one ring takes exactly 6 steps + bytes / bandwidth; with a 4-byte buffer
    the bound (6 steps + the AG's transfer) is within the RS transfer of it."""
    net = Topology("ring", (Dimension(DimKind.RING, 4, 1e9, US),))
    result = run_collective(net, "all-reduce", 4, 1, "baseline", "fifo")
    assert result.time_s == pytest.approx(6 * US + 6e-9)
    assert result.bound_s == pytest.approx(6 * US + 3e-9)


def test_two_dimensions_by_hand():
    """Ring 4 (1 us steps, 3 steps) x Switch 8 (2 us steps, halving-doubling: 3 steps), 1 GB/s
    each, a 16-byte RS: every chunk pays 3 + 6 = 9 us of steps; the bytes are negligible, so the
    bound is the latency path plus the last stage's transfer, whichever dimension is last."""
    net = Topology("2d", (Dimension(DimKind.RING, 4, 1e9, US),
                          Dimension(DimKind.SWITCH, 8, 1e9, 2 * US)))
    bound = latency_bound(net, CollectiveOp.REDUCE_SCATTER, 16)
    assert 9 * US <= bound <= 9 * US + 16e-9


def test_window_constraint_by_hand():
    """Ring 2 (10 us step) x Ring 2 (no latency), 1 GB/s each, 1 MB Reduce-Scatter. Each byte
    sends 1/2 on its first dimension and 1/4 on its second. Dimension 1's transfers are released
    10 us after their chunk starts (dimension 1 first) or 10 us after it (second): so
    T >= 10 us + dimension 1's load. The best mix puts dimension 1 second for all bytes (load
    0.25 ms) but then dimension 2 carries 0.5 ms; splitting x of the bytes dimension-1-first:
    dim1: 10 us + (0.5x + 0.25(1-x)) ms, dim2: (0.25x + 0.5(1-x)) ms; equal at x = 0.48."""
    net = Topology("2x2", (Dimension(DimKind.RING, 2, 1e9, 10 * US),
                           Dimension(DimKind.RING, 2, 1e9, 0.0)))
    x = 0.48
    expected = (0.25 * x + 0.5 * (1 - x)) * 1e-3
    assert latency_bound(net, CollectiveOp.REDUCE_SCATTER, 10**6) == pytest.approx(expected)
    assert order_mix_bound(net, CollectiveOp.REDUCE_SCATTER, 10**6) == pytest.approx(0.375e-3)


def test_equals_bandwidth_bound_without_latency():
    net = load_topology("4D-Ring_FC_Ring_SW").with_latency_scale(0)
    for op in CollectiveOp:
        assert latency_bound(net, op, 10**8) == order_mix_bound(net, op, 10**8)


def test_paper_topology_values():
    """Table latencies: 1 MB All-Reduce is latency-bound (>= 15.92 us of steps on its path:
    RS 60 + 700 + 2100 + 5100 ns, then the same for AG); 1 GB is bandwidth-bound."""
    net = load_topology("4D-Ring_FC_Ring_SW")
    assert latency_bound(net, CollectiveOp.ALL_REDUCE, 10**6) >= 15.92 * US
    big = latency_bound(net, CollectiveOp.ALL_REDUCE, 10**9)
    assert big == pytest.approx(order_mix_bound(net, CollectiveOp.ALL_REDUCE, 10**9), rel=1e-3)


dimensions = st.builds(
    lambda kind, exponent, bw, lat: Dimension(kind, 2**exponent, bw * 1e9, lat * 1e-9),
    st.sampled_from(list(DimKind)), st.integers(1, 2), st.floats(10, 400),
    st.sampled_from([0.0, 20.0, 700.0, 1700.0, 20000.0]))


@st.composite
def plans(draw) -> CollectivePlan:
    """Any plan the simulator accepts: random topology, chunk sizes, per-chunk RS/AG orders
    (an All-Reduce's AG need not mirror its RS), concurrency and intra-dimension order."""
    dims = tuple(draw(st.lists(dimensions, min_size=1, max_size=3)))
    net = Topology("random", dims)
    op = draw(st.sampled_from(list(CollectiveOp)))
    sizes = draw(st.lists(st.integers(1, 10**7), min_size=1, max_size=8))
    orders = list(itertools.permutations(range(len(dims))))
    routes = []
    for index, size in enumerate(sizes):
        order = draw(st.sampled_from(orders))
        ag_order = draw(st.sampled_from(orders)) if op is CollectiveOp.ALL_REDUCE else None
        routes.append(ChunkRoute(index, size, route_from_order(op, order, ag_order)))
    return CollectivePlan(net, op, sum(sizes), tuple(routes),
                          draw(st.sampled_from(list(IntraPolicy))), draw(st.integers(1, 6)))


@settings(max_examples=150, deadline=None)
@given(plan=plans())
def test_no_plan_beats_the_bound(plan):
    """Whatever the chunking, orders, concurrency and intra order: time >= bound >= BW bound."""
    result = score_plan(plan)
    assert result.bound_s >= result.bandwidth_bound_s * (1 - 1e-12)
    assert result.time_s >= result.bound_s * (1 - 1e-9)


def test_stage_helpers_used_by_the_bound_match_the_simulator():
    """Sanity: a one-stage Reduce-Scatter on a switch of 8 pays 3 steps then its bytes."""
    net = Topology("sw", (Dimension(DimKind.SWITCH, 8, 1e9, US),))
    plan = CollectivePlan(net, CollectiveOp.REDUCE_SCATTER, 8000,
                          (ChunkRoute(0, 8000, (Stage(Phase.REDUCE_SCATTER, 0),)),))
    result = score_plan(plan)
    assert result.time_s == pytest.approx(3 * US + 7000e-9)
    assert result.bound_s == pytest.approx(result.time_s)
