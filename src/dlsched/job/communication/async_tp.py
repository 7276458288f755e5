"""Asynchronous tensor parallelism (``--async-tp``): PyTorch's micro-pipelined TP collectives.

TorchTitan's ``enable_async_tensor_parallel`` (with ``torch.compile``) lets Inductor's
micro-pipeline TP pass replace each sequence-parallel all-gather feeding a matmul and each
matmul feeding a reduce-scatter with PyTorch's symmetric-memory fused ops
(``torch/distributed/_symmetric_memory``: ``fused_all_gather_matmul``,
``fused_matmul_reduce_scatter``; Wang et al., "Overlap communication with dependent computation
via decomposition", ASPLOS 2023, the collective matmul they implement):

* **all-gather + matmul** (``_pipelined_all_gather_and_consume``): each of the ``t`` ranks
  multiplies its own shard first, then for each other rank copies that rank's shard out of its
  symmetric-memory buffer (``Tensor.copy_`` over NVLink: a copy engine, no SMs) and multiplies
  it, the copy of the next shard running while the current one is multiplied (two streams);
* **matmul + reduce-scatter** (``_pipelined_produce_and_all2all``): each rank computes the
  partial product destined to each rank, one row chunk at a time, copies it into that rank's
  buffer (copy engine) while computing the next, then sums the ``t`` partials it received: one
  memory-bound kernel reading ``t`` chunks and writing one, on the SMs.

Priced per collective of a layer: the GEMM split into ``t`` row pieces (each priced at its own
shape by the GPU model, so the decomposition's smaller tiles cost what they cost), a copy
engine moving one piece per ``1 / (t - 1)`` of the collective's time on the TP links
(``job.collective_costs``), the two-stage flow of pieces and copies, and the reduce-scatter's
final sum at the memory rate. What a collective adds to the layer is the flow's end beyond the
undecomposed GEMM. The forward decomposes QKV and FC1 (all-gather) and the projection and FC2
(reduce-scatter); the backward the data-gradient GEMMs the other way round (the projection's
and FC2's data gradients need the gathered output gradient; QKV's and FC1's data gradients are
reduce-scattered), half of each linear's backward (the weight gradient runs undecomposed, on
the gathered input the fused op keeps). An FP8 linear's pieces are its FP8 GEMM alone
(``block_pricing.gemm_seconds``): torchao casts the input (before the all-gather under
tensorwise, ``PrepareFloat8ModuleInput``; the row-parallel input before its matmul), the
output gradient (on its shard, ``Float8RowwiseParallel``) and the weight once per linear, not
once per piece; the casts are priced with the layer.

**Input gradients summed over separate linears are not decomposed.** The pass fuses a
reduce-scatter only when its input is a matmul's output (``_find_producer_matmul`` in
``torch/_inductor/fx_passes/micro_pipeline_tp.py``: ``aten.mm`` or ``aten._scaled_mm``, through
reshapes). TorchTitan's Llama runs the QKV projection as three linears (``wq``, ``wk``, ``wv``)
and a gated FFN's input projection as two (``w1``, ``w3``: ``torchtitan/models/llama/model.py``
at 9dec370, ``models/llama3/model.py`` at 820504e), so in the backward autograd sums their
input gradients (an ``add``) before the reduce-scatter that is the sequence-parallel
all-gather's backward: that reduce-scatter stays a plain collective, priced blocking
(``SEPARATE_INPUT_LINEARS``; a non-gated FFN's single input linear is fused). Whether the FFN
is gated is read off the shapes: its input GEMM is twice as wide as its output GEMM's input.

**All-gathers feeding a rowwise FP8 cast are not decomposed.** The pass fuses an all-gather
with the matmuls that consume the gathered tensor (``_find_consumer_matmuls``). Under torchao's
tensorwise float8 TorchTitan casts the input to FP8 before the all-gather
(``PrepareFloat8ModuleInput``), so the gathered FP8 tensor feeds ``aten._scaled_mm`` and the
pair is fused; under rowwise the gather is 16-bit and each linear quantizes the gathered tensor
itself (``job.compute.fp8``), so a cast sits between the all-gather and ``_scaled_mm`` and the
all-gather stays a plain collective, forward (QKV's and FC1's inputs) and backward (the output
gradients gathered for the projection's and FC2's data gradients): pytorch/pytorch#149990
("all-gather-matmuls not fusing properly when rowwise scales are used", 2025-03-25, found on
TorchTitan's Llama 3 70B), with the 2025-06 file's async speedups for rowwise 1.04 (70B) and
1.06 (8B) against 1.16 / 1.10 for tensorwise (``gathers_fused`` False).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from dlsched.hardware import Topology
from dlsched.job.communication.collective_costs import curve
from dlsched.models.ops import Op

# (label suffix, forward collective, backward collective) of the four TP linears
DECOMPOSED = (
    ("attn.c_attn", "all-gather", "reduce-scatter"),
    ("attn.c_proj", "reduce-scatter", "all-gather"),
    ("mlp.c_fc", "all-gather", "reduce-scatter"),
    ("mlp.c_proj", "reduce-scatter", "all-gather"),
)

# The linears whose backward reduce-scatter sums several linears' input gradients in
# TorchTitan's Llama (module docstring): the QKV projection always, FC1 when the FFN is gated.
SEPARATE_INPUT_LINEARS = ("attn.c_attn", "mlp.c_fc")
# What a compiled full recomputation reruns of a layer's TP pairs: both all-gathers and the
# attention's reduce-scatter, not the FFN's (job.communication.sp_relayout)
COMPILED_RERUN = ("attn.c_attn", "attn.c_proj", "mlp.c_fc")


def summed_input_gradient(suffix: str, gemms: dict[str, Op]) -> bool:
    """Whether linear ``suffix``'s input gradient is a sum over separate linears (module
    docstring): the QKV projection, and FC1 of a gated FFN (its GEMM ``2 x`` FC2's input)."""
    if suffix == "attn.c_attn":
        return True
    if suffix != "mlp.c_fc":
        return False
    fc1 = next(op for label, op in gemms.items() if label.endswith("mlp.c_fc"))
    fc2 = next(op for label, op in gemms.items() if label.endswith("mlp.c_proj"))
    return fc1.shape[1] == 2 * fc2.shape[2]


def piece(op: Op, tp: int) -> Op:
    """One of ``tp`` row pieces of GEMM ``op`` (its tokens split, the weight whole)."""
    tokens, fan_out, fan_in, groups = op.shape
    rows = max(1, tokens // tp)
    share = rows / tokens
    return replace(op, flops=op.flops * share, elements=op.elements * share,
                   shape=(rows, fan_out, fan_in, groups))


def flow_end(gemm_piece: float, copy: float, pieces: int, gather: bool) -> float:
    """End of ``pieces`` GEMM pieces of ``gemm_piece`` seconds beside a copy engine moving one
    piece in ``copy`` seconds (module docstring). All-gather: the local piece first, then piece
    ``i`` once its copy has arrived. Reduce-scatter: the ``pieces - 1`` remote pieces first,
    each copied out after it is computed, the local one last."""
    if gather:
        end, copies = gemm_piece, 0.0
        for _ in range(1, pieces):
            copies += copy
            end = max(end, copies) + gemm_piece
        return end
    end = copies = 0.0
    for _ in range(1, pieces):
        end += gemm_piece
        copies = max(copies, end) + copy
    return max(copies, end + gemm_piece)


def collective_seconds(gemm: float, gemm_piece: float, collective: float, reduce: float,
                       tp: int, gather: bool) -> float:
    """Seconds one decomposed collective adds to its ``gemm`` (module docstring):
    ``collective`` its blocking time on the TP links, ``reduce`` the reduce-scatter's sum."""
    copy = collective / (tp - 1)
    end = flow_end(gemm_piece, copy, tp, gather) + (0.0 if gather else reduce)
    return max(0.0, end - gemm)


def async_tp_exposed(gemms: dict[str, Op], seconds: Callable[[Op, bool], float], tp: int,
                     message: float, tp_group: Topology | None, policy: str,
                     memory_rate: float, gathered: float | None = None,
                     gathers_fused: bool = True,
                     linears: tuple[str, ...] | None = None) -> tuple[float, float]:
    """Seconds a layer's decomposed TP collectives add to its forward and its backward:
    ``gemms`` the layer's linears by label, ``seconds(op, backward)`` one op's GPU seconds as the
    job runs it, ``message`` the bytes of one collective's whole buffer (``b s h`` elements),
    ``gathered`` those of the forward's all-gathers when they move fewer (FP8 inputs:
    ``job.compute.fp8.tp_gather_fraction``; default ``message``); ``gathers_fused`` False when
    a cast sits between each all-gather and its matmuls (rowwise FP8: module docstring), the
    all-gathers then blocking; ``linears`` the label suffixes counted (default all four: a
    compiled recomputation reruns only some, ``job.communication.sp_relayout``)."""
    if tp == 1:
        return 0.0, 0.0
    reduce = (message + message / tp) / memory_rate  # read t partial chunks, write one
    forward = backward = 0.0
    for suffix, ahead, behind in DECOMPOSED:
        if linears is not None and suffix not in linears:
            continue
        op = next(op for label, op in gemms.items() if label.endswith(suffix))
        part = piece(op, tp)
        for phase, collective in (("forward", ahead), ("backward", behind)):
            back = phase == "backward"
            size = message if gathered is None or collective != "all-gather" \
                else gathered  # FP8 inputs and output gradients gathered (tensorwise)
            blocking = curve(tp_group, collective, policy).seconds(size)
            summed = back and suffix in SEPARATE_INPUT_LINEARS and summed_input_gradient(
                suffix, gemms)  # a plain reduce-scatter of the summed gradient
            if summed or (collective == "all-gather" and not gathers_fused):
                if back:
                    backward += blocking
                else:
                    forward += blocking
                continue
            whole = seconds(op, back) / (2 if back else 1)
            pieces = seconds(part, back) / (2 if back else 1)
            added = collective_seconds(whole, pieces, blocking, reduce, tp,
                                       collective == "all-gather")
            if back:
                backward += added
            else:
                forward += added
    return forward, backward
