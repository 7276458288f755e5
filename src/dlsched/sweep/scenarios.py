"""One scenario schema per domain (pydantic): every option of the domain's command, with the
command's names and defaults, its limits and units parsed ("4 GiB" -> bytes). The sweep grid
is validated against these schemas, so any knob a command has can be swept, and each schema
builds the library's input (``problem()`` / ``setup()``), so a scenario runs exactly as the
command would. ``tests/sweep/test_scenario_schemas.py`` checks the commands' options against
them.

Output options (``--json``, ``--csv``, ``--trace``, ``--plot``, ``--save``) are not scenario
parameters; a command that takes several policies at once (``--policy a,b``) varies one per
scenario here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from dlsched.collectives import POLICIES as COLLECTIVE_POLICIES
from dlsched.collectives.plan import CollectiveOp, IntraPolicy
from dlsched.dataparallel import problem_from_model
from dlsched.dataparallel.comm import CommModel
from dlsched.dataparallel.compute_source import COMPUTES, layer_times, load_trained
from dlsched.dataparallel.network_spec import network_for_workers
from dlsched.dataparallel.policies import POLICIES as DP_POLICIES
from dlsched.dataparallel.problem import DPProblem, LayerTimes
from dlsched.errors import ConfigError
from dlsched.hardware import Topology, load_topology
from dlsched.hardware.device_config import load_devices
from dlsched.models import Model, device_compute, get_model
from dlsched.pipeline import PLANNERS, PipelineProblem
from dlsched.pipeline.calibrated_chain import zoo_chain_on_gpu
from dlsched.pipeline.memory_model import (
    CONTEXT_BYTES,
    FRAGMENTATION,
    RECOMPUTE_MODES,
    MemoryModel,
)
from dlsched.pipeline.model_source import load_chain
from dlsched.pipeline.network import NETWORK_MODES
from dlsched.training import POLICY_ALIASES, TRAINING_POLICIES, WORKLOADS
from dlsched.training.setup import LATENCIES, TrainingSetup, training_setup
from dlsched.units import UnitError, parse_bytes
from dlsched.validation import (
    BATCH,
    CHUNKS,
    CONCURRENCY,
    FRACTION,
    MESSAGE_SIZE,
    MICROBATCHES,
    RATIO,
    WORKERS,
    Limit,
    count,
    policy_name,
)

STRICT = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)
IN_FLIGHT = count("messages in flight", 1, 64)
ITERATIONS = count("iteration count", 1, 1000)
MAX_TENSOR_PARALLEL = 64


def limited(limit: Limit, kind: type) -> Any:
    """A pydantic type parsed and range-checked by the shared ``dlsched.validation`` limit."""
    return Annotated[kind, BeforeValidator(limit.validator)]


def one_of(value: str, accepted: Any, what: str) -> str:
    """``value`` when it is one of ``accepted``; ConfigError naming ``what`` otherwise."""
    if value not in accepted:
        raise ConfigError(f"unknown {what} {value!r}; accepted: " + ", ".join(map(str, accepted)))
    return value


def _names(value: Any) -> str:
    """A comma-separated list given as a list or a number (``[1, 2]``, ``4``) as text."""
    if isinstance(value, list | tuple):
        return ",".join(map(str, value))
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


NameList = Annotated[str, BeforeValidator(_names)]


def checked(check: Callable[[Any], object], kind: Any = str) -> Any:
    """A value (a name by default) accepted when ``check(value)`` (which loads what it names or
    builds what it configures) does not raise; its error is the field's."""
    return Annotated[kind, AfterValidator(lambda value: (check(value), value)[1])]


def _data_size(value: Any) -> int:
    """Bytes from a data size ("4 GiB") or a plain number; ConfigError otherwise."""
    try:
        return parse_bytes(value)
    except UnitError as error:
        raise ConfigError(str(error)) from None


AnyFloat = Annotated[float, Field(allow_inf_nan=True)]
"""A float that may be NaN or infinite, for a check that refuses it with its own message."""


def memory_knob(field: str, kind: Any) -> Any:
    """A memory-model setting checked by ``MemoryModel`` itself (its limits, its message): the
    command, the grid and the API share one set of limits."""
    return checked(lambda value: value is None or MemoryModel(**{field: value}), kind)


def choice(accepted: Any, what: str) -> Any:
    """A name that must be one of ``accepted`` (ConfigError naming ``what`` otherwise)."""
    return Annotated[str, AfterValidator(lambda value: one_of(value, accepted, what))]


def policy_choice(accepted: Any, what: str) -> Any:
    """A policy name among ``accepted``; ``ours`` is stored as ``dlsched``."""
    return Annotated[str, AfterValidator(lambda value: policy_name(value, accepted, what))]


