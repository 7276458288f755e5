"""PyTorch's all-gather context parallelism (``--cp-algorithm all-gather``: TorchTitan's
default ``context_parallel_rotate_method = "allgather"``).

``torch.distributed.tensor.experimental.context_parallel`` runs the attention of each GPU's
``s / cp`` queries (TorchTitan's head-tail load balancing gives every GPU the same causal share,
as Megatron-Core's split does) block by block against the ``cp`` K/V shards
(``_templated_ring_attention``), the K/V shards exchanged by a rotater. The all-gather rotater
gathers every GPU's K and V block in one all-gather issued before the first (local) block's
attention and waited for before the second: the forward exposes what the all-gather of the
``cp`` blocks (``cp x 2 b (s / cp) kv d / t`` 16-bit elements) takes beyond one block's
attention. The backward (``_templated_ring_attention_backward``) gathers the K/V blocks again
the same way and passes the dK/dV accumulated for each block around the ring (its dK/dV rotater
is the point-to-point one): ``cp - 1`` transfers of a dK/dV block each beside one block's
attention backward, and the last one back to the block's owner after the last block, exposed.
The all-gathers are priced by the collectives layer on the CP group's links under the job's
collective policy, the ring transfers on its slowest link (``context_parallel.send_seconds``).
Recomputation reruns the forward's all-gather (as the other algorithms' communication).
Memory: the gathered K/V of all ``cp`` blocks is held while a layer's attention runs.

**Compiled, nothing overlaps** (``allgather_exposed(..., compiled=True)``). The overlap above is
eager PyTorch's: the rotaters' functional collectives return an ``AsyncCollectiveTensor``
waited at first use. TorchTitan compiles each ``TransformerBlock`` with ``fullgraph=True``
(``torchtitan/parallelisms/parallelize_llama.py`` ``apply_compile`` at 9dec370, the commit of
the 2024-12 benchmarks), so the CP dispatch (the patched ``F.scaled_dot_product_attention``,
DTensor's ``_sdpa_handler``, ``_templated_ring_attention`` and its backward) is traced into the
block's forward and backward graphs. Traced, a functional collective is waited where it is
issued: ``_maybe_wrap_tensor`` in ``torch/distributed/_functional_collectives.py`` returns
``wait_tensor(self)`` when ``_are_we_tracing()`` (the same in every version read, 2024-2026;
the benchmark's own torch, 1963fc8 of 2024-12-23, was not among them), the rotaters'
``_maybe_wait`` then finding nothing to wait for. Nothing in Inductor's default training
pipeline moves the wait away from its collective: ``reorder_for_compute_comm_overlap``
is off by default (``torch/_inductor/config.py``) and TorchTitan 9dec370 sets only
``_micro_pipeline_tp`` (for async TP); the post-grad ``reorder_for_locality`` runs for
inference graphs only (``post_grad_passes``: ``if is_inference and
config.reorder_for_locality``); and the FlashAttention calls are Inductor fallback kernels
issued in graph order, after the wait. So every collective of the compiled ring runs alone on
the GPU's stream: the forward's all-gather whole, the backward's all-gather whole and each of
its ``cp`` dK/dV transfers (``permute_tensor``, waited as issued; the last one too), and the
recomputed forward's all-gather again.

**What is exchanged** (``exchanged_block``). PyTorch's CP shards the tensors SDPA receives.
TorchTitan's Llama repeats the K/V heads before SDPA (``repeat_kv``, n_rep = heads / KV heads:
``torchtitan/models/llama/model.py`` at 9dec370), so each GPU's K and V blocks are ``heads``
wide, not ``kv_heads``: n_rep times Megatron-Core's (``context_parallel.kv_block_bytes``). The
dK/dV blocks passed around the ring are FP32 (``_ContextParallelOptions.convert_to_f32``, True:
``grad_key`` / ``grad_value`` accumulate in ``torch.float32``), twice the 16-bit block.

**Memory traffic of the merge** (``cp_traffic``). Around each block's SDPA call PyTorch's CP runs
tensor ops of its own (``torch/distributed/tensor/experimental/_attention.py``, read at
pytorch 0123248a; the structure is that of the 2024-12 runs: ``_SDPAMerger`` with
``convert_to_f32``, round-robin load balancing with ``_partial_update``, the all-gather rotater
and the all-to-all dK/dV rotater). Per element of one GPU's queries, ``E = b (s / cp) h / t``
(its keys and values are as many once repeated), bytes read plus written, for the GPU of the
CP group the load balancing gives the most (rank ``cp - 1``: at each step ``i >= 1`` it attends
all its queries to the first half of block ``rank - i``; rank 0 attends the second half of its
queries to whole blocks, ``partial``):

* eager, forward: ``key.contiguous()`` and ``value.contiguous()`` of the transposed K/V (8);
  ``torch.cat([key.flatten(), value.flatten()])`` before every step but the last (8 each: the
  all-gather rotater uses only the first); the step's output cast to FP32 (6) and the merge
  ``out - sigmoid(lse_i - lse) * (out - out_i)`` (three FP32 kernels: 12 + 8 + 12) for every
  step after the first, on the rows the step computed, a partial step's then written back
  into the whole FP32 output by ``torch.cat`` (8); the result cast back to 16 bits (6);
* eager, backward: three FP32 zero gradients (12), the K/V copies as forward (8 + 8 per step
  but the last), per step the FP32 accumulation ``grad += grad_i`` of dQ, dK, dV (10 each on
  the rows or the K/V half computed; a half's via ``_partial_update``, whose ``torch.cat``
  rewrites the whole FP32 tensor, 8), the dK/dV concatenated in FP32 for the rotater (16),
  and at the end dQ and the received dK/dV cast to 16 bits (6 + 12);
* compiled (``torch.compile`` of TorchTitan's blocks traces the CP dispatch into the graph):
  Inductor fuses each merge into one kernel reading the running FP32 output and the step's
  16-bit one and writing the running one (10; a partial step also rewrites the other half,
  4; the first merge reads the first step's 16-bit output, the last writes 16 bits); the
  K/V copies are written by their producer, the unused concatenations are dead code; the
  backward's zero-initialised accumulations start from the first step's gradients (6 for dQ,
  12 for dK/dV written in FP32), each later step reads the received FP32 dK/dV (8) and the
  step's 16-bit gradients and writes the FP32 concatenation (8), accumulates dQ (10, a partial
  step 5 + 4), and the received dK/dV are cast to 16 bits at the end (12).

**FlashAttention's per-call backward work** (``FA2_BACKWARD_CALL``). Each step's backward is
its own ``aten._scaled_dot_product_flash_attention_backward`` call (TorchTitan 9dec370's
``get_train_context`` restricts SDPA under CP to ``[FLASH_ATTENTION, EFFICIENT_ATTENTION]``:
flash for bf16 at head dimension 128), and PyTorch's FlashAttention-2 runs two memory-bound
kernels around every call's main kernel (``flash_api.cpp`` ``mha_bwd``: ``loop = true``, an
FP32 ``dq_accum`` of ``(b, s_q, h, d)`` from ``at::empty``; ``flash_bwd_launch_template.h``
``run_flash_bwd_seqk_parallel``, read at pytorch 08e43ed / 03b7c19, FlashAttention-2 as vendored
since 2023): ``flash_bwd_dot_do_o_kernel<Clear_dQaccum=true>`` reads dO and O (2 + 2 bytes per
query element), writes ``D = rowsum(dO * O)`` (FP32 per row: ``1 / head_dim``, not counted) and
clears ``dq_accum`` (4), and ``flash_bwd_convert_dq_kernel`` reads it (4) and writes the 16-bit
dQ (2): 14 bytes per element of the call's queries. A layer without CP makes one call over
``E``; rank ``r`` of the CP group makes ``cp``: the local one and, per step ``i >= 1``, one over
all its queries (``i <= r``) or the second half (``partial``). What CP adds is the ``cp - 1``
later calls: ``14 (cp - 1) E`` on the last rank, eager or compiled (the SDPA calls are
Inductor's fallback kernels). The forward's kernel writes its 16-bit output and FP32
log-sum-exp directly (no per-call kernel of its own).

The slowest GPU's bytes (its forward counted twice when recomputation reruns the attention)
are priced at the GPU's memory rate, added to the layer's forward and backward. Not counted:
the per-row log-sum-exp tensors (``1 / head_dim`` of ``E``).
"""

