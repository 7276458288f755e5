"""Multi-token prediction (MTP) modules (DeepSeek-AI, "DeepSeek-V3 Technical Report", 2024,
Sec. 2.2; ``num_nextn_predict_layers`` of its config.json, ``mtp_layers`` here).

MTP module ``k`` predicts the token ``k + 1`` ahead: the shared embedding of the shifted tokens
and the previous depth's hidden state, each RMSNormed (``enorm``, ``hnorm``), concatenated and
projected ``2h -> h`` (``eh_proj``, no bias), one transformer layer, then the shared output head
with a norm of its own (``shared_head.norm``; Megatron-Core's ``MultiTokenPredictionLayer``:
``enorm``, ``hnorm``, ``eh_proj``, ``transformer_layer``, ``final_layernorm``). Its own
parameters: ``3`` norms, ``2 h^2`` and the layer's (the layer is numbered ``layers + k`` and is
an MoE layer when ``Model.is_moe_layer`` says so: DeepSeek-V3's layer 61 is); the
embedding and the output matrix are shared (DeepSeek-V3's README_WEIGHTS.md: "11.5B unique
parameters, excluding the shared 0.9B Embedding and 0.9B output Head"; 2.4B activated
including them). Its forward FLOP per token: the projection's ``2 x 2 h^2``, the layer's and the
logits' ``2 V h`` again (the head runs once more on every token). The MTP modules are placed on
the last pipeline stage, beside the output head (DeepSeek-V3 Sec. 3.2.1, as Megatron-Core's
``--mtp-num-layers`` does); ``job.compute.mtp_costs`` prices them there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dlsched.job.model_spec import Model

MTP_NORMS = 3  # enorm, hnorm and the shared head's final norm


def mtp_layer_is_moe(spec: Model, module: int) -> bool:
    """Whether MTP module ``module``'s transformer layer (layer ``layers + module``) is MoE."""
    return spec.is_moe_layer(spec.layers + module)


def module_parameters(spec: Model, module: int, active: bool = False) -> int:
    """One MTP module's own parameters (``active``: those one token uses: ``top_k`` routed
    experts of an MoE layer, not all; the shared embedding and head not counted)."""
    moe = mtp_layer_is_moe(spec, module)
    layer = spec.layer_parameters(moe=moe)
    if moe and active:
        layer += (spec.top_k * spec.ffn_parameters(spec.expert_ffn_hidden)
                  - spec.expert_parameters())
    return MTP_NORMS * spec.norm_parameters() + 2 * spec.hidden * spec.hidden + layer


def mtp_parameters(spec: Model, active: bool = False) -> int:
    """All MTP modules' own parameters (module docstring)."""
    return sum(module_parameters(spec, k, active) for k in range(spec.mtp_layers))


def mtp_forward_flops(spec: Model) -> float:
    """Forward FLOP per token of the MTP modules: projection, layer, attention core and
    logits (module docstring); 0 without MTP."""
    total = 0.0
    for module in range(spec.mtp_layers):
        moe = mtp_layer_is_moe(spec, module)
        total += (2 * 2 * spec.hidden * spec.hidden + 2 * spec.layer_matmul_elements(moe=moe)
                  + spec.attention_core_flops() + 2 * spec.vocab * spec.hidden)
    return total