@lru_cache(maxsize=256)
def cached_topology(name: str, latency_scale: float) -> Topology:
    """A topology preset or file with every step latency times ``latency_scale`` (cached)."""
    return load_topology(name).with_latency_scale(latency_scale)


def _training_policy(value: str) -> str:
    return POLICY_ALIASES.get(value, one_of(value, [*TRAINING_POLICIES, *POLICY_ALIASES],
                                            "training policy"))


TopologyName = checked(lambda name: cached_topology(name, 1.0))


class CollectiveScenario(BaseModel):
    """One chunked collective (``dlsched collective``): ``size`` in bytes per NPU (unit
    strings such as "1 GB" accepted), ``latency_scale`` multiplies every step latency of the
    topology (0 removes it)."""

    model_config = STRICT
    topology: TopologyName = "4D-Ring_FC_Ring_SW"
    op: choice([m.value for m in CollectiveOp], "collective") = "all-reduce"
    size: limited(MESSAGE_SIZE, int) = 10**9
    chunks: limited(CHUNKS, int) = 64
    policy: policy_choice(COLLECTIVE_POLICIES, "collective policy") = "themis"
    intra: choice([m.value for m in IntraPolicy], "intra-dimension order") = "scf"
    concurrency: limited(CONCURRENCY, int) = 1
    latency_scale: float = Field(1.0, ge=0.0, le=1e6)


class DataParallelScenario(BaseModel):
    """One data-parallel iteration (``dlsched dataparallel``): a zoo model (or a per-layer
    ``profile`` file) on ``workers`` ranks (None: the count ``network`` describes) behind
    ``network`` (the all-reduce cost model), ``in_flight`` all-reduces at once, layer times
    from ``compute`` (``device``: the calibrated ``device``, or ``efficiency`` x its peak;
    ``params-proportional``: the US-Byte authors'), ``batch_size`` samples per worker (None:
    32, or the authors')."""

    model_config = STRICT
    model: checked(get_model) = "resnet50"
    profile: str | None = None
    network: checked(lambda text: network_for_workers(text, None)) = "usbyte-8"
    workers: limited(WORKERS, int) | None = None  # after network: checked against it
    in_flight: limited(IN_FLIGHT, int) = 1
    device: checked(device_compute) = "v100-fp32"
    efficiency: limited(FRACTION, float) | None = None
    backward_ratio: limited(RATIO, float) = 2.0
    compute: choice(COMPUTES, "compute source") = "device"
    batch_size: limited(BATCH, int) | None = None
    policy: policy_choice(DP_POLICIES, "data-parallel policy") = "usbyte"

    @field_validator("workers")
    @classmethod
    def _workers_match_network(cls, value: int | None, info: Any) -> int | None:
        """A preset, topology or fitted file priced for another rank count is refused here
        (as ``dlsched dataparallel`` refuses it), not stored under the wrong label."""
        if "network" in info.data and value is not None:
            network_for_workers(info.data["network"], value)
        return value

    def setup(self) -> DataParallelSetup:
        """What ``dlsched dataparallel`` builds from the same options (not cached: a file
        named by ``profile`` or ``network`` is read again)."""
        times, batch, label = layer_times(self.compute, self.device, self.efficiency,
                                          self.backward_ratio, self.model, self.profile,
                                          self.batch_size)
        comm, workers = network_for_workers(self.network, self.workers)
        trained = load_trained(self.model, self.profile)
        return DataParallelSetup(times, batch, label, comm, workers, trained,
                                 problem_from_model(trained, times, batch, comm, self.in_flight))

    def problem(self) -> DPProblem:
        """The scheduling problem this scenario describes (cached per worker process)."""
        return _dp_problem(self.model_copy(update={"policy": DataParallelScenario().policy}))


@dataclass(frozen=True)
class DataParallelSetup:
    """A data-parallel scenario's inputs: the layer ``times`` (compute model), the
    ``batch_size`` (samples per worker) and its ``compute_label`` for titles, the all-reduce
    cost model ``comm`` and the rank count it describes (``workers``; None: as measured), the
    ``trained`` model and the scheduling ``problem``."""

    times: LayerTimes
    batch_size: int
    compute_label: str
    comm: CommModel
    workers: int | None
    trained: Model
    problem: DPProblem


@lru_cache(maxsize=64)
def _dp_problem(scenario: DataParallelScenario) -> DPProblem:
    return scenario.setup().problem


