"""The copies the frameworks make of the queries, keys and values before the attention core,
priced as memory traffic at their real size: Megatron-Core / Transformer Engine's under TE's
``DotProductAttention`` (``attention: fused``, or ``flash`` with ``transformer_impl:
transformer_engine``), and the K/V heads repeated for grouped-query attention before a kernel
called from PyTorch code (``flash`` with ``transformer_impl: local``: TorchTitan's SDPA).

**Transformer Engine's DotProductAttention.**

Read at NVIDIA/Megatron-LM 8f1c2f8 (and the same lines at ee6737da, 64cb6bd7, 92c8482 and
4415119, the other containers' Megatron-Core) and NVIDIA/TransformerEngine v2.1, v2.7, v2.9
and v2.12 (the containers' versions):

* ``SelfAttention.get_query_key_value_tensors`` (megatron/core/transformer/attention.py) views
  the QKV projection's output as ``[s, b, ng, (np/ng + 2) hn]`` (``ng`` query groups and ``np``
  query heads per TP rank), splits it along the last dimension (``SplitAlongDim``, or
  ``torch.split`` where Transformer Engine no longer exports ``_SplitAlongDim``, v2.7 on) into
  query ``[s, b, ng, (np/ng) hn]``, key and value ``[s, b, ng, hn]`` views, then reshapes the
  query to ``[s, b, np, hn]``. With ``ng > 1`` and ``np/ng > 1`` (grouped-query attention with
  more than one group on the rank) the groups' stride, ``(np/ng + 2) hn``, is not ``np/ng``
  times the heads' ``hn``, so the reshape cannot be a view: PyTorch copies the query (read and
  write, one kernel). Under multi-head attention (``np/ng = 1``) or one group per rank
  (``kv_heads <= tp``: Llama 3 405B at TP 8) it is a view. Its backward is a view again (the
  copy's gradient reshaped onto the split's view).
* The rotary embedding (Transformer Engine's ``fused_rope_forward`` allocates its output with
  ``at::empty(input.sizes())``; Megatron-Core's eager one ends in ``torch.cat``) and the key
  norm (``job.compute.qk_norm``) return new, contiguous keys, while the value stays the strided
  view. ``DotProductAttention.forward`` calls ``get_qkv_layout``
  (attention/dot_product_attention/utils.py; attention.py at v2.1), which accepts without a
  copy only ``sb3hd`` / ``sbh3d`` (one buffer, equal strides), ``sbhd_sb2hd`` / ``sbhd_sbh2d``
  (key and value interleaved in one buffer) or ``sbhd_sbhd_sbhd`` with the key's and value's
  strides equal per element; contiguous keys against a strided value match none
  (``check_strides_kv`` fails), so it runs ``[x.contiguous() for x in [q, k, v]]``: the
  already contiguous query and keys pass, the value is copied (one kernel). Without a new key
  (grouped-query attention without rotary or norm) the key and value views keep the QKV
  buffer's group offsets, which no layout accepts either, and both are copied. Multi-head
  attention without rotary embedding passes ``sbh3d`` untouched (GPT-3 as Megatron-Core runs
  it): nothing here.
* Backward: the split's gradient is the concatenation of the query's, key's and value's
  gradients along the last dimension. ``torch.split``'s autograd formula
  (``split_with_sizes_backward``) always runs ``at::cat``; Transformer Engine's
  ``_SplitAlongDim`` (v2.1) skips it only when the three gradients are adjacent views of one
  buffer, which cuDNN's separate ``dq``, ``dk``, ``dv`` and the rotary embedding's new key
  gradient are not. One kernel reading and writing ``q + 2 kv`` elements, whenever one of the
  copies above ran (the layout is then not the packed one).

Per sample, with ``q = s x heads x hn`` and ``kv = s x kv_heads x hn`` elements before TP's
split over the heads (each op split over TP with them): forward the query's copy 2 q (with
more than one group per rank), the value's 2 kv (the key's too without a new key), backward
the concatenation 2 (q + 2 kv); no backward kernel for the forward copies. Under full
recomputation the forward copies rerun with the forward; under Megatron's selective
recomputation (the core checkpointed, ``core_attn``) the value's copy, made inside
``DotProductAttention``, reruns with the core (``CORE_COPY_LABELS``). TE's flash backend is
chosen after ``get_qkv_layout`` (``DotProductAttention.forward``), so ``flash`` under TE's layer
spec makes the same copies.

**The K/V heads repeated** (``repeat_kv_op``). TorchTitan's Llama
(``torchtitan/models/llama/model.py`` at 9dec370, ``models/llama3/model.py`` at 820504e) calls
``repeat_kv(xk, n_rep)`` and ``repeat_kv(xv, n_rep)`` before ``F.scaled_dot_product_attention``:
``x[:, :, :, None, :].expand(...).reshape(bs, slen, n_kv_heads * n_rep, head_dim)``, whose
reshape of the expanded view copies (``n_rep = heads / kv_heads > 1``). Eager: one kernel per
tensor reading its ``kv`` elements and writing ``n_rep kv``; backward the sum over the copies
(read ``n_rep kv``, write ``kv``). Compiled, the copies stay: Inductor's generated code (torch
2.13, a TorchTitan attention block of 8 query and 2 KV heads, forward and backward, read off
``run_and_get_code``) writes the repeated keys and values as buffers of their own, which
``_scaled_dot_product_flash_attention`` (an extern kernel) reads; the keys' copy is fused with
the rotary embedding's cast back to 16 bits (the complex product itself stays an ATen kernel:
Inductor does not generate code for complex operators), and the backward sums the copies in a
kernel fused with the cast to FP32 (keys) or alone (values): the same bytes. Megatron-Core's
local ``DotProductAttention`` repeats them too (``repeat_interleave``), under its unfused
core (``attention: unfused``), which no grouped-query row runs: not priced here.
"""