from __future__ import annotations

from dlsched.hardware import Topology
from dlsched.job.communication.collective_costs import curve
from dlsched.job.model_spec import Model

DKV_FP32 = 2.0  # dK/dV blocks exchanged in FP32 against the 16-bit K/V block (convert_to_f32)
# Eager bytes per element of E (module docstring): the two K/V copies, a concatenation, a
# step's cast and merge, a partial step's write-back, the final cast.
EAGER_CONTIGUOUS, EAGER_CAT, EAGER_CAST, EAGER_MERGE, EAGER_WRITE_BACK = 8.0, 8.0, 6.0, 32.0, 8.0
EAGER_ZEROS, EAGER_ACCUMULATE, EAGER_END = 12.0, 10.0, 18.0
FP32, HALF = 4.0, 2.0
# PyTorch's FlashAttention-2 backward per call, bytes per query element (module docstring):
# flash_bwd_dot_do_o_kernel reads dO and O and clears the FP32 dq_accum (2 + 2 + 4),
# flash_bwd_convert_dq_kernel reads it and writes the 16-bit dQ (4 + 2)
# (flash_bwd_launch_template.h run_flash_bwd_seqk_parallel, flash_api.cpp mha_bwd).
FA2_BACKWARD_CALL = HALF + HALF + FP32 + FP32 + HALF


