"""The pipeline network model: per-GPU NICs shared across servers, FIFO streams, processor
sharing, max-min fair rates; worked out by hand."""

from __future__ import annotations

import pytest

from dlsched.errors import ConfigError
from dlsched.hardware.device_graph import server_graph
from dlsched.pipeline.simulation.network import PipelineNetwork, check_network
from dlsched.sim import Engine

GB = 1e9


def _graph():
    """Two servers of two GPUs: 10 GB/s inside, 1 GB/s NICs, 0.5 s NIC latency."""
    return server_graph("two", [(2, 1e12, 2**40, 10 * GB, 0.0)] * 2, GB, 0.5)


def _run(mode: str, sends: list[tuple[float, int, int, float, str]]) -> list[float]:
    """Issue ``(time, src, dst, bytes, stream)`` sends; return each one's arrival time."""
    engine, done = Engine(), {}
    network = PipelineNetwork(engine, _graph(), mode)
    for index, (at, src, dst, size, stream) in enumerate(sends):
        def arrived(index=index) -> None:
            done[index] = engine.now
        engine.at(at, network.send, src, dst, size, (stream, src), arrived)
    engine.run()
    return [done[i] for i in range(len(sends))]


def test_alone_a_transfer_takes_latency_plus_bytes_over_bandwidth() -> None:
    assert _run("fifo", [(0.0, 0, 2, GB, "p2p")]) == pytest.approx([1.5])
    assert _run("ps", [(0.0, 0, 1, GB, "p2p")]) == pytest.approx([0.1])


def test_one_gpu_nic_is_shared_by_its_transfers_to_other_servers() -> None:
    """GPU 0 sends 1 GB to GPUs 2 and 3 (other server) at once: one NIC, so under processor
    sharing both arrive at 0.5 + 2 s (a link per pair would give 1.5 s each); FIFO on one
    stream sends them one after the other; on two streams (pipeline and all-reduce) they
    share the NIC."""
    sends = [(0.0, 0, 2, GB, "p2p"), (0.0, 0, 3, GB, "p2p")]
    assert _run("ps", sends) == pytest.approx([2.5, 2.5])
    assert _run("fifo", sends) == pytest.approx([1.5, 2.5])
    mixed = [(0.0, 0, 2, GB, "p2p"), (0.0, 0, 3, GB, "allreduce")]
    assert _run("fifo", mixed) == pytest.approx([2.5, 2.5])


def test_ingress_is_shared_and_intra_server_links_are_not_nics() -> None:
    """GPUs 0 and 1 both send 1 GB to GPU 2: GPU 2's NIC ingress is shared (2.5 s each);
    GPU 0 -> 1 inside the server does not touch the NICs."""
    assert _run("fifo", [(0.0, 0, 2, GB, "p2p"), (0.0, 1, 2, GB, "p2p")]) == \
        pytest.approx([2.5, 2.5])
    assert _run("ps", [(0.0, 0, 2, GB, "p2p"), (0.0, 0, 1, GB, "x")]) == \
        pytest.approx([1.5, 0.1])


def test_max_min_fair_rates() -> None:
    """0 -> 2 and 1 -> 2 share GPU 2's ingress, 0 -> 3 shares GPU 0's egress with 0 -> 2:
    progressive filling gives each 0.5 GB/s (ingress 2 and egress 0 saturate together); the
    0.5 GB transfers finish at 0.5 + 1 s, then 0 -> 2's rest runs at the full 1 GB/s."""
    sends = [(0.0, 0, 2, GB, "a"), (0.0, 1, 2, 0.5 * GB, "b"), (0.0, 0, 3, 0.5 * GB, "c")]
    assert _run("ps", sends) == pytest.approx([2.0, 1.5, 1.5])


def test_conservation_bytes_over_a_nic() -> None:
    """However the sends interleave, a NIC moves at most 1 GB/s: four 1 GB sends from
    GPU 0 to the other server, issued at different times, end at 0.5 + 4 s at the earliest."""
    sends = [(t, 0, 2 + (i % 2), GB, "p2p" if i % 2 else "allreduce")
             for i, t in enumerate((0.0, 0.3, 0.7, 1.1))]
    for mode in ("fifo", "ps"):
        assert max(_run(mode, sends)) == pytest.approx(4.5)


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ConfigError,
                       match="network: unknown link sharing mode 'tcp'; accepted: fifo, ps"):
        check_network("tcp")
