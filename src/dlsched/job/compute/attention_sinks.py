"""GPT-OSS's learned attention sinks (the model's ``attention_sinks``) as Transformer Engine's
cuDNN attention runs them: the kernels around the fused core.

**What runs.** Megatron-Core's ``TEDotProductAttention`` passes ``softmax_type`` (``learnable``
in Megatron-Bridge's ``GPTOSSProvider``) to Transformer Engine's ``DotProductAttention``
(megatron/core/extensions/transformer_engine.py at NVIDIA/Megatron-LM 8f1c2f8, TE >= 2.8).
Transformer Engine's backend selection (transformer_engine/pytorch/attention/
dot_product_attention/utils.py ``get_attention_backend``, v2.9 / v2.12 / v2.16) disables
FlashAttention for any softmax other than ``vanilla``, and ``nvte_get_fused_attn_backend``
(common/fused_attn/fused_attn.cpp) admits the F16 arbitrary-sequence cuDNN backend with sinks
from cuDNN 9.13.1, with a ``(128, 0)`` window under the causal mask from 9.2 (BSHD/SBHD, no
dropout, no bias). The NeMo containers of the rows carry cuDNN 9.13.1.26 (25.11), 9.18.0.50
(26.02) and 9.20.0.48 (26.04) (Megatron-Bridge docs/releases/software-versions.md), and the
perf scripts set no ``NVTE_FUSED_ATTN`` / ``NVTE_FLASH_ATTN`` / deterministic mode: the rows
ran cuDNN's fused kernel with the sink inside it (``sdpa_options.set_sink_token``, backward
``set_dsink_token``; fused_attn_f16_arbitrary_seqlen.cu), so the core is ``fused_attention``
as ``job.compute.attention_window`` prices it and nothing of the sink's is a kernel of its own
there.

**What this module adds.** ``DotProductAttention`` keeps the sink logits as a parameter of
``heads / TP`` elements and hands cuDNN ``softmax_offset.reshape(1, -1, 1, 1).to(torch.float32)``
(dot_product_attention.py, the same at the three versions). Megatron-Bridge wraps the model in
Megatron-Core's ``Float16Module`` (src/megatron/bridge/models/model_provider.py,
``mixed_precision_wrapper``), which makes every parameter BF16 (``module.bfloat16()``,
megatron/core/transformer/module.py at 8f1c2f8), so the ``.to`` is a cast kernel every
forward, and its autograd node (``ToCopyBackward``) casts cuDNN's FP32 sink gradient back to
BF16 in the backward: one kernel each way a layer, ``heads`` elements (their bytes nothing;
their launches what counts on a host-bound step). The reshape is a view.

Only under ``attention: fused`` (cuDNN's kernel, which only Transformer Engine's
``DotProductAttention`` runs here); Megatron-Core's local attention's sinks are not priced.
"""

from __future__ import annotations

from dlsched.models.layer import Layer, insert_per_block
from dlsched.models.ops import ATTENTION_KINDS, Op, elementwise
from dlsched.models.zoo import TransformerModel

SINK_CAST_LABEL = "attn.sink-cast"
CAST_PASSES = 2.0  # read the BF16 offsets, write the FP32 copy (and back in the backward)


def sink_cast_op(heads: int) -> Op:
    """The sink offsets' cast to FP32 (forward) and their gradient's back to BF16 (backward):
    one kernel each way over ``heads`` elements, split over TP with the heads."""
    if heads < 1:
        raise ValueError(f"sink_cast_op: heads must be >= 1 (got {heads})")
    return elementwise(SINK_CAST_LABEL, heads, CAST_PASSES, kernels=1.0, backward_kernels=1.0)


def core_index(layer: Layer) -> int | None:
    """The index of ``layer``'s attention core among its ops (None: the layer holds none)."""
    return next((i for i, op in enumerate(layer.ops) if op.kind in ATTENTION_KINDS), None)


def with_sink_casts(model: TransformerModel, heads: int) -> TransformerModel:
    """``model`` with the sink offsets' cast just before each block's fused attention core
    (in the layer that holds the core)."""
    return insert_per_block(model, (sink_cast_op(heads),), core_index)
