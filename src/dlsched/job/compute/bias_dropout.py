"""Megatron-Core's bias-dropout-add run unfused (the model's ``bias_dropout_fusion`` False).

The zoo's Megatron decoder (``models.zoo._residual``) runs each residual join as one fused
bias-dropout-add kernel: Megatron-Core's ``get_bias_dropout_add(training, fused=True)``,
``bias_dropout_add_fused_train`` under ``jit_fuser`` (megatron/core/fusions/
fused_bias_dropout.py). Megatron-Bridge's ``GPTOSSProvider`` sets ``bias_dropout_fusion =
False`` and ``hidden_dropout = 0.0`` (src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py at
97ad8cc6f and df0289c; ``GPTOSSBridge.provider_bridge`` at 21d102f5e; no perf script overrides
it), so ``TransformerLayer`` calls ``bias_dropout_add_unfused``: eager
``_bias_dropout_add_func`` (the same code at the three tables' Megatron-LM pins 92c8482, 8f1c2f8,
4415119), ``x = x + bias``; ``torch.nn.functional.dropout(x, p=0.0, training=True)``;
``residual + out``. What that launches, per join of ``s x h`` BF16 elements:

* **The dropout at p = 0: nothing.** ATen's ``dropout`` takes the fused ``native_dropout`` only
  for ``0 < p < 1`` (``is_fused_kernel_acceptable``) and otherwise ``_dropout_impl``, which
  returns its input when ``p == 0`` (aten/src/ATen/native/Dropout.cpp): no kernel, no mask.
* **The bias add** (only where the linear returns its bias: the attention's ``linear_proj``,
  Transformer Engine's linear with ``return_bias`` = ``skip_bias_add and bias``,
  megatron/core/extensions/transformer_engine.py; an MoE layer returns ``mlp_bias`` None, its
  experts' fc2 bias added inside them, ``job.compute.moe_costs.expert_eager_ops``): forward one
  ``add`` reading ``x`` and writing the sum (2 passes; the ``h``-wide bias negligible);
  backward ``x``'s gradient is the output's (no kernel) and the bias's is its reduction over
  the tokens (``sum_to_size``: one kernel reading the gradient once).
* **The residual add**: forward one ``add`` (read 2, write 1: 3 passes); backward the add
  passes its gradient to both inputs (no kernel); the residual stream's fork, where that
  gradient meets the one through the layer, is one ``add`` (3 passes), which the fused op's
  backward stands for too.

So a join with a bias is 2 kernels and 5 passes forward, 2 kernels and 4 passes backward; one
without, 1 kernel and 3 passes each way; the fused op priced 3.5 passes forward (the dropout
mask's byte per element included) and 7 backward, one kernel each way.
"""

from __future__ import annotations

from dataclasses import replace

from dlsched.models.layer import Layer
from dlsched.models.ops import Op, elementwise
from dlsched.models.zoo import TransformerModel

FUSED_LABEL = "bias-dropout-add"
FUSED_PASSES = 3.5  # models.zoo._residual: the fused op's passes over its s x h elements
BIAS_ADD_PASSES = 2.0  # read x, write x + bias
BIAS_GRAD_PASSES = 1.0  # the bias gradient's reduction reads the output gradient once
RESIDUAL_PASSES = 3.0  # read two operands, write the sum (forward; the fork's sum backward)


def unfused_ops(elements: float, bias: bool) -> tuple[Op, ...]:
    """The eager kernels of one unfused join over ``elements`` (s x h per sample) with or
    without a returned ``bias`` (module docstring); replicated on every GPU of a TP group, as
    the fused op."""
    residual = replace(elementwise("residual-add", elements, RESIDUAL_PASSES, split=False,
                                   backward_kernels=1),
                       backward_elements=RESIDUAL_PASSES * elements)
    if not bias:
        return (residual,)
    added = replace(elementwise("bias-add", elements, BIAS_ADD_PASSES, split=False,
                                backward_kernels=1),
                    backward_elements=BIAS_GRAD_PASSES * elements)
    return (added, residual)


def with_unfused_bias_dropout(model: TransformerModel, bias: bool,
                              moe: bool) -> TransformerModel:
    """``model`` (the zoo's Megatron decoder) with each fused bias-dropout-add replaced by
    ``unfused_ops``: the attention's join with its bias when the linears have ``bias``, the
    FFN's without one in an ``moe`` model (the MoE layer returns none) and with it otherwise."""
    layers: list[Layer] = []
    for layer in model.layers:
        with_bias = bias and (".mlp." not in layer.name or not moe)
        ops = tuple(new for op in layer.ops for new in (
            unfused_ops(op.elements / FUSED_PASSES, with_bias) if op.label == FUSED_LABEL
            else (op,)))
        layers.append(layer if ops == layer.ops else replace(layer, ops=ops))
    return replace(model, layers=tuple(layers))
