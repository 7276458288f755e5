"""How a job's layouts are run (the execution's run part): one ``RunSettings``, each setting
declared here once with its default and its accepted values.

An execution (``job.execution.Execution``) is its layout (degrees, schedule, batch,
recomputation, SP, ZeRO; what the search varies) and these run settings, its ``run`` field
(fixed for a job: precision, collectives, overlaps, kernels, gradient handling): one field
holding one ``RunSettings`` because the search builds many executions under one set of
settings, and writes them flat (``Execution.flat``, an execution file). The settings' accepted
values and value-only checks are in the leaf ``job.run_choices`` (the cost modules that price
each setting import ``Execution``, so this module imports none of them). ``Job``
(``job.evaluation.evaluate``) is the model and the cluster; every cost module reads the
settings off the execution it prices (``layout.run``).

The settings (each field's accepted values in ``job.run_choices.RUN_CHOICES``; the
module named with each prices it):

- ``precision``: ``job.run_choices.PRECISIONS`` (``job.compute.fp8`` for fp8, with
  ``fp8_recipe``; ``fp8_all_gather``: ZeRO 3 gathers 1-byte weights, torchao's FSDP float8).
- ``collective_policy``: how collectives are scheduled (``job.communication.collective_costs``).
- ``dp_policy``: how the gradient reduction overlaps the last backward
  (``job.communication.dp_sync``); ``overlap_param_gather``: ZeRO 1-2's weight all-gather
  overlaps the next forward (Megatron-LM's ``--overlap-param-gather``).
- ``attention``: the attention core's kernel (``job.compute.layer_costs``: ``flash``,
  ``fused`` or ``unfused``).
- ``tp_comm_overlap``: sequence-parallel TP collectives overlap their GEMMs
  (``--tp-comm-overlap``); ``async_tp``: TorchTitan's asynchronous TP (``job.async_tp``).
- ``grad_reduce``: the gradients' format as reduced and kept (``fp32``, Megatron-LM's default
  main gradients, or the training's 16-bit format: ``--grad-reduce-in-bf16``, or fp16 without
  ``--accumulate-allreduce-grads-in-fp32``; ``job.communication.dp_sync``);
  ``grad_accumulation``: ``fused`` into the weight-gradient GEMMs or ``separate``
  (``job.compute.grad_accumulation``).
- ``pipeline_p2p``: whether a pipeline rank computes while its transfers run
  (``job.communication.pipeline_p2p``).
- ``compile``: torch.compile's fusions (``job.compute.compile_fusion``); ``ops``: the
  memory-bound ops as Megatron-Core / Transformer Engine's fused kernels (``fused``) or as
  eager PyTorch runs TorchTitan's Llama modules (``eager``: ``job.compute.eager_ops``;
  Inductor's groups of them under ``compile``).
- ``moe_dispatcher``: the MoE token dispatch, ``alltoall``, ``deepep`` or ``hybridep``
  (``job.communication.moe_dispatch``).
- ``sharding``: ZeRO 3 as ``zero``, or PyTorch's ``fsdp2`` / ``fsdp2-split`` by TorchTitan's
  wrapping: its states and unsharded weights (``job.memory.torch_runtime``) and, without PP, its
  exposed first all-gathers and last reduce-scatters and its copies on the compute stream, with
  PP its once-per-iteration all-gathers and reduce-scatters (``job.communication.fsdp2_costs``);
  ``zero`` under PP gathers and reduce-scatters per layer per microbatch (Megatron-FSDP).
- ``cross_entropy``: the head's loss, Megatron-LM's ``unfused`` vocab-parallel cross-entropy
  or Megatron-Core's ``--cross-entropy-loss-fusion`` by ``--cross-entropy-fusion-impl``
  ``native`` or ``te`` (``job.compute.cross_entropy``); ``transformer_impl``: the norms'
  kernels, Megatron-Core's ``--transformer-impl`` ``local`` or ``transformer_engine``
  (``job.compute.transformer_impl``).
- ``moe_a2a_overlap``: Megatron-Core's EP All-to-All overlap (``--overlap-moe-expert-parallel-comm
  --delay-wgrad-compute``): steady-state forward and backward merged, each one's All-to-Alls
  beside the other's compute (``job.evaluation.a2a_overlap``).
- ``cuda_graph``: what Transformer Engine's CUDA graphs capture (Megatron-Bridge's
  ``cuda_graph_scope``): ``none``, ``moe`` (``moe_router``, ``moe_preprocess``), ``attn+moe``
  or ``full`` (a full iteration); the MoE layers' captured launches cost the host one graph
  launch (``job.compute.moe_host``).
- ``pipeline_outputs``: which stages' outputs ``torch.distributed.pipelining`` keeps from each
  forward to the step's end (``none``: TorchTitan since e5ef99a, 2025-10, steps with
  ``return_outputs=False``; ``last``: PyTorch from pytorch#153383, 2025-05, with ``step``'s
  default; ``all``: PyTorch before it), priced with the stages' receive buffers
  (``job.memory.pipeline_buffers``) where ``sharding`` is PyTorch's and ``pp`` > 1.
- ``master_weights``: the optimizer keeps FP32 master weights (Megatron-LM's mixed-precision
  optimizer, the default) or Adam updates the 16-bit weights in place (``False``: apex's
  FusedAdam handed the half model's parameters, as vTrain's simulator models its measured
  runs; ``job.communication.dp_sync`` prices its step, ``job.memory.per_gpu.state_bytes``
  drops the 4-byte master copy from the optimizer state).
- ``fp8_param_gather``: Megatron-Core's FP8 primary weights (``--fp8-param-gather``; only with
  Transformer Engine's ``fp8_recipe``): the FP8 linears' parameters are TE's quantized
  tensors, no 16-bit copy (``job.memory.fp8_weights``; memory only: the distributed
  optimizer's parameter all-gather is still priced at 16 bits).
- ``moe_probs_in_activation``: Megatron-Core (core_v0.13 and later) multiplies the routing
  probabilities in the experts' activation, so the combine keeps no expert outputs
  (``job.memory.moe``; memory only).
- ``expandable_segments``: PyTorch's caching allocator runs with
  ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` and loses no memory to fragmentation
  (``job.memory.allocator.fragmentation_margin``): the plan's memory check keeps no
  fragmentation margin, and a ledger row's reserved memory is its allocated memory.

The checks here need the settings alone; those that relate them to the model or the GPU
(eager ops on a non-Llama model, FP8 on a GPU without FP8 tensor cores) are
``job.evaluation.evaluate.check_run``'s. Front ends read the settings by name
(``run_settings_of``): ``dlsched plan``'s options (``job.scenario.PlanScenario``) and a ledger
row's ``parallel`` section (``ledger.schema.LedgerRow.execution``).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from pydantic import ConfigDict
from pydantic.dataclasses import dataclass

from dlsched.errors import ConfigError
from dlsched.job.run_choices import (
    GRAD_REDUCE_BYTES,
    OPS,
    RUN_CHOICES,
    TE_FP8_RECIPES,
    Runtime,
    check_grad_reduce,
    check_setting,
    config_errors,
)

VALUE_CHECKED = tuple(name for name in RUN_CHOICES
                      if name not in ("ops", "fp8_recipe", "grad_reduce"))
"""The settings whose value alone decides whether it is accepted (``check_setting``): ``ops``
keeps ``job.compute.eager_ops.check_ops``' message, ``fp8_recipe`` is checked with the
precision and the GPU by ``Job``, ``grad_reduce`` with the precision."""


@config_errors
@dataclass(frozen=True, config=ConfigDict(extra="forbid", strict=True))
class RunSettings:
    """How a job's layouts run (module docstring); the positional order is ``Job``'s before
    the settings were one type, so ``RunSettings("fp16", "baseline", "ddp")`` reads as it did."""

    precision: str = "bf16"
    collective_policy: str = "baseline"
    dp_policy: str = "none"
    attention: str = "flash"
    overlap_param_gather: bool = False
    tp_comm_overlap: bool = False
    grad_reduce: str = "fp32"
    grad_accumulation: str = "fused"
    pipeline_p2p: str = "auto"
    fp8_recipe: str | None = None
    fp8_all_gather: bool = False
    compile: bool = False
    async_tp: bool = False
    moe_dispatcher: str = "alltoall"
    sharding: str = "zero"
    ops: str = "fused"
    cross_entropy: str = "unfused"
    transformer_impl: str = "local"
    moe_a2a_overlap: bool = False
    cuda_graph: str = "none"
    master_weights: bool = True
    pipeline_outputs: str = "none"
    fp8_param_gather: bool = False
    moe_probs_in_activation: bool = False
    expandable_segments: bool = False

    def __post_init__(self) -> None:
        if self.fp8_param_gather and self.fp8_recipe not in TE_FP8_RECIPES:
            raise ConfigError(f"needs a Transformer Engine FP8 fp8_recipe ("
                              f"{', '.join(TE_FP8_RECIPES)}; got {self.fp8_recipe}: NVFP4 "
                              "parameter gathers are not priced)", "fp8_param_gather")
        if self.tp_comm_overlap and self.fp8_recipe == "nvfp4":
            raise ConfigError("not priced with fp8_recipe nvfp4 (Megatron-Bridge turns it off "
                              "for nvfp4, job.compute.nvfp4); accepted: false",
                              "tp_comm_overlap")
        if self.ops not in OPS:
            raise ConfigError(f"ops: {self.ops!r} is not one of {', '.join(OPS)}")
        for name in VALUE_CHECKED:
            check_setting(name, getattr(self, name))
        check_grad_reduce(self.grad_reduce, "bf16" if self.precision == "fp8" else self.precision)

    @property
    def runtime(self) -> Runtime:
        """How PyTorch runs the job, for its memory (``job.memory.torch_runtime``)."""
        return Runtime(self.sharding, self.compile, self.fp8_all_gather, self.pipeline_outputs)

    @property
    def grad_bytes(self) -> int:
        """Bytes per gradient element reduced and kept (``grad_reduce``)."""
        return GRAD_REDUCE_BYTES[self.grad_reduce]


RUN_FIELDS = tuple(f.name for f in fields(RunSettings))
"""The run settings, in ``RunSettings``' positional order."""
RUN_DEFAULTS: dict[str, object] = {f.name: f.default for f in fields(RunSettings)}
"""Each run setting's default (what a front end offers unless it says why it differs:
``dlsched plan``'s ``dp_policy`` is its own, ``usbyte``, and its ``moe_probs_in_activation`` is
today's Megatron-Core's, True; the ledger's rows state their releases')."""


def run_settings_of(source: object, **given: Any) -> RunSettings:
    """The run settings ``source`` names (each attribute of it named as a run setting), with
    ``given`` for the rest (any other at its default): how a front end hands its settings to
    the evaluator without copying them one by one."""
    named = {name: getattr(source, name) for name in RUN_FIELDS
             if name not in given and hasattr(source, name)}
    return RunSettings(**named, **given)
