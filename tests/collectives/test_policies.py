"""Conformance of every collective policy, the paper's worked example and closed forms."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.collectives import (
    POLICIES,
    CollectiveOp,
    run_collective,
    validate_plan,
)
from dlsched.collectives.algorithms import Phase, stage_time
from dlsched.hardware import Dimension, DimKind, Topology, load_topology

MB = 2**20


def _worked_example() -> Topology:
    """Themis paper: a 4x4 network with BW(dim1) = 2 BW(dim2), zero latency."""
    return Topology("4x4", (Dimension(DimKind.SWITCH, 4, 2e9), Dimension(DimKind.SWITCH, 4, 1e9)))


# One time unit of the example: the RS of a 64 MB chunk on dim1 (48 MB at 2 GB/s).
UNIT = 48 * MB / 2e9


@pytest.mark.parametrize(("policy", "intra", "units"), [
    ("baseline", "fifo", 8), ("baseline", "scf", 8), ("themis", "fifo", 8),
    ("themis", "scf", 7),
])
def test_paper_worked_example(policy, intra, units):
    """256 MB AR in 4 chunks: baseline 8 units; Themis 7 under SCF (FIFO service keeps 8)."""
    result = run_collective(_worked_example(), "all-reduce", 256 * MB, 4, policy, intra)
    assert result.time_s == pytest.approx(units * UNIT)


def test_themis_orders_and_loads_of_worked_example():
    """Chunk 1 baseline order, chunk 2 starts on dim2, chunks 3-4 on dim1; loads 6.5 and 7."""
    result = run_collective(_worked_example(), "all-reduce", 256 * MB, 4, "themis", "scf")
    firsts = [route.stages[0].dim for route in result.plan.routes]
    assert firsts == [0, 1, 0, 0]
    busy = [dim.num_bytes / bw / UNIT for dim, bw in zip(result.dims, (2e9, 1e9), strict=True)]
    assert busy == pytest.approx([6.5, 7.0], rel=1e-6)


def test_one_chunk_baseline_equals_closed_form():
    """One chunk: RS dim1..dimD then AG dimD..dim1, each stage alone on its dimension."""
    net = load_topology("4D-Ring_FC_Ring_SW")
    size = 10**9
    expected, data = 0.0, float(size)
    for dim in net.dims:
        expected += 2 * stage_time(dim, Phase.REDUCE_SCATTER, data)  # AG mirrors the RS
        data /= dim.size
    result = run_collective(net, "all-reduce", size, 1, "baseline", "fifo")
    assert result.time_s == pytest.approx(expected)


topologies = st.lists(
    st.builds(
        lambda kind, exponent, bw, lat: Dimension(kind, 2**exponent, bw * 1e9, lat * 1e-9),
        st.sampled_from(list(DimKind)), st.integers(1, 3), st.floats(10, 400),
        st.sampled_from([0.0, 20.0, 700.0, 1700.0])),
    min_size=1, max_size=3,
).map(lambda dims: Topology("random", tuple(dims)))


@settings(max_examples=40, deadline=None)
@given(net=topologies, op=st.sampled_from(list(CollectiveOp)),
       size=st.integers(10**6, 10**9), chunks=st.integers(1, 12),
       policy=st.sampled_from(list(POLICIES)), intra=st.sampled_from(["fifo", "scf"]),
       concurrency=st.integers(1, 3))
def test_every_policy_is_valid_conserves_bytes_and_respects_bounds(net, op, size, chunks,
                                                                   policy, intra, concurrency):
    """Valid plan; bytes sent equal the order-independent total; time >= bound >= ideal."""
    result = run_collective(net, op, size, chunks, policy, intra, concurrency)
    validate_plan(result.plan)
    assert sum(r.size for r in result.plan.routes) == size
    sent = sum(result.timeline.bytes_by_resource().values())
    assert sent == pytest.approx(result.bytes_per_npu, abs=len(result.timeline))
    assert result.bound_s >= result.ideal_s * (1 - 1e-12)
    assert result.time_s >= result.bound_s * (1 - 1e-9)


@settings(max_examples=25, deadline=None)
@given(net=topologies, size=st.integers(10**6, 10**9), chunks=st.integers(1, 32))
def test_all_reduce_sends_2s_1_minus_1_over_p(net, size, chunks):
    """Every policy sends 2 S (1 - 1/P) bytes per NPU for an All-Reduce."""
    expected = 2 * size * (1 - 1 / net.num_npus)
    for policy in POLICIES:
        result = run_collective(net, "all-reduce", size, chunks, policy, "scf")
        assert result.bytes_per_npu == pytest.approx(expected)
        assert sum(d.num_bytes for d in result.dims) == pytest.approx(
            expected, abs=len(result.timeline))


@settings(max_examples=25, deadline=None)
@given(net=topologies, size=st.integers(10**6, 10**9), chunks=st.integers(2, 32),
       intra=st.sampled_from(["fifo", "scf"]))
def test_dlsched_is_never_slower_than_themis(net, size, chunks, intra):
    """Themis's plan is one of dlsched's candidates, so dlsched is never slower."""
    themis = run_collective(net, "all-reduce", size, chunks, "themis", intra)
    ours = run_collective(net, "all-reduce", size, chunks, "dlsched", intra)
    assert ours.time_s <= themis.time_s * (1 + 1e-12)


def test_determinism():
    """The same inputs give the same plan and the same timeline, span for span."""
    net = load_topology("3D-FC_Ring_SW")
    runs = [run_collective(net, "all-reduce", 3 * 10**8, 32, "dlsched", "scf")
            for _ in range(2)]
    assert runs[0].plan == runs[1].plan
    assert runs[0].timeline.spans == runs[1].timeline.spans


def test_themis_beats_baseline_on_unbalanced_network():
    """On 3D-SW_SW_SW_homo (zero latency) the baseline uses ~35% of the bandwidth and
    Themis+SCF more than 90%."""
    net = load_topology("3D-SW_SW_SW_homo").with_latency_scale(0)
    baseline = run_collective(net, "all-reduce", 10**9, 64, "baseline", "fifo")
    themis = run_collective(net, "all-reduce", 10**9, 64, "themis", "scf")
    assert 0.30 < baseline.utilization < 0.40
    assert themis.utilization > 0.90


def test_standalone_all_gather_goes_most_loaded_first():
    """A standalone AG's baseline runs dim D..1 and Themis's load-ordered AG stays valid."""
    net = load_topology("3D-SW_SW_SW_hetero")
    base = run_collective(net, "all-gather", 10**8, 8, "baseline", "fifo")
    assert [s.dim for s in base.plan.routes[0].stages] == [2, 1, 0]
    themis = run_collective(net, "all-gather", 10**8, 8, "themis", "scf")
    assert math.isclose(themis.bytes_per_npu, 10**8 * (1 - 1 / 1024))