def allgather_exposed(block: float, cp: int, group: Topology, policy: str, dkv: float,
                      core_forward: float, core_backward: float,
                      compiled: bool = False) -> tuple[float, float]:
    """Exposed seconds of all-gather CP's forward and backward for K/V blocks of ``block``
    bytes on a CP group of ``cp`` GPUs, ``dkv`` seconds per dK/dV block sent to the next GPU
    of the ring, the attention core taking ``core_forward`` / ``core_backward`` seconds
    (module docstring); ``compiled``: the attention traced by torch.compile, every collective
    waited as issued (nothing hidden)."""
    gather = curve(group, "all-gather", policy).seconds(cp * block)
    if compiled:
        return gather, gather + cp * dkv
    forward = max(0.0, gather - core_forward / cp)
    backward = (max(0.0, gather - core_backward / cp)
                + (cp - 1) * max(0.0, dkv - core_backward / cp) + dkv)
    return forward, backward


def allgather_bytes(block: float, cp: int) -> tuple[float, float]:
    """Bytes one GPU sends per layer in the forward and the backward: its block to each of
    the ``cp - 1`` others (each all-gather), and ``cp`` FP32 dK/dV blocks (``DKV_FP32``)."""
    return (cp - 1) * block, (cp - 1) * block + cp * DKV_FP32 * block


def allgather_buffer(block: float, cp: int) -> float:
    """Transient bytes: the gathered K/V of the ``cp`` blocks."""
    return cp * block



def exchanged_block(kv_block: float, heads: int, kv_heads: int) -> float:
    """Bytes of one GPU's K and V block as PyTorch's CP exchanges them: Megatron-Core's
    ``kv_block`` (``kv_heads`` wide) repeated to the ``heads`` TorchTitan passes to SDPA."""
    return kv_block * heads / kv_heads


def _merge_bytes(share: float, first: bool, last: bool) -> float:
    """Compiled bytes per element of one merge step over ``share`` of the queries (1, or 0.5
    for a partial step, whose other half is rewritten as it is)."""
    read = HALF if first else FP32
    written = HALF if last else FP32
    return share * (read + HALF + written) + (1 - share) * (read + written)


