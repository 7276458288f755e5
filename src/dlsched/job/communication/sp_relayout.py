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

Async TP (Inductor's micro-pipeline pass) replaces a fused pair with symmetric-memory ops that
gather in the permuted layout and return views (``_fused_all_gather_matmul_impl`` moves the
gather dimension to the front), so the fused collectives copy nothing; those it leaves plain
(``job.communication.async_tp``: the backward reduce-scatters of input gradients summed over
TorchTitan's separate linears, and under rowwise FP8 every all-gather) keep their copies.

Counted per transformer layer and microbatch (a Llama layer: two all-gathers and two
reduce-scatters each way): forward the two all-gathers' outputs (``gathered`` bytes each: FP8
under tensorwise float8, ``job.compute.fp8.tp_gather_fraction``) and the two reduce-scatters'
inputs (``message``); backward the two gathered output gradients and the two reduce-scattered
input gradients (16-bit, ``message``); recomputation adds the forward's copies again (``full``)
or those of the two all-gathers it reruns (``selective-op``). The embedding's and the head's
collectives are left out.
"""

from __future__ import annotations

COPY_PASSES = 2  # a copy reads the buffer once and writes it once


def relayout_bytes(message: float, gathered: float, microbatch_size: int, recompute: str,
                   async_tp: bool = False, gathers_fused: bool = True) -> tuple[float, float]:
    """Bytes (read plus written) of one layer's re-layout copies, forward and backward
    (recomputation included), for one microbatch of ``microbatch_size`` sequences whose
    sequence-parallel activation is ``message`` bytes (``gathered``: the forward all-gathers'
    buffers); at a local batch of 1 the all-gathers' copies are views (module docstring)."""
    if microbatch_size < 1:
        raise ValueError(f"microbatch_size: {microbatch_size!r} must be >= 1")
    gathers = 0 if (async_tp and gathers_fused) or microbatch_size == 1 else 2  # per direction
    scatters_forward = 0 if async_tp else 2
    scatters_backward = 2  # summed over separate linears: plain even under async TP
    forward = gathers * gathered + scatters_forward * message
    backward = gathers * message + scatters_backward * message
    if recompute == "full":
        backward += forward
    elif recompute == "selective-op":
        backward += gathers * gathered
    return COPY_PASSES * forward, COPY_PASSES * backward


def relayout_seconds(message: float, gathered: float, microbatch_size: int, recompute: str,
                     memory_rate: float, async_tp: bool = False,
                     gathers_fused: bool = True) -> tuple[float, float]:
    """Seconds of ``relayout_bytes`` at ``memory_rate`` (bytes/s), forward and backward."""
    if memory_rate <= 0:
        raise ValueError(f"memory_rate: {memory_rate!r} must be positive (bytes/s)")
    forward, backward = relayout_bytes(message, gathered, microbatch_size, recompute,
                                       async_tp, gathers_fused)
    return forward / memory_rate, backward / memory_rate
