"""Sub-topology collectives and concurrent collectives on shared dimensions."""

import pytest

from dlsched.collectives import CollectiveOp
from dlsched.collectives.network import Network
from dlsched.collectives.plan import ChunkRoute, CollectivePlan, route_from_order
from dlsched.collectives.simulate import plan_flows
from dlsched.errors import ConfigError
from dlsched.hardware import Dimension, DimKind, Topology, load_topology
from dlsched.sim import Engine
from dlsched.training import Comm, Workload, WorkloadLayer, run_training, subtopology
from dlsched.training.groups import group_sizes


def test_groups_of_a_128_way_model_parallel_split():
    """16x64: 16 x 8-of-64 model parallel, 8-of-64 data parallel; 4x4x8x8: whole dims."""
    assert group_sizes(load_topology("2D-SW_SW"), 128) == ([16, 8], [1, 8])
    assert group_sizes(load_topology("4D-Ring_SW_SW_SW"), 128) == ([4, 4, 8, 1], [1, 1, 1, 8])
    sub = subtopology(load_topology("2D-SW_SW"), "dp", 128)
    assert sub.dim_map == (1,) and sub.topology.dims[0].size == 8
    with pytest.raises(ConfigError, match="model_parallel"):
        group_sizes(load_topology("2D-SW_SW"), 24)


def test_sub_topology_collective_moves_the_formula_bytes():
    """An All-Reduce of S over the 128-NPU model-parallel group of 16x8x8 sends, per NPU,
    2 x S x 15/16 on dim 1 and 2 x S/16 x 7/8 on dim 2, nothing on dim 3."""
    size = 16 * 8 * 10**6
    net = load_topology("3D-SW_SW_SW_homo")
    layer = WorkloadLayer("l", 0.0, 0.0, 0.0,
                          forward_comm=Comm(CollectiveOp.ALL_REDUCE, size, "mp"))
    result = run_training(Workload("mp", (layer,), 128), net, "baseline", iterations=1,
                          chunks=1)
    sent = result.timeline.bytes_by_resource()
    assert sent["dim1 SW"] == pytest.approx(2 * size * 15 / 16, abs=2)
    assert sent["dim2 SW"] == pytest.approx(2 * size / 16 * 7 / 8, abs=2)
    assert "dim3 SW" not in sent


@pytest.mark.parametrize("concurrency", [1, 2])
def test_two_concurrent_collectives_on_one_dimension_take_the_sum_of_bytes(concurrency):
    """Two All-Reduces issued together on one 4-NPU ring finish after (b1 + b2) / bandwidth,
    b = 2 S (P - 1)/P, whether they share the bandwidth or queue."""
    net = Topology("ring", (Dimension(DimKind.RING, 4, 1e9),))
    engine = Engine()
    network = Network(engine, net, concurrency)
    sizes = (3 * 10**6, 5 * 10**6)
    for size in sizes:
        route = ChunkRoute(0, size, route_from_order(CollectiveOp.ALL_REDUCE, (0,)))
        network.submit(plan_flows(CollectivePlan(net, CollectiveOp.ALL_REDUCE, size, (route,))))
    end = engine.run()
    assert end == pytest.approx(sum(2 * s * 3 / 4 for s in sizes) / 1e9)


def test_astra_workload_collectives_span_astra_sim_dimensions():
    """DATA: weight gradients on every dimension; HYBRID_TRANSFORMER: forward collectives on
    the model-parallel leading dimensions, weight gradients on the rest."""
    from dlsched.interop import read_astra_network, read_astra_workload
    from dlsched.training.astra import workload_from_astra

    net = read_astra_network("examples/astra/network_3d.yml")
    data = workload_from_astra(read_astra_workload("examples/astra/workload_data.txt"), net)
    assert data.layers[0].weight_grad_comm.dims == tuple(range(len(net.dims)))
    hybrid = read_astra_workload("examples/astra/workload_transformer.txt")
    workload = workload_from_astra(hybrid, net)
    forward = [subtopology(net, layer.forward_comm.group, workload.model_parallel).dim_map
               for layer in workload.layers if layer.forward_comm]
    weights = [subtopology(net, layer.weight_grad_comm.group, workload.model_parallel).dim_map
               for layer in workload.layers if layer.weight_grad_comm]
    assert forward and weights
    assert set(forward[0]).isdisjoint(weights[0])
    assert sorted(forward[0] + weights[0]) == list(range(len(net.dims)))
