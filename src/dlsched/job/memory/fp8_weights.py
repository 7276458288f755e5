"""The FP8 linear weights a pipeline rank holds under Transformer Engine, and what Megatron-Core's
FP8 primary weights (``--fp8-param-gather``) take off the 16-bit weights (bytes per GPU).

**Which weights run in FP8** (``fp8_linear_parameters``): every linear of a transformer layer
Transformer Engine runs (``job.compute.fp8``): the attention's (QKV or MLA's projections, the
output projection; ``Model.layer_matmul_elements`` less the FFN), a dense layer's FFN, an MoE
layer's shared experts (split over TP) and its routed experts on the GPU (``experts / ep`` of
them over expert TP, their matrices without biases; TE ``GroupedLinear`` keeps their
quantized copies as ``Linear`` does). The router (Megatron-Core's own ``h x experts`` GEMM),
norms, embedding and head stay 16-bit. Each keeps its FP8 copies
(``job.compute.fp8.fp8_weight_bytes``: the cached FP8 weight and its transpose, MXFP8's row-
and column-wise copies with their scales).

**FP8 primary weights** (Megatron-Core ``--fp8-param-gather``; Megatron-Bridge's
``bf16_with_fp8_current_scaling_mixed`` and ``bf16_with_mxfp8_mixed`` set
``fp8_param_gather = True`` at 97ad8cc, df0289c, 21d102f and 4ab94df, the 25.11 to 26.08
performance configs' precisions): the model is built under TE's ``fp8_model_init`` and those
linears' parameters *are* the quantized tensors, so no 16-bit copy of them exists.
Megatron-Core's distributed optimizer keeps their FP32 main weights (counted in ``optimizer``)
and maps the FP8 data into its parameter buffer: ``torch.uint8``, one byte per parameter, for
``Float8Tensor`` (``distributed_data_parallel.py``: "param_dtype = torch.uint8"; the same data
as the first FP8 copy counted); for MXFP8 the parameter all-gather buffer is the gradient
buffer itself (``param_and_grad_buffer.py`` at NVIDIA/Megatron-LM 8f1c2f8, "For MXFP8 param:
Create a shared buffer for param AG and grad RS", ``reuse_grad_buf_for_mxfp8_param_ag``), so
it adds nothing beyond the gradients counted. Either way the 16-bit weight bytes of the FP8
linears come off (``primary_saving``).
"""

from __future__ import annotations

from dlsched.job.compute.fp8 import TE_RECIPES
from dlsched.job.execution import Execution
from dlsched.job.memory.moe import stage_moe_layers
from dlsched.job.model_spec import Model


def attention_matmul_elements(spec: Model) -> int:
    """Weight elements of one layer's attention linears (all TP ranks together)."""
    return spec.layer_matmul_elements() - spec.ffn_matrices * spec.hidden * spec.ffn_hidden


def fp8_linear_parameters(spec: Model, layout: Execution, stage: int) -> tuple[float, float]:
    """(non-expert, routed-expert) parameters per GPU of the linears Transformer Engine runs
    in FP8 on pipeline rank ``stage`` (module docstring): the routed experts apart, their
    state being sharded over the expert-data-parallel group."""
    layers = layout.rank_layers(spec.layers, stage, spec.mtp_layers)
    moe = stage_moe_layers(spec, layout, stage)
    h, t = spec.hidden, layout.tp
    dense_ffn = spec.ffn_matrices * h * spec.ffn_hidden
    shared = spec.shared_experts * spec.ffn_matrices * h * spec.expert_ffn_hidden
    attention = layers * attention_matmul_elements(spec)
    non_expert = (attention + (layers - moe) * dense_ffn + moe * shared) / t
    routed = spec.experts * spec.ffn_matrices * h * spec.expert_ffn_hidden  # no biases
    return non_expert, moe * routed / (layout.ep * layout.etp)


def primary_saving(layout: Execution, weight_bytes: tuple[float, float],
                   parameters: tuple[float, float]) -> float:
    """Bytes per GPU the 16-bit weights hold less with FP8 primary weights (module
    docstring): ``parameters`` (non-expert, expert) at ``weight_bytes`` each (the state's
    16-bit weight bytes per parameter after ZeRO); 0 without ``fp8_param_gather`` or a TE
    recipe."""
    if not layout.run.fp8_param_gather or layout.run.fp8_recipe not in TE_RECIPES:
        return 0.0
    return weight_bytes[0] * parameters[0] + weight_bytes[1] * parameters[1]
