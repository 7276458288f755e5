"""Plan, simulate and score a collective in one call: the public entry point of the domain."""

from __future__ import annotations

from dataclasses import dataclass

from dlsched.collectives.astra_compat import AstraCompat
from dlsched.collectives.bounds import bytes_per_npu, ideal_time, latency_bound, order_mix_bound
from dlsched.collectives.plan import (
    CollectiveOp,
    CollectivePlan,
    IntraPolicy,
    equal_chunks,
    validate_plan,
)
from dlsched.collectives.policies import POLICIES
from dlsched.collectives.request import CollectiveRequest
from dlsched.collectives.simulate import dim_resource, execute_plan
from dlsched.errors import ConfigError
from dlsched.hardware.topology import Topology
from dlsched.sim.timeline import Timeline
from dlsched.validation import CHUNKS, CONCURRENCY, MESSAGE_SIZE


@dataclass(frozen=True)
class DimensionStats:
    """One dimension's share of the work: bytes sent per NPU, busy fraction (any stage active,
    latency included) and bandwidth utilization (bytes / (bandwidth x time))."""

    name: str
    num_bytes: int
    busy_fraction: float
    bandwidth_utilization: float


@dataclass(frozen=True)
class CollectiveResult:
    """Outcome of one collective: times in seconds, utilization as a fraction. ``ideal_s`` is
    the paper's ideal, ``bandwidth_bound_s`` the order-mix bound (bandwidth only) and
    ``bound_s`` the latency-aware bound (bandwidth plus the latency no plan can hide)."""

    plan: CollectivePlan
    timeline: Timeline
    time_s: float
    ideal_s: float
    bandwidth_bound_s: float
    bound_s: float
    bytes_per_npu: float
    dims: tuple[DimensionStats, ...]
    events: int

    @property
    def utilization(self) -> float:
        """Bandwidth utilization: ideal time / actual time (the Themis paper's metric)."""
        return self.ideal_s / self.time_s

    @property
    def time_over_bound(self) -> float:
        """Actual time / the provable latency-aware lower bound (>= 1)."""
        return self.time_s / self.bound_s

    def row(self, chunks: int, concurrency: int) -> dict[str, object]:
        """The one flat record of a collective, for tables, CSV, JSON and sweeps (seconds,
        bytes, fractions): ``chunks`` and ``concurrency`` as asked, ``plan_chunks`` and
        ``plan_concurrency`` as the policy used them (``dlsched`` may use more), and per
        dimension the bytes sent per NPU, busy fraction and bandwidth utilization."""
        plan = self.plan
        record: dict[str, object] = {
            "topology": plan.topology.name, "op": plan.op.value, "size_bytes": plan.size,
            "chunks": chunks, "policy": plan.policy, "intra": plan.intra.value,
            "concurrency": concurrency, "time_s": self.time_s, "ideal_s": self.ideal_s,
            "bandwidth_bound_s": self.bandwidth_bound_s, "bound_s": self.bound_s,
            "utilization": self.utilization,
            "time_over_bound": self.time_over_bound, "bytes_per_npu": self.bytes_per_npu,
        }
        for index, dim in enumerate(self.dims, start=1):
            record[f"dim{index}_bytes"] = dim.num_bytes
            record[f"dim{index}_busy"] = dim.busy_fraction
            record[f"dim{index}_bw_util"] = dim.bandwidth_utilization
        return record | {"plan_chunks": len(plan.routes), "plan_concurrency": plan.concurrency}


def _choice(value: str, enum: type, field: str) -> object:
    try:
        return enum(value)
    except ValueError:
        accepted = ", ".join(repr(m.value) for m in enum)
        raise ConfigError(f"{field}: unknown value {value!r}; accepted: {accepted}") from None


def make_request(topology: Topology, op: str | CollectiveOp, size: int, num_chunks: int = 64,
                 intra: str | IntraPolicy = IntraPolicy.SCF,
                 concurrency: int = 1) -> CollectiveRequest:
    """Validate user-facing arguments (ConfigError naming the field) and build a request."""
    size = MESSAGE_SIZE.check(size, "size")
    CHUNKS.check(num_chunks, "chunks")
    if num_chunks > size:
        raise ConfigError(f"chunks: {num_chunks} chunks of a {size}-byte buffer; accepted: at "
                          "most one chunk per byte")
    CONCURRENCY.check(concurrency, "concurrency")
    return CollectiveRequest(topology, _choice(op, CollectiveOp, "op"), size, num_chunks,
                             _choice(intra, IntraPolicy, "intra"), concurrency)


def score_plan(plan: CollectivePlan, compat: AstraCompat | None = None) -> CollectiveResult:
    """Validate and simulate a plan and compute its metrics; ``compat``: price its stages as
    ASTRA-sim 2.x does (``astra_compat``)."""
    validate_plan(plan)
    execution = execute_plan(plan, flows=None if compat is None else compat.flows(plan))
    timeline, time_s = execution.timeline, execution.time
    sent = timeline.bytes_by_resource()
    dims = []
    for index, dim in enumerate(plan.topology.dims):
        name = dim_resource(plan, index)
        num_bytes = sent.get(name, 0)
        dims.append(DimensionStats(name, num_bytes, timeline.busy_fraction(name),
                                   num_bytes / (dim.bandwidth * time_s)))
    return CollectiveResult(
        plan=plan, timeline=timeline, time_s=time_s,
        ideal_s=ideal_time(plan.topology, plan.op, plan.size),
        bandwidth_bound_s=order_mix_bound(plan.topology, plan.op, plan.size),
        bound_s=latency_bound(plan.topology, plan.op, plan.size),
        bytes_per_npu=bytes_per_npu(plan.topology, plan.op, plan.size),
        dims=tuple(dims), events=execution.events,
    )


def run_collective(topology: Topology, op: str | CollectiveOp, size: int, num_chunks: int = 64,
                   policy: str = "themis", intra: str | IntraPolicy = IntraPolicy.SCF,
                   concurrency: int = 1, compat: AstraCompat | None = None) -> CollectiveResult:
    """Plan a collective of ``size`` bytes per NPU with ``policy``, simulate it and score it;
    ``compat``: emulate ASTRA-sim 2.x (its network view, Themis tracker and stage costs)."""
    if policy not in POLICIES:
        raise ConfigError(f"policy: unknown collective policy {policy!r}; accepted: "
                          + ", ".join(repr(p) for p in POLICIES))
    if compat is not None:
        topology = compat.network(topology)
    request = make_request(topology, op, size, num_chunks, intra, concurrency)
    if compat is not None and policy == "themis":
        sizes = equal_chunks(request.size, request.num_chunks)
        plan = request.plan("themis", sizes,
                            compat.themis_orders(request.topology, request.op, sizes))
    else:
        plan = POLICIES[policy](request)
    return score_plan(plan, compat)
