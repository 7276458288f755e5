"""The attention probabilities' dropout as its rate runs it (the model's ``attention_dropout``).

The unfused attention core (``attention: unfused``: Megatron-LM's core, the zoo's
``megatron_attention``, and MLA's, ``job.compute.mla.core_ops``; Transformer Engine's
``UnfusedDotProductAttention`` runs the same four steps) applies dropout to the softmax's
output: the ``attention-dropout`` op, one elementwise pass over the ``heads x queries x keys``
probabilities that writes the dropped copy and its mask. Megatron-LM's and Megatron-Core's
default rate is 0.1 (``--attention-dropout``, ``TransformerConfig.attention_dropout``), the rate
SC21's and Korthikanti et al.'s runs kept, and the op is priced at any rate above 0.

At rate 0 no kernel runs: the core calls ``torch.nn.Dropout(p)`` (``torch.nn.functional.
dropout``), and ATen's ``dropout`` takes the fused ``native_dropout`` only for ``0 < p < 1``
(``is_fused_kernel_acceptable``) and otherwise ``_dropout_impl``, which returns its input when
``p == 0`` (aten/src/ATen/native/Dropout.cpp): the same tensor, no mask, no autograd node
(checked on torch 2.13: ``F.dropout(x, 0.0, True) is x``, one ``aten::dropout`` profiler event
and no kernel beneath it). NeMo 2.0's DeepSeek-V3 (``DeepSeekConfig.attention_dropout`` 0.0) is
such a run; so ``with_attention_dropout`` removes the op from the layers at rate 0. The fused
cores (FlashAttention, cuDNN) carry no separate op either way. The activation memory's
Korthikanti term (``job.memory``) is not changed here.
"""

from __future__ import annotations

from dataclasses import replace

from dlsched.models.zoo import TransformerModel

DROPOUT_LABEL = "attention-dropout"
"""The unfused core's dropout op (``models.zoo.megatron_attention``, ``job.compute.mla``)."""


def with_attention_dropout(model: TransformerModel, rate: float) -> TransformerModel:
    """``model`` as it runs at attention-dropout ``rate`` (a probability): unchanged above 0;
    at 0 every layer without its ``attention-dropout`` op (module docstring)."""
    if rate > 0:
        return model
    layers = tuple(layer if all(op.label != DROPOUT_LABEL for op in layer.ops)
                   else replace(layer, ops=tuple(op for op in layer.ops
                                                 if op.label != DROPOUT_LABEL))
                   for layer in model.layers)
    return replace(model, layers=layers)
