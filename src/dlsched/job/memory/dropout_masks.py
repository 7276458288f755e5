"""The hidden dropouts' masks the activation stash keeps, as the model's ``hidden_dropout`` rate
runs them (bytes per microbatch on one GPU).

Korthikanti et al.'s stash (``pipeline.chains.memory_model``: ``s b h (16 p + 2)`` a layer)
counts a 1-byte mask of ``s b h`` elements for each of a layer's two hidden dropouts (after the
attention's output projection and after the FFN, Megatron-Core's bias-dropout-add), and the
embedding keeps one more (``embedding_memory``). Megatron-Core calls
``torch.nn.functional.dropout(x, p=hidden_dropout, training=True)`` there
(``megatron/core/fusions/fused_bias_dropout.py``, ``_bias_dropout_add_func``, at
NVIDIA/Megatron-LM 8f1c2f8; the embedding's ``torch.nn.Dropout(config.hidden_dropout)``), and
ATen's dropout returns its input at ``p = 0`` (``is_fused_kernel_acceptable`` needs ``0 < p <
1``, ``_dropout_impl`` returns the input: no mask, no autograd node; ``job.compute.
attention_dropout`` read the same path): at rate 0 none of these masks exists.
Megatron-Bridge's model providers set ``hidden_dropout = 0.0`` (``LlamaModelProvider``,
``Qwen3MoEModelProvider``, ``GPTOSSProvider``, and ``DeepSeekV3Bridge`` for the Hugging Face
config, at df0289c); Megatron-Core's own default is 0.1 (``TransformerConfig``), the rate
Korthikanti et al.'s and SC21's runs kept. Masks are split over TP with sequence parallelism,
whole on every TP rank without it (Korthikanti et al., Sec. 4.2.2).
"""

from __future__ import annotations

from dlsched.job.communication.context_parallel import local_tokens
from dlsched.job.execution import Execution
from dlsched.job.model_spec import Model

MASK_BYTES = 1  # one byte per element (torch.bool), Korthikanti et al.'s count
LAYER_MASKS = 2  # after the attention and after the FFN


def absent_mask_bytes(spec: Model, layout: Execution, masks: int = LAYER_MASKS) -> float:
    """Bytes of ``masks`` hidden-dropout masks (``s b h`` elements each) one GPU does not keep
    per microbatch because the rate is 0 (module docstring); 0 at any rate above 0."""
    if spec.hidden_dropout > 0:
        return 0.0
    split = layout.tp if layout.sequence_parallel else 1
    s, b = local_tokens(spec, layout.cp), layout.microbatch_size
    return masks * MASK_BYTES * s * b * spec.hidden / split
