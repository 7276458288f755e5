"""What a sweep can vary: one parameter schema, one evaluator and one metric list per domain.

Every domain maps a flat dict of parameters (plain numbers and names, SI units: bytes,
seconds) to a flat dict of metrics. The evaluators are module-level functions, so they travel
to worker processes (process pool, Dask, Ray) by reference; expensive inputs (topologies,
models) are cached per worker process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)

from dlsched.collectives import POLICIES as COLLECTIVE_POLICIES
from dlsched.collectives import run_collective
from dlsched.collectives.plan import CollectiveOp, IntraPolicy
from dlsched.dataparallel import problem_from_model, run_dataparallel
from dlsched.dataparallel.network_spec import network_for_workers
from dlsched.dataparallel.policies import POLICIES as DP_POLICIES
from dlsched.errors import ConfigError
from dlsched.hardware import Topology, load_topology
from dlsched.hardware.device_config import load_devices
from dlsched.models import device_compute, get_model
from dlsched.pipeline import PLANNERS, PipelineProblem, run_planner
from dlsched.pipeline.model_source import load_chain
from dlsched.training import (
    POLICY_ALIASES,
    TRAINING_POLICIES,
    WORKLOADS,
    get_workload,
    run_training,
)
from dlsched.validation import (
    BATCH,
    CHUNKS,
    CONCURRENCY,
    FRACTION,
    MESSAGE_SIZE,
    MICROBATCHES,
    WORKERS,
    Limit,
    policy_name,
)

_STRICT = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


def _limited(limit: Limit, kind: type) -> Any:
    """A pydantic type parsed and range-checked by the shared ``dlsched.validation`` limit."""
    return Annotated[kind, BeforeValidator(limit.validator)]


def _one_of(value: str, accepted: Any, what: str) -> str:
    if value not in accepted:
        raise ConfigError(f"unknown {what} {value!r}; accepted: " + ", ".join(map(str, accepted)))
    return value


class CollectiveParams(BaseModel):
    """One chunked collective: ``size`` in bytes per NPU (unit strings such as "1 GB" accepted),
    ``latency_scale`` multiplies every step latency of the topology (0 removes it)."""

    model_config = _STRICT
    topology: str = "4D-Ring_FC_Ring_SW"
    op: str = "all-reduce"
    size: _limited(MESSAGE_SIZE, int) = 10**9
    chunks: _limited(CHUNKS, int) = 64
    policy: str = "themis"
    intra: str = "scf"
    concurrency: _limited(CONCURRENCY, int) = 1
    latency_scale: float = Field(1.0, ge=0.0, le=1e6)

    @field_validator("topology")
    @classmethod
    def _topology(cls, value: str) -> str:
        _topology(value, 1.0)
        return value

    @field_validator("op")
    @classmethod
    def _op(cls, value: str) -> str:
        return _one_of(value, [m.value for m in CollectiveOp], "collective")

    @field_validator("intra")
    @classmethod
    def _intra(cls, value: str) -> str:
        return _one_of(value, [m.value for m in IntraPolicy], "intra-dimension order")

    @field_validator("policy")
    @classmethod
    def _policy(cls, value: str) -> str:
        return policy_name(value, COLLECTIVE_POLICIES, "collective policy")


@lru_cache(maxsize=256)
def _topology(name: str, latency_scale: float) -> Topology:
    return load_topology(name).with_latency_scale(latency_scale)


def run_collective_scenario(params: dict[str, Any]) -> dict[str, Any]:
    """Plan, simulate and score one collective; times in seconds, bytes per NPU."""
    p = params
    result = run_collective(_topology(p["topology"], p["latency_scale"]), p["op"], p["size"],
                            p["chunks"], p["policy"], p["intra"], p["concurrency"])
    return {"time_s": result.time_s, "ideal_s": result.ideal_s, "bound_s": result.bound_s,
            "utilization": result.utilization, "time_over_bound": result.time_over_bound,
            "bytes_per_npu": result.bytes_per_npu, "events": result.events,
            "plan_chunks": len(result.plan.routes), "plan_concurrency": result.plan.concurrency}


class DataParallelParams(BaseModel):
    """One data-parallel iteration: a zoo model on ``workers`` devices behind ``network``
    (see ``dlsched dataparallel --network``), ``batch_size`` samples per worker."""

    model_config = _STRICT
    model: str = "resnet50"
    network: str = "usbyte-8"
    workers: _limited(WORKERS, int) = 8
    device: str = "v100"
    efficiency: _limited(FRACTION, float) | None = None  # None: the calibrated GPU model
    batch_size: _limited(BATCH, int) = 32
    policy: str = "usbyte"

    @field_validator("model")
    @classmethod
    def _model(cls, value: str) -> str:
        get_model(value)
        return value

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        device_compute(value)
        return value

    @field_validator("policy")
    @classmethod
    def _policy(cls, value: str) -> str:
        return policy_name(value, DP_POLICIES, "data-parallel policy")

    @field_validator("network")
    @classmethod
    def _network(cls, value: str) -> str:
        network_for_workers(value, None)
        return value

    @field_validator("workers")
    @classmethod
    def _workers_match_network(cls, value: int, info: ValidationInfo) -> int:
        """A preset, topology or fitted file priced for another rank count is refused here
        (as ``dlsched dataparallel`` refuses it), not stored under the wrong label."""
        if "network" in info.data:
            network_for_workers(info.data["network"], value)
        return value


@lru_cache(maxsize=64)
def _dp_problem(model: str, workers: int, network: str, device: str,
                efficiency: float | None, batch_size: int) -> Any:
    """The scenario's problem; its network must describe ``workers`` ranks (a preset measured
    on 8 is refused for 2, as ``dlsched dataparallel`` refuses it)."""
    comm, _ = network_for_workers(network, workers)
    return problem_from_model(get_model(model), device_compute(device, efficiency), batch_size,
                              comm)


def run_dataparallel_scenario(params: dict[str, Any]) -> dict[str, Any]:
    """Schedule one data-parallel iteration's all-reduces; times in seconds."""
    p = params
    problem = _dp_problem(p["model"], p["workers"], p["network"], p["device"], p["efficiency"],
                          p["batch_size"])
    row = run_dataparallel(problem, p["policy"]).row()
    return {key: row[key] for key in DATAPARALLEL_METRICS}


