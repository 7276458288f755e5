"""What ``dlsched train`` simulates, built from its options: the workload, the topology (a
preset or an ASTRA-sim network file), chunking, and ASTRA-sim's system settings and
emulation when asked. The CLI and the sweep's training domain both build it here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dlsched.collectives import CollectiveOp
from dlsched.collectives.astra_compat import AstraCompat
from dlsched.errors import ConfigError
from dlsched.hardware import Topology, load_topology
from dlsched.interop import (
    AstraSystem,
    astra_notes,
    read_astra_network,
    read_astra_system,
    read_astra_workload,
)
from dlsched.training.astra import workload_from_astra
from dlsched.training.workload import Workload
from dlsched.training.workloads import get_workload

LATENCIES = {"table": 1.0, "zero": 0.0}
"""``--latency``: the topology's step latencies as tabled, or none (a factor on each)."""


@dataclass(frozen=True)
class TrainingSetup:
    """A workload on a topology, ``chunks`` per collective and ``concurrency`` chunks per
    dimension (an ASTRA-sim system file overrides both), ``compat`` (ASTRA-sim emulation or
    None), ``op_topologies`` (a system file's per-collective algorithms) and the ``system``."""

    workload: Workload
    topology: Topology
    chunks: int
    concurrency: int
    compat: AstraCompat | None
    op_topologies: Mapping[CollectiveOp, Topology] | None
    system: AstraSystem | None

    def notes(self, policies: Sequence[str]) -> list[str]:
        """The system file's unmodelled settings and the ASTRA-sim behaviours that would change
        this run under ``policies`` (``--astra-compat`` emulates them)."""
        ops = {comm.op for layer in self.workload.layers for comm in layer.comms().values()}
        return astra_notes(self.system, self.topology, ops, policies)


def training_setup(workload: str, topology: str, latency: str = "table",
                   latency_scale: float = 1.0, chunks: int = 64, concurrency: int = 1,
                   astra_network: str | Path | None = None,
                   astra_system: str | Path | None = None,
                   astra_workload: str | Path | None = None,
                   astra_compat: bool = False) -> TrainingSetup:
    """The setup of a training simulation; ``latency`` ('table' or 'zero') and
    ``latency_scale`` multiply every step latency of the topology. ConfigError naming the
    option on bad input."""
    if latency not in LATENCIES:
        raise ConfigError(f"latency: unknown setting {latency!r}; accepted: 'table', 'zero'")
    net = load_topology(topology) if astra_network is None else \
        read_astra_network(Path(astra_network))
    net = net.with_latency_scale(LATENCIES[latency] * latency_scale)
    system = None if astra_system is None else read_astra_system(Path(astra_system))
    op_topologies = None
    if system is not None:
        op_topologies = {op: system.apply(net, op) for op in CollectiveOp}
        net = op_topologies[CollectiveOp.ALL_REDUCE]
        chunks, concurrency = system.chunks, system.concurrency
    compat = None
    if astra_compat:
        compat = AstraCompat() if system is None else system.compat()
    if astra_workload is None:
        job = get_workload(workload, net.num_npus)
    else:
        path = Path(astra_workload)
        job = workload_from_astra(read_astra_workload(path), net, path.stem)
    return TrainingSetup(job, net, chunks, concurrency, compat, op_topologies, system)
