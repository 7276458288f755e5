"""Megatron-Core's per-head query and key norms (the model's ``qk_norm``: Qwen3's ``q_norm`` and
``k_norm``), priced as kernels of the attention.

With ``qk_layernorm`` (Megatron-Bridge's Qwen3 providers set it), Megatron-Core's Transformer
Engine layer spec builds ``SelfAttention``'s ``q_layernorm`` and ``k_layernorm`` from the spec
provider's ``layer_norm(for_qk=True)``: ``TENorm``, i.e. Transformer Engine's ``RMSNorm`` for an
RMSNorm model (megatron/core/models/gpt/gpt_layer_specs.py and
megatron/core/extensions/transformer_engine_spec_provider.py at NVIDIA/Megatron-LM 8f1c2f8).
``get_query_key_value_tensors`` (megatron/core/transformer/attention.py, same commit) splits the
QKV projection's output into query, key and value views and applies ``q_layernorm`` to the
queries ``[s, b, np, hn]`` and ``k_layernorm`` to the keys ``[s, b, ng, hn]``, each normalized
over the head dimension ``hn``, before the rotary embedding. Transformer Engine's RMSNorm
(transformer_engine/pytorch/ops/basic/rmsnorm.py, ``op_forward`` / ``op_backward``, the same at
v2.9, v2.12 and v2.16, the three containers' versions) runs ``rmsnorm_fwd`` on
``input_.contiguous()`` and ``rmsnorm_bwd`` on ``grad_output.contiguous()``:

* the **queries** arrive contiguous: with grouped-query attention their ``reshape`` from the
  split view ``[s, b, ng, (np/ng) hn]`` to ``[s, b, np, hn]`` cannot be a view (the groups'
  stride spans the keys and values too), so it copies; that copy is the attention's with or
  without the norms and is priced there (``job.compute.qkv_layout``), not here;
* the **keys** are a strided view of the QKV output, so ``.contiguous()`` copies them first:
  one more kernel, 2 passes over the keys;
* each norm is one ``rmsnorm_fwd`` kernel forward and ``rmsnorm_bwd`` with its weight-gradient
  reduction backward, priced as ``job.compute.transformer_impl`` prices the layer's other
  norms (the zoo's LayerNorm op, ``models.ops.norm``, turned into Transformer Engine's 2 passes
  forward and 3 backward under ``transformer_engine``).

So a layer adds, over the ``q`` query and ``k`` key elements of a sample: 3 kernels forward (two
norms, the keys' copy), 4 backward (two norm backwards of two kernels each; the copy's gradient
is the view's, no kernel). Not recomputed by ``--recompute-modules layernorm`` (Megatron-Core's
``layernorm`` module is the input and pre-MLP norms).
"""

from __future__ import annotations

from dataclasses import replace

from dlsched.models.layer import insert_per_block
from dlsched.models.ops import Op, elementwise, norm
from dlsched.models.zoo import TransformerModel

NORM_LABEL = "attn.qk_norm"
"""The two norms' op label (ends in ``_norm``: ``job.compute.transformer_impl.is_norm`` prices
it with the layer's norms)."""
COPY_LABEL = "attn.k-contiguous"  # the keys' copy before their norm
NORMS = 2  # the query norm and the key norm, one kernel each forward
NORM_BACKWARD_KERNELS = 2  # models.ops.norm: the input gradient and the weight's reduction


def qk_norm_ops(q_elements: float, k_elements: float, head_dim: int) -> tuple[Op, Op]:
    """The keys' copy and the two norms of one layer's queries and keys (``q_elements`` and
    ``k_elements`` per sample, before TP's split over the heads), normalized over
    ``head_dim`` elements (module docstring)."""
    if min(q_elements, k_elements) <= 0 or head_dim < 1:
        raise ValueError(f"qk_norm_ops: elements and head_dim must be positive (got "
                         f"{q_elements}, {k_elements}, {head_dim})")
    copy = elementwise(COPY_LABEL, k_elements, 2.0, kernels=1.0, backward_kernels=0.0)
    norms = replace(norm(NORM_LABEL, head_dim, round(q_elements + k_elements)),
                    kernels=float(NORMS), backward_kernels=float(NORMS * NORM_BACKWARD_KERNELS))
    return replace(copy, backward_elements=0.0), norms


def with_qk_norms(model: TransformerModel, seq: int, heads: int, kv_heads: int,
                  head_dim: int) -> TransformerModel:
    """``model`` (the zoo's Megatron decoder over ``seq`` tokens a sample) with the query and key
    norms of ``heads`` query and ``kv_heads`` key heads of ``head_dim`` run after each block's
    QKV projection (on its first ``attn.c_attn`` layer, right after the projection's GEMM:
    before the attention core and the rotary embedding)."""
    return after_qkv_projection(
        model, qk_norm_ops(seq * heads * head_dim, seq * kv_heads * head_dim, head_dim))


def after_qkv_projection(model: TransformerModel, ops: tuple[Op, ...]) -> TransformerModel:
    """``model`` with ``ops`` inserted right after each block's QKV projection GEMM (the first
    op of its first ``attn.c_attn`` layer), ahead of whatever earlier insertions put there."""
    return insert_per_block(model, ops,
                            lambda layer: 1 if ".attn.c_attn" in layer.name else None)
