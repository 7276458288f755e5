"""Gradient accumulation over a pipeline rank's microbatches, outside the weight-gradient GEMMs.

Every microbatch's backward produces each parameter's gradient; with several microbatches per
iteration they are summed into the gradient the data-parallel step reduces. How
(``Job.grad_accumulation``):

* ``fused`` (the default): the weight-gradient GEMM accumulates into the main gradient itself
  (Megatron-LM's gradient accumulation fusion, commit 83b1e42 of 2022-02-13, on by default
  with FP32 main gradients; Megatron-Core's default; Transformer Engine's
  ``fuse_wgrad_accumulation``): no pass of its own.
* ``separate``: after each microbatch's backward a kernel per parameter adds the fresh gradient
  into the accumulator. Megatron-LM ran so before that commit, and after it whenever the main
  gradients are 16-bit (the fusion then turns itself off: ``--fp16`` without
  ``--accumulate-allreduce-grads-in-fp32``), through its DDP hook (``main_grad.add_(grad)``,
  every microbatch) or PyTorch's ``AccumulateGrad`` (``grad += new``, the microbatches after
  the first). Priced at the GPU's memory rate on every microbatch: the fresh gradient read
  (16-bit under Megatron's mixed precision, FP32 under autocast) and the accumulator read and
  written (``grad_reduce``'s bytes each); the first microbatch's add into a zeroed buffer is
  counted as the hook runs it.

``stage_parameters`` gives each virtual pipeline stage's parameters on one GPU of it, which
this pass and the data-parallel step (``job.evaluate``) share.
"""

from __future__ import annotations

from dlsched.job.compute.mtp import mtp_layer_is_moe
from dlsched.job.execution import Execution
from dlsched.job.memory.moe import experts_per_gpu, moe_dense_delta
from dlsched.job.memory.per_gpu import (
    embedding_parameters_per_gpu,
    head_parameters_per_gpu,
    layer_parameters_per_gpu,
    mtp_unit_per_gpu,
)
from dlsched.job.model_spec import Model
from dlsched.job.run_choices import check_setting

GRADIENT_BYTES = {"autocast": 4}  # a fresh weight gradient's bytes; 2 under 16-bit training


def accumulation_bytes(mode: str, precision: str, grad_bytes: int) -> int:
    """Bytes moved per parameter per microbatch by the accumulation (module docstring)."""
    if check_setting("grad_accumulation", mode) == "fused":
        return 0
    return GRADIENT_BYTES.get(precision, 2) + 2 * grad_bytes


def stage_parameters(spec: Model, layout: Execution,
                     experts: bool = False) -> list[float]:
    """Parameters on one GPU of each virtual stage, counted as the memory model counts them
    (``job.memory``: split weights over TP with the norms and row-parallel biases whole, the
    vocabulary padded): its layers (an MoE layer's non-expert part as ``job.moe_memory`` counts
    it, and with ``experts`` its routed experts on the GPU), the embedding on the first stage,
    the head on the last (with a copy of the tied embedding when the pipeline has more than one
    rank)."""
    tp = layout.tp
    layer = layer_parameters_per_gpu(spec, tp)
    delta = moe_dense_delta(spec, tp) if spec.experts else 0.0
    routed = experts_per_gpu(spec, layout) if spec.experts and experts else 0.0
    params = [layer * len(span) + (delta + routed) * spec.moe_layers_in(span.start, span.stop)
              for span in layout.stage_layers(spec.layers, spec.mtp_layers)]
    params[0] += embedding_parameters_per_gpu(spec, tp)
    params[-1] += head_parameters_per_gpu(spec, layout)
    for module in range(spec.mtp_layers):  # beside the head (job.compute.mtp)
        params[-1] += mtp_unit_per_gpu(spec, tp, module) + routed * mtp_layer_is_moe(spec,
                                                                                   module)
    return params
