"""Every collective of a job priced by the collectives layer on the links its group spans.

A ``CollectiveCurve`` is one group's cost of one operation under one collective policy: the
collectives simulator (``collectives.run_collective``: the policy's chunk schedule over the
group's dimensions, intra-dimension SCF) run at a few buffer sizes and interpolated linearly
between them (the end segments extended). On one dimension the simulated time is affine in the
buffer size (fixed latencies, transfers that scale), so two sizes price it exactly; across
several dimensions a policy's choices change with the size, so the curve takes every factor of
4 from 1 MiB to 16 GiB (``tests/job/test_collective_costs.py`` checks both against direct
simulation between the points). Chunks: one on a group of one dimension (chunking a single
dimension only repeats its latency), ``MULTI_DIM_CHUNKS`` on groups across several (what
``dataparallel --network topology:`` uses). Curves are kept
per (group network, operation, policy): an evaluation of a layout reuses every curve an
earlier one built.

On a node preset's cluster (``job.cluster``: NVIDIA GPUs, a group is an ``NcclGroup``) the
``baseline`` policy's all-reduce, all-gather and reduce-scatter are NCCL's: the curve is
``job.communication.nccl_costs`` (NCCL's own tuner model: ring, tree or NVLS with LL, LL128 or
Simple, whichever it predicts fastest, across nodes through the NICs) at every quarter power of
two from 64 B to 64 GiB (``NCCL_SIZES``), interpolated as above; its all-to-all is NCCL's
grouped point-to-point exchange (``collectives.nccl_alltoall``: each peer its share directly,
NVLink peers and NIC peers at once). Other policies (Themis, ours: chunk schedules NCCL does
not run) and topology files keep the simulated curve.

``CurveComm`` adapts a curve to the data-parallel domain's cost-model protocol
(``dataparallel.comm``), so the DP policies order and split a stage's gradient buckets on it.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from functools import lru_cache

from dlsched.collectives import CollectiveOp, ideal_time, run_collective
from dlsched.collectives.nccl_alltoall import nccl_alltoall_seconds
from dlsched.hardware import Topology
from dlsched.job.communication.nccl_costs import OPS as NCCL_OPS
from dlsched.job.communication.nccl_costs import NcclGroup, nccl_seconds
from dlsched.job.run_choices import check_setting

ONE_DIM_SIZES = (2**26, 2**30)  # bytes: 64 MiB and 1 GiB
MULTI_DIM_SIZES = tuple(2**k for k in range(20, 35, 2))  # bytes: 1 MiB, 4 MiB, ..., 16 GiB
MULTI_DIM_CHUNKS = 16
NCCL_SIZES = tuple(sorted({round(2 ** (k / 4)) for k in range(24, 145)}))  # 64 B to 64 GiB


@dataclass(frozen=True)
class CollectiveCurve:
    """Simulated ``seconds`` at buffer ``sizes`` (bytes, ascending), interpolated (see the
    module docstring)."""

    topology: Topology | None
    op: str
    policy: str
    sizes: tuple[int, ...]
    times: tuple[float, ...]

    @property
    def latency(self) -> float:
        """Seconds of the curve's first segment extended to an empty buffer (at least 0)."""
        return max(0.0, self._line(0)[0])

    def _line(self, segment: int) -> tuple[float, float]:
        """(intercept s, slope s/B) of segment ``segment``."""
        (x0, x1), (y0, y1) = self.sizes[segment:segment + 2], self.times[segment:segment + 2]
        slope = (y1 - y0) / (x1 - x0)
        return y0 - x0 * slope, slope

    def seconds(self, num_bytes: float) -> float:
        """Seconds of the collective on a per-NPU buffer of ``num_bytes`` (0 for none or a
        group of one)."""
        if num_bytes <= 0 or self.topology is None:
            return 0.0
        segment = bisect_left(self.sizes, num_bytes, 1, len(self.sizes) - 1) - 1
        intercept, slope = self._line(segment)
        return max(0.0, intercept + slope * num_bytes)


def chunks_for(topology: Topology) -> int:
    """Chunks a collective on ``topology`` is split into (module docstring)."""
    return 1 if len(topology.dims) == 1 else MULTI_DIM_CHUNKS


@lru_cache(maxsize=4096)
def curve(topology: Topology | None, op: str, policy: str) -> CollectiveCurve:
    """The cost curve of ``op`` on ``topology`` under ``policy`` (kept per arguments; free
    on a group of one, ``None``)."""
    check_setting("collective_policy", policy)
    if topology is None:
        return CollectiveCurve(None, op, policy, ONE_DIM_SIZES, (0.0, 0.0))
    if policy == "baseline" and op in NCCL_OPS and isinstance(topology, NcclGroup) \
            and topology.node is not None:
        return CollectiveCurve(topology, op, policy, NCCL_SIZES,
                               tuple(nccl_seconds(topology, op, size) for size in NCCL_SIZES))
    if policy == "baseline" and op == "all-to-all" and isinstance(topology, NcclGroup) \
            and topology.node is not None:
        return CollectiveCurve(topology, op, policy, NCCL_SIZES, tuple(
            nccl_alltoall_seconds(topology.node, size, topology.ranks_per_node, topology.nodes)
            for size in NCCL_SIZES))
    sizes = ONE_DIM_SIZES if len(topology.dims) == 1 else MULTI_DIM_SIZES
    chunks = chunks_for(topology)
    times = tuple(run_collective(topology, op, size, chunks, policy, "scf").time_s
                  for size in sizes)
    return CollectiveCurve(topology, op, policy, sizes, times)


@dataclass(frozen=True)
class CurveComm:
    """A collective curve as a data-parallel cost model: every message costs the curve's
    seconds; the latency part is the curve's intercept."""

    curve: CollectiveCurve
    name: str = "curve"

    def cost(self, num_bytes: float) -> float:
        """Seconds of one message of ``num_bytes``."""
        return self.curve.seconds(num_bytes)

    def split(self, num_bytes: float) -> tuple[float, float]:
        """(latency, transfer) seconds of one message."""
        total = self.cost(num_bytes)
        latency = min(total, self.curve.latency)
        return latency, total - latency

    def lower(self, total_bytes: float, messages: int = 1, in_flight: int = 1) -> float:
        """The operation's ideal time on the group (bytes over the sum of its bandwidths):
        no split of ``total_bytes`` into messages beats it."""
        if total_bytes <= 0 or self.curve.topology is None:
            return 0.0
        return ideal_time(self.curve.topology, CollectiveOp(self.curve.op),
                          max(1, round(total_bytes)))