from __future__ import annotations

from dataclasses import replace

from dlsched.job.compute.attention_sinks import SINK_CAST_LABEL, core_index
from dlsched.job.compute.qk_norm import after_qkv_projection
from dlsched.models.layer import Layer, insert_per_block
from dlsched.models.ops import Op, elementwise
from dlsched.models.zoo import TransformerModel

QUERY_COPY_LABEL = "attn.q-reshape"
VALUE_COPY_LABEL = "attn.kv-contiguous"  # get_qkv_layout's .contiguous() of the value (and key)
GRAD_CAT_LABEL = "attn.qkv-grad-cat"
CORE_COPY_LABELS = (VALUE_COPY_LABEL,)
"""The copies made inside the attention core's module (rerun when the core is recomputed)."""
COPY_PASSES = 2.0  # read and write each element once
REPEAT_LABEL = "repeat_kv"  # the keys' and values' repeat_kv (job.compute.eager_ops prices its own)
KV_TENSORS = 2  # keys and values, one repeat_kv call each


def query_copied(heads: int, kv_heads: int, tp: int) -> bool:
    """Whether the query's reshape copies on a rank of a TP group of ``tp`` (module docstring):
    grouped-query attention with more than one query group on the rank."""
    if min(heads, kv_heads, tp) < 1:
        raise ValueError(f"query_copied: heads, kv_heads and tp must be >= 1 (got {heads}, "
                         f"{kv_heads}, {tp})")
    return kv_heads < heads and kv_heads > tp


def qkv_copy_ops(q_elements: float, kv_elements: float, query_copy: bool,
                 new_key: bool) -> tuple[Op, ...]:
    """The copies of one layer (``q_elements`` query and ``kv_elements`` key elements per
    sample, before TP's split): the query's reshape when ``query_copy``, the value's
    ``.contiguous()`` (and the key's unless a rotary embedding or norm made ``new_key``) and the
    backward's concatenation; none for multi-head attention with the packed layout (neither)."""
    if q_elements <= 0 or kv_elements <= 0:
        raise ValueError(f"qkv_copy_ops: elements must be positive (got {q_elements}, "
                         f"{kv_elements})")
    grouped = kv_elements < q_elements
    if not (query_copy or new_key or grouped):
        return ()  # sbh3d: TE takes the split views as they are, and so does the backward
    ops: list[Op] = []
    cat = elementwise(GRAD_CAT_LABEL, 0.0, COPY_PASSES, kernels=0.0, backward_kernels=1.0)
    ops.append(replace(cat, backward_elements=COPY_PASSES * (q_elements + 2 * kv_elements)))
    if query_copy:
        ops.append(_forward_copy(QUERY_COPY_LABEL, q_elements))
    ops.append(_forward_copy(VALUE_COPY_LABEL, kv_elements * (1 if new_key else 2)))
    return tuple(ops)


