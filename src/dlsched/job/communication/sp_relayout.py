"""Sequence parallelism's re-layout copies under PyTorch's functional collectives (TorchTitan).

NCCL gathers and scatters along a buffer's first dimension. TorchTitan's sequence parallelism
shards activations ``(batch, sequence, hidden)`` on the sequence dimension (DTensor
``Shard(1)``), so PyTorch's functional collectives re-lay the buffer out around each NCCL call
(``torch/distributed/_functional_collectives.py``, read in torch 2.13 and unchanged in substance
since the 2024 versions TorchTitan benchmarked):

* ``all_gather_tensor(..., gather_dim=1)``: NCCL's output is the ``t`` shards stacked on dim 0;
  ``_maybe_view_chunk_cat`` (``torch/_utils.py``) turns it into the ``gather_dim`` layout,
  ``torch.cat(torch.chunk(res, t, dim=0), dim=gather_dim)``, a copy of the whole gathered
  tensor unless every dimension the shard axis moves across has size 1, i.e. unless the local
  batch is 1 (then it returns a view);
* ``reduce_scatter_tensor(..., scatter_dim=1)``: the input is first re-laid with its
  ``scatter_dim`` chunks stacked on dim 0 (``_chunk_or_narrow_cat``, ``torch.cat`` of the
  chunks: a copy of the whole input, at any local batch) before NCCL's reduce-scatter.

Checked on Inductor's output (torch 2.13, CPU, a fake process group of 8: RMSNorm under
``SequenceParallel``, a column- and a row-parallel linear, forward and backward compiled): at
local batch 4 a ``cat_split`` kernel follows each all-gather and precedes each reduce-scatter;
at local batch 1 the all-gathers' kernels are gone and the reduce-scatters' remain. (Torch
versions before ``_maybe_view_chunk_cat`` copied after every all-gather; every sequence-parallel
ledger row runs a local batch of 12 or 16, where both agree.)

TorchTitan's ``apply_tp`` notes the cost ("we can accelerate Sequence Parallel by folding (and
unfolding) the batch dimension and the sequence dimension", torchtitan PR #437). Under
``torch.compile`` the ``cat`` is traced and lowered by Inductor, but its consumer (the all-gather's)
is a matmul and its producer (the reduce-scatter's) a matmul, both extern kernels, so the copy
stays its own memory pass: one read and one write of the buffer at the GPU's memory rate, on
the compute stream, between the collective and its matmul.

Async TP (Inductor's micro-pipeline pass) replaces a fused pair with symmetric-memory ops and
restrides their operands (``restride_A_shard_for_fused_all_gather_matmul``: the producer writes
the shard with the gather dimension first), so the forward copies nothing under activation
checkpointing; but the gathered tensor a fused all-gather returns (``return_A``) is a permuted
view, and the weight gradient's matmul needs it in the token order of its other operand, so
Inductor copies it before that matmul: once for each gathered output gradient (the projection's
and FC2's weight gradients) and once for each gathered input the recomputation returns (QKV's
and FC1's). Those the pass leaves plain (``job.communication.async_tp``: the backward
reduce-scatters of input gradients summed over TorchTitan's separate linears, and under rowwise
FP8 every all-gather) keep their ``cat`` copies.

Recomputation under ``torch.compile`` (AOTAutograd's partitioner) reruns only what the backward
needs: under full checkpointing the forward's two all-gathers and the attention's
reduce-scatter (its output is the residual stream the FFN's norm is recomputed from), not the
FFN's (the layer's output); under TorchTitan's per-op policy the two all-gathers (the
reduce-scatters' outputs are on its save list). Eager checkpointing reruns the whole forward.

All of it read off Inductor's generated code (torch 2.13, CPU, a fake process group of 8, one
and two pairs of column- and row-parallel linears under ``SequenceParallel`` norms, compiled
forward and backward, without checkpointing, under full checkpointing and under a per-op policy
saving every other ``mm`` and the reduce-scatters; the micro-pipeline pass forced on with CPU
stand-ins of the symmetric-memory ops), and counted per Llama layer and microbatch, ``message``
bytes for a 16-bit buffer and ``gathered`` for the forward's gathered inputs (FP8 under
tensorwise float8, ``job.compute.fp8.tp_gather_fraction``):

* vanilla: forward 2 gathered + 2 message; backward 4 message, and the recomputation's
  (compiled full: 2 gathered + 1 message; per-op: 2 gathered; eager full: the forward's);
* async, gathers fused: forward nothing (without checkpointing 2 gathered: the saved inputs
  re-laid); backward 4 message, and full or per-op recomputation's 2 gathered;
* async, rowwise (gathers plain): forward 2 message; backward 4 message, and full or per-op
  recomputation's 2 message.

At a local batch of 1 the all-gathers' copies (and async's weight-gradient copies: the permuted
order is the token order) vanish; the reduce-scatters' stay. The embedding's and the head's
collectives are left out.
"""

from __future__ import annotations

COPY_PASSES = 2  # a copy reads the buffer once and writes it once


def relayout_bytes(message: float, gathered: float, microbatch_size: int, recompute: str,
                   async_tp: bool = False, gathers_fused: bool = True,
                   compiled: bool = True) -> tuple[float, float]:
    """Bytes (read plus written) of one layer's re-layout copies, forward and backward
    (recomputation included), for one microbatch of ``microbatch_size`` sequences whose
    sequence-parallel activation is ``message`` bytes (``gathered``: the forward all-gathers'
    buffers), ``compiled`` or eager (module docstring's list)."""
    if microbatch_size < 1:
        raise ValueError(f"microbatch_size: {microbatch_size!r} must be >= 1")
    batched = microbatch_size > 1  # at 1 the gathers' re-layouts are views
    fused = async_tp and gathers_fused
    gather_f = 0.0 if fused or not batched else 2 * gathered  # the forward's gathers' copies
    scatter_f = 0.0 if async_tp else 2 * message
    forward = gather_f + scatter_f
    if fused and recompute == "none" and batched:
        forward += 2 * gathered  # the gathered inputs saved for the backward, re-laid
    # the output gradients gathered (or re-laid for the weight gradient) and the input
    # gradients reduce-scattered (plain under async: summed over the separate linears)
    backward = (2 * gathered if batched else 0.0) + 2 * message
    rerun_gathers = 2 * gathered if batched else 0.0
    if fused:  # async's own recomputed pairs: the gathered inputs re-laid for the weights
        rerun = rerun_gathers if recompute in ("full", "selective-op") else 0.0
    elif recompute == "full":
        rerun = (gather_f + 1 * message * (not async_tp)) if compiled else forward
    elif recompute == "selective-op":
        rerun = rerun_gathers
    else:
        rerun = 0.0
    return COPY_PASSES * forward, COPY_PASSES * (backward + rerun)


def relayout_seconds(message: float, gathered: float, microbatch_size: int, recompute: str,
                     memory_rate: float, async_tp: bool = False,
                     gathers_fused: bool = True, compiled: bool = True) -> tuple[float, float]:
    """Seconds of ``relayout_bytes`` at ``memory_rate`` (bytes/s), forward and backward."""
    if memory_rate <= 0:
        raise ValueError(f"memory_rate: {memory_rate!r} must be positive (bytes/s)")
    forward, backward = relayout_bytes(message, gathered, microbatch_size, recompute,
                                       async_tp, gathers_fused, compiled)
    return forward / memory_rate, backward / memory_rate