class PipelineParams(BaseModel):
    """One synchronous pipeline plan: a zoo model (or chain file) on a device preset (or file)."""

    model_config = _STRICT
    model: str = "gpt2-xl"
    devices: str = "2x8-NVLink-100Gb"
    microbatches: _limited(MICROBATCHES, int) = 16
    microbatch_size: _limited(BATCH, int) = 1
    planner: str = "dlsched"

    @field_validator("devices")
    @classmethod
    def _devices(cls, value: str) -> str:
        load_devices(value)
        return value

    @field_validator("planner")
    @classmethod
    def _planner(cls, value: str) -> str:
        return policy_name(value, PLANNERS, "pipeline planner")


def run_pipeline_scenario(params: dict[str, Any]) -> dict[str, Any]:
    """Plan, simulate and bound one pipeline; seconds, bytes, fractions."""
    p = params
    problem = PipelineProblem(load_chain(p["model"], p["microbatch_size"]),
                              load_devices(p["devices"]), p["microbatches"])
    row = run_planner(problem, p["planner"]).row()
    return {key: row[key] for key in PIPELINE_METRICS}


class TrainingParams(BaseModel):
    """Whole training iterations of a zoo workload on a multi-dimensional topology (the
    ``training`` package); ``iterations`` simulated, the last one reported."""

    model_config = _STRICT
    workload: str = "resnet152"
    topology: str = "4D-Ring_FC_Ring_SW"
    latency_scale: float = Field(1.0, ge=0.0, le=1e6)
    policy: str = "dlsched"
    chunks: _limited(CHUNKS, int) = 64
    concurrency: _limited(CONCURRENCY, int) = 1
    iterations: int = Field(2, ge=2, le=16)

    @field_validator("workload")
    @classmethod
    def _workload(cls, value: str) -> str:
        return _one_of(value, WORKLOADS, "training workload")

    @field_validator("topology")
    @classmethod
    def _topology(cls, value: str) -> str:
        _topology(value, 1.0)
        return value

    @field_validator("policy")
    @classmethod
    def _policy(cls, value: str) -> str:
        return POLICY_ALIASES.get(value, _one_of(value, [*TRAINING_POLICIES, *POLICY_ALIASES],
                                                 "training policy"))


def run_training_scenario(params: dict[str, Any]) -> dict[str, Any]:
    """Simulate the iterations and report the last one; seconds and fractions."""
    p = params
    net = _topology(p["topology"], p["latency_scale"])
    result = run_training(get_workload(p["workload"], net.num_npus), net, p["policy"],
                          p["iterations"], p["chunks"], p["concurrency"])
    row = result.row()
    return {key: row[key] for key in TRAINING_METRICS}


TRAINING_METRICS = ("iteration_s", "compute_s", "exposed_comm_s", "comm_fraction")
DATAPARALLEL_METRICS = ("time_s", "bound_s", "time_over_bound", "backward_s", "forward_s",
                        "messages", "comm_busy_s")
PIPELINE_METRICS = ("iteration_s", "bound_s", "instance_bound_s", "time_over_bound", "bubble",
                    "peak_memory_bytes", "stages", "gpus_used", "tp", "planning_s")


@dataclass(frozen=True)
class Domain:
    """A sweepable domain: its parameter schema, evaluator (params -> metrics), the metrics it
    produces, which parameter names the policy and which metric is the time to compare."""

    name: str
    params: type[BaseModel]
    evaluate: Callable[[dict[str, Any]], dict[str, Any]]
    metrics: tuple[str, ...]
    policy_param: str
    time_metric: str

    @property
    def param_names(self) -> tuple[str, ...]:
        """Every parameter of the domain, in schema order."""
        return tuple(self.params.model_fields)


DOMAINS: dict[str, Domain] = {
    "collective": Domain("collective", CollectiveParams, run_collective_scenario,
                         ("time_s", "ideal_s", "bound_s", "utilization", "time_over_bound",
                          "bytes_per_npu", "events", "plan_chunks", "plan_concurrency"),
                         "policy", "time_s"),
    "dataparallel": Domain("dataparallel", DataParallelParams, run_dataparallel_scenario,
                           DATAPARALLEL_METRICS, "policy", "time_s"),
    "pipeline": Domain("pipeline", PipelineParams, run_pipeline_scenario, PIPELINE_METRICS,
                       "planner", "iteration_s"),
    "training": Domain("training", TrainingParams, run_training_scenario, TRAINING_METRICS,
                       "policy", "iteration_s"),
}


def get_domain(name: str) -> Domain:
    """The domain called ``name``; ConfigError naming the accepted domains otherwise."""
    if name not in DOMAINS:
        raise ConfigError(f"domain: unknown {name!r}; accepted: " + ", ".join(DOMAINS))
    return DOMAINS[name]