def rank_traffic(cp: int, rank: int, compiled: bool) -> tuple[float, float]:
    """Bytes per element of ``E`` that CP rank ``rank`` of ``cp`` moves in one layer's
    attention forward and backward beyond the SDPA kernels a layer without CP runs: the merge,
    the gradient accumulation and FlashAttention's per-call backward kernels of the ``cp - 1``
    later steps (module docstring)."""
    if cp == 1:
        return 0.0, 0.0
    steps = range(1, cp)
    calls = sum(FA2_BACKWARD_CALL * (1.0 if i <= rank else 0.5) for i in steps)
    forward, backward = _merge_traffic(cp, rank, compiled)
    return forward, backward + calls


def _merge_traffic(cp: int, rank: int, compiled: bool) -> tuple[float, float]:
    """``rank_traffic`` without FlashAttention's per-call backward kernels: the merge's and the
    gradient accumulation's bytes per element of ``E`` (module docstring), ``cp`` > 1."""
    steps = range(1, cp)
    if compiled:
        forward = sum(_merge_bytes(1.0 if i <= rank else 0.5, i == 1, i == cp - 1)
                      for i in steps)
        backward = HALF + FP32 + 2 * (HALF + FP32)  # first step: dQ, dK/dV into FP32
        for i in steps:
            kv = 2 * FP32 + 2 * HALF * (0.5 if i <= rank else 1.0) + 2 * FP32
            dq = FP32 + HALF + FP32 if i <= rank else (FP32 + HALF + FP32) / 2 + FP32
            backward += kv + dq
        return forward, backward + 2 * (FP32 + HALF)  # the received dK/dV cast back
    forward = EAGER_CONTIGUOUS + (cp - 1) * EAGER_CAT + EAGER_CAST + EAGER_CAST
    forward += sum(EAGER_CAST + EAGER_MERGE if i <= rank
                   else (EAGER_CAST + EAGER_MERGE) / 2 + EAGER_WRITE_BACK for i in steps)
    backward = EAGER_ZEROS + EAGER_CONTIGUOUS + (cp - 1) * EAGER_CAT + EAGER_END
    backward += 3 * EAGER_ACCUMULATE + 2 * 2 * FP32  # first step, and its dK/dV concatenated
    half = EAGER_ACCUMULATE / 2 + EAGER_WRITE_BACK
    for i in steps:
        kv, dq = (2 * half, EAGER_ACCUMULATE) if i <= rank else (2 * EAGER_ACCUMULATE, half)
        backward += kv + dq + 2 * 2 * FP32
    return forward, backward


def cp_traffic(elements: float, cp: int, compiled: bool,
               reruns: bool) -> tuple[float, float]:
    """Bytes the slowest CP rank (its forward counted twice when recomputation ``reruns``
    it) moves per layer in the forward and in the backward beyond the SDPA kernels, for
    ``elements`` query elements per GPU (module docstring); the rerun is the caller's."""
    passes = 2.0 if reruns else 1.0
    forward, backward = max((rank_traffic(cp, rank, compiled) for rank in range(cp)),
                            key=lambda pair: passes * pair[0] + pair[1])
    return forward * elements, backward * elements


def allgather_merge_seconds(spec: Model, microbatch_size: int, tp: int, cp: int,
                            algorithm: str, memory_rate: float, compiled: bool,
                            reruns: bool) -> tuple[float, float]:
    """Seconds the merge's memory traffic (``cp_traffic``) adds to one layer's forward and
    backward per microbatch on one GPU, at ``memory_rate`` bytes/s: all-gather CP only (zero
    for the other algorithms and without CP). The queries of one GPU: ``b (s / cp)`` tokens of
    ``heads x head_dim / t`` elements."""
    if cp == 1 or algorithm != "all-gather":
        return 0.0, 0.0
    elements = microbatch_size * (spec.seq // cp) * spec.heads * spec.head_dim / tp
    forward, backward = cp_traffic(elements, cp, compiled, reruns)
    return forward / memory_rate, backward / memory_rate