class PipelineScenario(BaseModel):
    """One synchronous pipeline plan (``dlsched pipeline plan``) with every option of the
    command: the model (zoo name or chain file) on a device preset or file, microbatching,
    ``recompute`` and ``tensor_parallel`` (what the planners may choose: comma-separated or
    ``all``/``auto``), the memory model (``precision``, ``grad_precision``, ``state_bytes``
    per parameter, ``sequence_parallel``, ``memory_reserve`` bytes, ``memory_fragmentation``),
    ``link_sharing`` (fifo or ps), ``for_torch`` (one GPU per stage) and ``gpu`` (calibrated
    block prices)."""

    model_config = STRICT
    model: str = "gpt2-xl"
    devices: checked(load_devices) = "2x8-NVLink-100Gb"
    microbatches: limited(MICROBATCHES, int) = 16
    microbatch_size: limited(BATCH, int) = 1
    planner: policy_choice(PLANNERS, "pipeline planner") = "dlsched"
    for_torch: bool = False
    recompute: NameList = "all"
    tensor_parallel: NameList = "auto"
    precision: memory_knob("precision", str) = "bf16"
    grad_precision: memory_knob("grad_precision", str) = "fp32"
    state_bytes: memory_knob("state_bytes", AnyFloat | None) = None
    sequence_parallel: bool = True
    memory_reserve: memory_knob("reserve_bytes", Annotated[int, BeforeValidator(_data_size)]) \
        = CONTEXT_BYTES
    memory_fragmentation: memory_knob("fragmentation", AnyFloat) = FRAGMENTATION
    link_sharing: choice(NETWORK_MODES, "link sharing mode") = "fifo"
    gpu: str | None = None

    @field_validator("recompute")
    @classmethod
    def _recompute(cls, value: str) -> str:
        if value != "all":
            for mode in value.split(","):
                one_of(mode.strip(), RECOMPUTE_MODES, "recomputation mode (or all)")
        return value

    @field_validator("tensor_parallel")
    @classmethod
    def _tensor_parallel(cls, value: str) -> str:
        if value != "auto":
            degrees = value.split(",")
            if not all(d.strip().isdigit() and 1 <= int(d) <= MAX_TENSOR_PARALLEL
                       for d in degrees):
                raise ConfigError(f"{value!r} is not auto or comma-separated degrees in "
                                  f"1..{MAX_TENSOR_PARALLEL}")
        return value

    def recompute_modes(self) -> tuple[str, ...]:
        """The recomputation modes the planners may choose."""
        if self.recompute == "all":
            return RECOMPUTE_MODES
        return tuple(dict.fromkeys(mode.strip() for mode in self.recompute.split(",")))

    def degrees(self) -> tuple[int, ...] | None:
        """The tensor-parallel degrees the planners may choose (None: every valid one)."""
        if self.tensor_parallel == "auto":
            return None
        return tuple(dict.fromkeys(int(d) for d in self.tensor_parallel.split(",")))

    def memory(self) -> MemoryModel:
        """The memory model of zoo models."""
        return MemoryModel(self.precision, self.grad_precision, self.sequence_parallel,
                           self.memory_reserve, self.memory_fragmentation, self.state_bytes)

    def problem(self) -> PipelineProblem:
        """The planning problem as ``pipeline plan`` builds it from the same options."""
        graph = load_devices(self.devices)
        chain = load_chain(self.model, self.microbatch_size, self.memory()) \
            if self.gpu is None else \
            zoo_chain_on_gpu(self.model, self.microbatch_size, self.memory(), self.gpu, graph)
        return PipelineProblem(chain, graph, self.microbatches, self.recompute_modes(),
                               self.link_sharing, replicate=not self.for_torch,
                               tensor_parallel=self.degrees())


class TrainingScenario(BaseModel):
    """Whole training iterations (``dlsched train``) of a zoo workload (or an ASTRA-sim
    workload file) on a topology preset (or an ASTRA-sim network file), ``iterations``
    simulated and the last reported; ``latency`` ('table' or 'zero') and ``latency_scale``
    multiply every step latency; ``astra_system`` / ``astra_compat`` as in the command."""

    model_config = STRICT
    workload: choice(WORKLOADS, "training workload") = "resnet152"
    topology: TopologyName = "3D-FC_Ring_SW"
    policy: Annotated[str, AfterValidator(_training_policy)] = "dlsched"
    latency: choice(LATENCIES, "latency setting") = "table"
    latency_scale: float = Field(1.0, ge=0.0, le=1e6)
    iterations: limited(ITERATIONS, int) = 2
    chunks: limited(CHUNKS, int) = 64
    concurrency: limited(CONCURRENCY, int) = 1
    astra_network: str | None = None
    astra_system: str | None = None
    astra_workload: str | None = None
    astra_compat: bool = False

    def setup(self) -> TrainingSetup:
        """The workload, topology and settings as ``dlsched train`` builds them."""
        return training_setup(self.workload, self.topology, self.latency, self.latency_scale,
                              self.chunks, self.concurrency, self.astra_network,
                              self.astra_system, self.astra_workload, self.astra_compat)
