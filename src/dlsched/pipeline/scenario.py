"""The pipeline domain's scenario schema: one synchronous pipeline plan (``dlsched pipeline
plan``, a ``pipeline`` sweep, ``PipelineScenario(...).run()``): what is trained (a zoo model or
a chain file, its memory model), what it runs on (a device graph, a calibrated GPU) and how it
is parallelised (microbatches, what the planners may choose)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, field_validator

from dlsched.errors import ConfigError
from dlsched.hardware.device_config import load_devices
from dlsched.inputs import (
    STRICT,
    AnyFloat,
    DataSize,
    DevicesName,
    NameList,
    Several,
    checked,
    choice,
    limited,
    one_of,
    policy_choice,
)
from dlsched.pipeline.chains.calibrated_chain import zoo_chain_on_gpu
from dlsched.pipeline.chains.memory_model import (
    CONTEXT_BYTES,
    FRAGMENTATION,
    RECOMPUTE_MODES,
    MemoryModel,
)
from dlsched.pipeline.chains.model_source import load_chain
from dlsched.pipeline.chains.problem import PipelineProblem
from dlsched.pipeline.registry import PLANNERS, PipelineResult, run_planner
from dlsched.pipeline.simulation.network import NETWORK_MODES
from dlsched.validation import BATCH, MICROBATCHES

MAX_TENSOR_PARALLEL = 64
LINK_SHARING_HELP = ("How transfers share links and per-GPU NICs: fifo (one transfer at a time "
                     "per stream, as NCCL) or ps (processor sharing).")


def memory_knob(field: str, kind: Any) -> Any:
    """A memory-model setting checked by ``MemoryModel`` itself (its limits, its message): the
    command, the grid and the API share one set of limits."""
    return checked(lambda value: value is None or MemoryModel(**{field: value}), kind)


class PipelineScenario(BaseModel):
    """One synchronous pipeline plan: the model (zoo name or chain file) on a device preset or
    file, microbatching, ``recompute`` and ``tensor_parallel`` (what the planners may choose:
    comma-separated or ``all``/``auto``), the memory model (``precision``,
    ``grad_precision``, ``state_bytes`` per parameter, ``sequence_parallel``,
    ``memory_reserve`` bytes, ``memory_fragmentation``), ``link_sharing`` (fifo or ps),
    ``for_torch`` (one GPU per stage) and ``gpu`` (calibrated block prices)."""

    model_config = STRICT
    model: Annotated[str, Field(
        description="Zoo model name or chain YAML/JSON file.")] = "gpt2-xl"
    devices: DevicesName = "2x8-NVLink-100Gb"
    microbatches: Annotated[limited(MICROBATCHES, int), Field(
        description="Microbatches per iteration.")] = 16
    microbatch_size: Annotated[limited(BATCH, int), Field(
        description="Samples per microbatch.")] = 1
    planner: Annotated[policy_choice(PLANNERS, "pipeline planner"), Several("dlsched", "all"),
                       Field(description="Planner")] = "dlsched"
    for_torch: Annotated[bool, Field(
        description="Keep every planner to one GPU per stage, as torch.distributed.pipelining "
        "runs (no replicated stages).")] = False
    recompute: Annotated[NameList, Field(
        description="Activation recomputation the planners may choose, comma-separated: "
        "none, selective, full, or all.")] = "all"
    tensor_parallel: Annotated[NameList, Field(
        description="Tensor-parallel degrees the planners may choose, comma-separated (e.g. "
        "1,2,4,8), or auto: every degree the model (zoo transformers) and GPUs "
        "allow.")] = "auto"
    precision: Annotated[memory_knob("precision", str), Field(
        description="Training precision of zoo models' weights and activations: fp32, bf16, "
        "fp16.")] = "bf16"
    grad_precision: Annotated[memory_knob("grad_precision", str), Field(
        description="Gradient precision of zoo models: fp32 (Megatron-LM's default with bf16: "
        "18 B/param with Adam), bf16, fp16 (16 B/param).")] = "fp32"
    state_bytes: Annotated[memory_knob("state_bytes", AnyFloat | None), Field(
        description="Weights+gradients+optimizer state, bytes per parameter of zoo models; "
        "default: weights + gradients + fp32 master weights + Adam's 8.")] = None
    sequence_parallel: Annotated[bool, Field(
        description="Sequence parallelism with tensor parallelism (Korthikanti et al. 2022): "
        "every activation split over the TP group.")] = True
    memory_reserve: Annotated[memory_knob("reserve_bytes", DataSize), Field(
        description="Per-GPU memory the model cannot use (CUDA context, kernels), e.g. "
        "'4 GiB'; default: the 1343 MiB Hugging Face measured.")] \
        = f"{CONTEXT_BYTES // 2**20} MiB"
    memory_fragmentation: Annotated[memory_knob("fragmentation", AnyFloat), Field(
        description="Share of the rest lost to allocator fragmentation, [0, 1); default: "
        "GMLake's 15% (A100-80GB).")] = FRAGMENTATION
    link_sharing: Annotated[choice(NETWORK_MODES, "link sharing mode"), Field(
        description=LINK_SHARING_HELP)] = "fifo"
    gpu: Annotated[str | None, Field(
        description="Price a zoo model's blocks on a calibrated GPU (v100, a100, h100, "
        "h100-tf32, a GPU file; docs/compute.md) instead of FLOP / the device file's "
        "sustained FLOP/s.")] = None

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
        """The planning problem these options describe."""
        graph = load_devices(self.devices)
        chain = load_chain(self.model, self.microbatch_size, self.memory()) \
            if self.gpu is None else \
            zoo_chain_on_gpu(self.model, self.microbatch_size, self.memory(), self.gpu, graph)
        return PipelineProblem(chain, graph, self.microbatches, self.recompute_modes(),
                               self.link_sharing, replicate=not self.for_torch,
                               tensor_parallel=self.degrees())

    def run(self) -> PipelineResult:
        """Plan, simulate and bound the pipeline with ``planner``."""
        return run_planner(self.problem(), self.planner)
