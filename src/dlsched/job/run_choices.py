"""Each run setting's accepted values and the checks that need its value alone: the leaf that
``job.run_settings.RunSettings``, ``job.execution.Execution`` (which holds one) and the cost
modules that price each setting all import, so none of them imports another for them; and
``config_errors``, how those two pydantic dataclasses raise one-line errors.

Each constant is the set of variants its pricing module models (that module's docstring
gives the sources); the module re-exports it under the same name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import ValidationError

from dlsched.errors import ConfigError, check_choice
from dlsched.job.compute.moe_host import CUDA_GRAPHS
from dlsched.models.zoo import ATTENTION_KERNELS

PRECISIONS = ("bf16", "fp16", "autocast", "fp8")
"""The training precisions the job planner prices (``--precision``): Megatron's bf16 or fp16
mixed precision (16-bit weights, FP32 master), torch.autocast (FP32 weights, 16-bit
matmuls), FP8 linears with bf16 model states (``job.compute.fp8``)."""
COLLECTIVE_POLICIES = ("baseline", "themis", "dlsched")  # job.communication.collective_costs
DP_POLICIES = ("none", "ddp", "usbyte", "dlsched")  # job.communication.dp_sync
GRAD_BYTES = 4
# bytes per gradient element reduced: Megatron-LM's default FP32 main gradients
# (arguments.py: bf16 sets accumulate_allreduce_grads_in_fp32), --grad-reduce-in-bf16, or the
# 16-bit gradients of fp16 training without --accumulate-allreduce-grads-in-fp32 (Megatron-LM
# of 2021-2022: its --fp16 default, and its example scripts')
GRAD_REDUCE_BYTES = {"fp32": GRAD_BYTES, "bf16": 2, "fp16": 2}
DISPATCHERS = ("alltoall", "deepep", "hybridep")  # job.communication.moe_dispatch
PIPELINE_P2P = ("auto", "blocking", "overlapped")  # job.communication.pipeline_p2p
CROSS_ENTROPY = ("unfused", "native", "te")  # job.compute.cross_entropy
OPS = ("fused", "eager")  # Job.ops: the zoo's fused kernels, or TorchTitan's eager modules
FP8_RECIPES = ("delayed", "current", "mxfp8", "nvfp4", "tensorwise",  # job.compute.fp8
               "rowwise", "rowwise_with_gw_hp")
"""The low-precision linear recipes of ``--precision fp8`` (``job.compute.fp8``); ``nvfp4``,
Transformer Engine's NVFP4BlockScaling, runs its GEMMs in FP4 (``job.compute.nvfp4``: TE enters
it through the same ``fp8_autocast`` with the same bf16 model states)."""
TORCHAO_RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")  # torchao's float8
TE_FP8_RECIPES = ("delayed", "current", "mxfp8")  # Transformer Engine's FP8 ones
TE_RECIPES = (*TE_FP8_RECIPES, "nvfp4")  # Transformer Engine's, NVFP4 with them
GRAD_ACCUMULATION = ("fused", "separate")  # job.compute.grad_accumulation
TRANSFORMER_IMPLS = ("local", "transformer_engine")  # job.compute.transformer_impl
SHARDINGS = ("zero", "fsdp2", "fsdp2-split")  # job.memory.torch_runtime
PIPELINE_OUTPUTS = ("none", "last", "all")  # job.memory.pipeline_buffers
FSDP2_SHARDINGS = ("fsdp2", "fsdp2-split")
"""The ``SHARDINGS`` that run PyTorch's FSDP2 (``job.communication.fsdp2_costs``; ``zero`` is
Megatron-FSDP's, the ZeRO paper's): ``Execution.fsdp2`` reads them."""

__all__ = ["ATTENTION_KERNELS"]  # models.zoo's kernels, re-exported with the rest

RUN_CHOICES: dict[str, tuple[str, ...]] = {
    "precision": PRECISIONS,
    "collective_policy": COLLECTIVE_POLICIES,
    "dp_policy": DP_POLICIES,
    "attention": ATTENTION_KERNELS,
    "grad_reduce": tuple(GRAD_REDUCE_BYTES),
    "grad_accumulation": GRAD_ACCUMULATION,
    "pipeline_p2p": PIPELINE_P2P,
    "fp8_recipe": FP8_RECIPES,
    "moe_dispatcher": DISPATCHERS,
    "sharding": SHARDINGS,
    "ops": OPS,
    "cross_entropy": CROSS_ENTROPY,
    "transformer_impl": TRANSFORMER_IMPLS,
    "cuda_graph": CUDA_GRAPHS,
    "pipeline_outputs": PIPELINE_OUTPUTS,
}
"""Each named run setting's accepted values (the boolean ones take True or False)."""
def check_setting(name: str, value: str) -> str:
    """``value`` when it is one of run setting ``name``'s accepted values (``RUN_CHOICES``); a
    ConfigError naming the setting (``ConfigError.field``: ``pipeline_p2p``; ``dlsched plan``
    says its option) and the accepted values otherwise."""
    check_choice(name, value, RUN_CHOICES[name])
    return value


def check_grad_reduce(grad_reduce: str, precision: str) -> str:
    """``grad_reduce`` when accepted for ``precision``; ConfigError otherwise (16-bit gradient
    buffers keep the training's own format: bf16 with bf16 training, Megatron-LM's
    --grad-reduce-in-bf16; fp16 with fp16 training)."""
    check_setting("grad_reduce", grad_reduce)
    if grad_reduce != "fp32" and precision != grad_reduce:
        raise ConfigError(f"{grad_reduce} needs --precision {grad_reduce} (got {precision}); "
                          "accepted: fp32", "grad_reduce")
    return grad_reduce


@dataclass(frozen=True)
class Runtime:
    """How the job's framework runs it, as far as memory goes (``job.memory.torch_runtime``
    prices it): ``sharding`` of ZeRO 3 (``zero``: the ZeRO paper's, ``fsdp2``: PyTorch FSDP2
    as TorchTitan applies it), whether blocks are compiled (``compile``), whether FSDP
    all-gathers FP8 weights (``fp8_all_gather``) and which stages' outputs
    ``torch.distributed.pipelining`` keeps to the step's end (``pipeline_outputs``,
    ``job.memory.pipeline_buffers``)."""

    sharding: str = "zero"
    compile: bool = False
    fp8_all_gather: bool = False
    pipeline_outputs: str = "none"

    def __post_init__(self) -> None:
        check_setting("sharding", self.sharding)
        check_setting("pipeline_outputs", self.pipeline_outputs)


ClassT = TypeVar("ClassT", bound=type)


def config_errors(cls: ClassT) -> ClassT:
    """``cls`` (a pydantic dataclass) constructed with dlsched's errors: a ConfigError its
    checks raise comes out as it is, a field of the wrong type as a one-line ConfigError
    naming the field (pydantic would wrap both in a ValidationError)."""
    init: Callable[..., None] = cls.__init__

    def __init__(self: object, *args: Any, **kwargs: Any) -> None:
        try:
            init(self, *args, **kwargs)
        except ValidationError as error:
            raise _one_line(error, cls.__name__.lower()) from None

    cls.__init__ = __init__  # type: ignore[misc]
    return cls


def _one_line(error: ValidationError, source: str) -> ConfigError:
    parts = []
    for item in error.errors():
        cause = item.get("ctx", {}).get("error")
        if isinstance(cause, ConfigError):
            return cause
        where = ".".join(str(part) for part in item["loc"])
        parts.append(f"{source}.{where}: {item['msg']} (got {item.get('input')!r})")
    return ConfigError("; ".join(parts))
