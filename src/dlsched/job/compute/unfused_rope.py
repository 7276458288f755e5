"""Megatron-Core's rotary embedding run unfused (the model's ``rope_fusion`` False: YaRN).

Megatron-Bridge's performance scripts set ``apply_rope_fusion = True`` for every model
(scripts/performance/utils/overrides.py ``_set_common_perf_overrides`` at 97ad8cc6f, df0289c
and 21d102f5e), and ``GPTModelProvider.provide`` then turns it off again when
``fusions.validate_rope_fusion_compatibility`` fails, i.e. for any ``position_embedding_type``
other than ``"rope"`` (src/megatron/bridge/utils/fusions.py, the same at the three commits).
GPT-OSS's provider sets ``position_embedding_type = "yarn"``, so its runs apply the rotary
embedding with Megatron-Core's eager ``_apply_rotary_pos_emb_bshd`` (megatron/core/models/
common/embeddings/rope_utils.py at 92c8482, 8f1c2f8 and 4415119), once to the queries and once
to the keys of every layer (attention.py: ``apply_rotary_pos_emb(query, ...)`` and ``(key,
...)`` with YaRN's ``mscale``), where a fused run launches one Transformer Engine kernel each.
The fused kernel is not priced (no op: its GPU time is a pass over ``q`` and ``k``); the eager
one is, per tensor of ``n`` 16-bit elements (``rot_dim`` = the head dimension, so ``t_pass``
is empty):

* **Forward**: ``cos(freqs) * mscale``, ``.to(dtype)`` and the same for ``sin`` (6 kernels
  over the ``s x d`` FP32 frequencies: launches, their bytes negligible); ``t * cos_`` (2
  passes over ``n``), ``_rotate_half``'s ``-x2`` (1: half of ``n`` read and written) and
  ``torch.cat((-x2, x1))`` (2), ``* sin_`` (2), the sum (3), and ``torch.cat((t, t_pass))``,
  which copies ``t`` (2): 6 kernels and 12 passes.
* **Backward** (autograd of those ops; ``t[..., :rot_dim]`` over the whole dimension is ``t``
  itself, ATen's ``applySlice``, so no slice backward there): the two products' gradients
  (``* sin_``, ``* cos_``: 2 + 2), ``-`` (1), ``torch.chunk``'s backward joining the halves
  (2), the sum of ``t``'s two gradients (3), and the empty ``t_pass`` slice's backward, a
  zero-filled gradient of ``t``'s size (1) added in (3): 7 kernels and 14 passes.

Not recomputed by ``--recompute-modules layernorm moe_act``.

**Where it runs**: Megatron-Core's ``SelfAttention.forward`` rotates the queries and keys
after ``get_query_key_value_tensors`` (the QKV GEMM, its split and the query / key norms) and
before ``core_attention``. The zoo (``models.zoo.gpt_model``) attaches the attention core to
the QKV projection's last layer: its ``.bias`` layer, or its ``.weight`` layer itself in a
model without biases (Llama, Qwen3: ``LayerBuilder.linear`` adds no bias layer), so the
rotary goes before the core's first op there (``rope_index``), after the layer's last op
otherwise.
"""

from __future__ import annotations

from dataclasses import replace

from dlsched.job.compute.attention_sinks import SINK_CAST_LABEL
from dlsched.models.layer import Layer, insert_per_block
from dlsched.models.ops import ATTENTION_KINDS, Op, elementwise
from dlsched.models.zoo import TransformerModel

TENSOR_KERNELS = 6  # forward kernels over one rotated tensor (module docstring)
FREQ_KERNELS = 6  # cos, * mscale, .to and sin, * mscale, .to over the frequencies
FORWARD_PASSES = 12.0  # 2 + 1 + 2 + 2 + 3 + 2 passes over the tensor
BACKWARD_KERNELS = 7
BACKWARD_PASSES = 14.0  # 2 + 2 + 1 + 2 + 3 + 1 + 3
TENSORS = 2  # queries and keys, each its own call


def rope_op(q_elements: float, k_elements: float) -> Op:
    """The eager rotary embedding of one layer's queries and keys (``q_elements`` and
    ``k_elements`` per sample, before TP's split): kernels and passes of the module
    docstring, split over TP with the heads."""
    elements = q_elements + k_elements
    return replace(elementwise("rope-unfused", elements, FORWARD_PASSES,
                               kernels=TENSORS * (TENSOR_KERNELS + FREQ_KERNELS),
                               backward_kernels=TENSORS * BACKWARD_KERNELS),
                   backward_elements=BACKWARD_PASSES * elements)


def rope_index(layer: Layer) -> int | None:
    """Where the rotary goes in ``layer`` (module docstring): None off the QKV projection
    (``attn.c_attn``); else before the attention core's first op in the layer (the sink
    offsets' cast, a fused core, or the unfused core's scores GEMM: a GEMM after the
    projection's, op 0), after the layer's last op when the core is not in it."""
    if ".attn.c_attn" not in layer.name:
        return None
    return next((index for index, op in enumerate(layer.ops)
                 if op.kind in ATTENTION_KINDS or op.label == SINK_CAST_LABEL
                 or (index > 0 and op.kind == "gemm")), len(layer.ops))


def with_unfused_rope(model: TransformerModel, seq: int, heads: int, kv_heads: int,
                      head_dim: int) -> TransformerModel:
    """``model`` (the zoo's Megatron decoder over ``seq`` tokens a sample) with the eager
    rotary embedding of ``heads`` query and ``kv_heads`` key heads of ``head_dim`` run after
    each block's QKV projection and its query / key norms, before its attention core (on its
    first ``attn.c_attn`` layer: ``rope_index``)."""
    op = rope_op(seq * heads * head_dim, seq * kv_heads * head_dim)
    return insert_per_block(model, (op,), rope_index)
