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

Each virtual pipeline stage's parameters on one GPU of it, which this pass and the
data-parallel step (``job.evaluate``) share, are ``job.memory.parameters.stage_parameters``.
"""

from __future__ import annotations

from dlsched.job.run_choices import check_setting

GRADIENT_BYTES = {"autocast": 4}  # a fresh weight gradient's bytes; 2 under 16-bit training


def accumulation_bytes(mode: str, precision: str, grad_bytes: int) -> int:
    """Bytes moved per parameter per microbatch by the accumulation (module docstring)."""
    if check_setting("grad_accumulation", mode) == "fused":
        return 0
    return GRADIENT_BYTES.get(precision, 2) + 2 * grad_bytes