def _forward_copy(label: str, elements: float) -> Op:
    """A forward copy of ``elements`` elements whose backward is a view (no kernel)."""
    return replace(elementwise(label, elements, COPY_PASSES, kernels=1.0, backward_kernels=0.0),
                   backward_elements=0.0)


def repeat_kv_op(kv_elements: float, n_rep: int) -> Op:
    """``repeat_kv`` of one layer's keys and values (``kv_elements`` each per sample, before
    TP's split): forward read ``kv`` and write ``n_rep kv`` per tensor, backward the reverse
    (module docstring); one kernel per tensor each way."""
    if kv_elements <= 0 or n_rep < 2:
        raise ValueError(f"repeat_kv_op: kv_elements must be positive and n_rep >= 2 (got "
                         f"{kv_elements}, {n_rep})")
    passes = (1 + n_rep) * KV_TENSORS
    return replace(elementwise(REPEAT_LABEL, kv_elements, passes, kernels=KV_TENSORS,
                               backward_kernels=KV_TENSORS),
                   backward_elements=passes * kv_elements)


def with_kv_repeat(model: TransformerModel, seq: int, heads: int, kv_heads: int,
                   head_dim: int) -> TransformerModel:
    """``model`` with TorchTitan's ``repeat_kv`` of ``kv_heads`` key and value heads up to
    ``heads`` before each block's attention core; ``model`` as it is without grouped-query
    attention (``n_rep`` 1: nothing is copied)."""
    if kv_heads >= heads:
        return model
    return _before_core(model, (repeat_kv_op(seq * kv_heads * head_dim, heads // kv_heads),))


def without_kv_repeat(model: TransformerModel) -> TransformerModel:
    """``model`` without ``with_kv_repeat``'s op (an attention that takes grouped heads)."""
    return replace(model, layers=tuple(
        replace(layer, ops=tuple(op for op in layer.ops if op.label != REPEAT_LABEL))
        for layer in model.layers))


def _before_core(model: TransformerModel, ops: tuple[Op, ...]) -> TransformerModel:
    """``model`` with ``ops`` just before each block's attention core (in its layer), ahead of
    the sink offsets' cast (``job.compute.attention_sinks``: TE casts them after
    ``get_qkv_layout``)."""
    def at(layer: Layer) -> int | None:
        core = core_index(layer)
        if core is not None and core > 0 and layer.ops[core - 1].label == SINK_CAST_LABEL:
            return core - 1
        return core

    return insert_per_block(model, ops, at)


def with_qkv_copies(model: TransformerModel, seq: int, heads: int, kv_heads: int,
                    head_dim: int, tp: int, new_key: bool) -> TransformerModel:
    """``model`` (the zoo's Megatron decoder over ``seq`` tokens a sample) with the copies of
    ``heads`` query and ``kv_heads`` key heads of ``head_dim`` on a rank of a TP group of
    ``tp`` (``new_key``: the keys are a new tensor, rotated or normed), each where it runs:
    the split's concatenation and the query's copy after the QKV projection, the value's
    copy just before the attention core."""
    # kv_heads < tp: each rank holds one group's key and value (Megatron-Core gathers the QKV
    # output and slices its group), i.e. the whole group's elements after the split over tp
    ops = qkv_copy_ops(seq * heads * head_dim, seq * max(kv_heads, tp) * head_dim,
                       query_copied(heads, kv_heads, tp), new_key)
    if not ops:
        return model
    core_copies = tuple(op for op in ops if op.label in CORE_COPY_LABELS)
    split = tuple(op for op in ops if op.label not in CORE_COPY_LABELS)
    # the split and the query's reshape right after the QKV projection, before the query and
    # key norms (the split's backward concatenation then runs after the norms' backward)
    return _before_core(after_qkv_projection(model, split), core_copies)
