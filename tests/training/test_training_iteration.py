"""Whole training iterations: hand-checked timelines, compute-only and ideal limits."""

import pytest

from dlsched.collectives import CollectiveOp
from dlsched.errors import ConfigError
from dlsched.hardware import Dimension, DimKind, Topology, load_topology
from dlsched.training import (
    TRAINING_POLICIES,
    Comm,
    Workload,
    WorkloadLayer,
    get_workload,
    run_policies,
    run_training,
)

MS = 1e-3


def _two_switch(bandwidth: float = 1e9, latency: float = 0.0) -> Topology:
    return Topology("pair", (Dimension(DimKind.SWITCH, 2, bandwidth, latency),))


def _dp_layers(count: int, num_bytes: int, update: float = 0.0) -> tuple[WorkloadLayer, ...]:
    return tuple(WorkloadLayer(f"l{i}", MS, MS, MS, update,
                               weight_grad_comm=Comm(CollectiveOp.ALL_REDUCE, num_bytes))
                 for i in range(count))


def test_two_layer_data_parallel_iteration_by_hand():
    """F0 F1 | WG1 (AR1 3-4.5 ms) IG1 | WG0 (AR0 5-6.5 ms) IG0; the next F0 waits for AR0:
    every iteration lasts 6.5 ms, 0.5 ms of it exposed communication."""
    workload = Workload("two", _dp_layers(2, 1_500_000))
    for policy in ("baseline", "themis", "dlsched"):
        result = run_training(workload, _two_switch(), policy, iterations=2, chunks=1)
        assert result.run.starts == pytest.approx((0.0, 6.5 * MS, 13 * MS))
        assert result.compute_s == pytest.approx(6 * MS)
        assert result.exposed_comm_s == pytest.approx(0.5 * MS)
    collectives = [s for s in result.timeline.spans if s.resource == "collectives"]
    assert [t for s in collectives[:2] for t in (s.start / MS, s.end / MS)] == pytest.approx(
        [3, 4.5, 5, 6.5])


@pytest.mark.parametrize("name", ["resnet152", "dlrm", "transformer-1t"])
def test_compute_only_iteration_is_the_sum_of_layer_times(name):
    """Without any collective the iteration is exactly the sum of every layer's compute."""
    workload = get_workload(name, 1024)
    bare = Workload(name, tuple(WorkloadLayer(layer.name, layer.forward_s, layer.input_grad_s,
                                              layer.weight_grad_s, layer.update_s)
                                for layer in workload.layers), workload.model_parallel)
    result = run_training(bare, load_topology("3D-FC_Ring_SW"), "baseline")
    assert result.iteration_s == pytest.approx(workload.compute_s, rel=1e-9)
    assert result.exposed_comm_s == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("policy", list(TRAINING_POLICIES))
def test_no_exposed_communication_on_an_infinitely_fast_network(policy):
    """Bandwidth 1e30 B/s and no latency: every collective takes ~0 s."""
    net = Topology("fast", (Dimension(DimKind.SWITCH, 16, 1e30), Dimension(DimKind.RING, 8, 1e30),
                            Dimension(DimKind.SWITCH, 8, 1e30)))
    full = get_workload("transformer-1t", net.num_npus)
    workload = Workload("t1t-head", full.layers[:5], full.model_parallel)
    result = run_training(workload, net, policy, chunks=4)
    assert result.exposed_comm_s == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize(("name", "topology"), [
    ("dlrm", "3D-FC_Ring_SW"), ("gnmt", "4D-Ring_FC_Ring_SW"), ("resnet152", "2D-SW_SW"),
])
def test_ideal_is_never_slower_than_any_policy(name, topology):
    """The Ideal network (summed bandwidth, no latency) bounds every policy, both latencies."""
    for scale in (0.0, 1.0):
        net = load_topology(topology).with_latency_scale(scale)
        workload = get_workload(name, net.num_npus)
        ideal = run_training(workload, net, "ideal", chunks=4).iteration_s
        assert ideal >= workload.compute_s * (1 - 1e-12)
        for policy in ("baseline", "themis", "themis-inflight", "dlsched"):
            assert run_training(workload, net, policy, chunks=4).iteration_s >= ideal * (1 - 1e-9)


def test_dlsched_is_never_slower_than_themis():
    """dlsched keeps the fastest of its candidates, one of which is Themis as published."""
    net = load_topology("3D-SW_SW_SW_hetero")
    for name in ("dlrm", "gnmt"):
        workload = get_workload(name, net.num_npus)
        themis = run_training(workload, net, "themis", chunks=16).iteration_s
        assert run_training(workload, net, "ours", chunks=16).iteration_s <= themis


def test_bad_inputs_name_the_field():
    """Unknown policy, bad counts and dangling consumers are rejected with the field named."""
    workload = Workload("two", _dp_layers(2, 1000))
    with pytest.raises(ConfigError, match="policy"):
        run_training(workload, _two_switch(), "fastest")
    with pytest.raises(ConfigError, match="iterations"):
        run_training(workload, _two_switch(), "themis", iterations=0)
    with pytest.raises(ConfigError, match="consumer"):
        Workload("bad", (WorkloadLayer("a", 1, 1, 1, forward_comm=Comm(
            CollectiveOp.ALL_TO_ALL, 10, consumer="nowhere")),))
    with pytest.raises(ConfigError, match="forward_s"):
        WorkloadLayer("a", float("nan"), 1, 1)


def test_comm_only_iteration_is_the_collective_time_by_hand():
    """Compute scaled to zero: one layer's 1.5 MB All-Reduce on 2 NPUs at 1 GB/s in one chunk
    sends 2 x 1/2 x 1.5 MB = 1.5 MB, so every iteration lasts 1.5 ms, all of it exposed."""
    workload = Workload("one", _dp_layers(1, 1_500_000, update=MS)).with_compute_scale(0.0)
    assert workload.compute_s == 0.0
    for policy in ("baseline", "themis", "dlsched", "ideal"):
        result = run_training(workload, _two_switch(), policy, iterations=2, chunks=1)
        assert result.iteration_s == pytest.approx(1.5 * MS)
        assert result.exposed_comm_s == pytest.approx(1.5 * MS)
    with pytest.raises(ConfigError, match="compute scale"):
        workload.with_compute_scale(-1.0)


def test_run_policies_equals_separate_runs_with_and_without_timeline():
    """Policies simulated together (Themis shared with dlsched's candidates), with or without
    a recorded timeline, give each policy the numbers of its own run."""
    net = load_topology("3D-SW_SW_SW_hetero")
    workload = get_workload("dlrm", net.num_npus)
    names = ["baseline", "themis", "dlsched", "ideal"]
    together = run_policies(workload, net, names, chunks=8, record=False)
    for name, result in zip(names, together, strict=True):
        alone = run_training(workload, net, name, chunks=8)
        assert result.iteration_s == alone.iteration_s
        assert [name for name, _ in result.dims] == [name for name, _ in alone.dims]
        assert [u for _, u in result.dims] == pytest.approx([u for _, u in alone.dims])
        assert alone.timeline.spans and not result.timeline.spans

