"""Which kernels a Megatron layer's norms run (``Job.transformer_impl``, Megatron-Core's
``--transformer-impl``): the zoo's ``local`` ones or Transformer Engine's.

The zoo prices a Megatron layer's LayerNorm / RMSNorm as apex's fused layer norm, what
Megatron-LM ran in 2021-22 and Megatron-Core's ``local`` layer spec still runs
(``models.ops.norm``: the input read twice, for the statistics and then the normalization,
the output written: three passes forward, six backward). With ``transformer_engine`` (the
layer spec NeMo 2 and Megatron-Bridge build when Transformer Engine is installed:
``get_gpt_layer_with_transformer_engine_spec``, the input norms fused into
``TELayerNormColumnParallelLinear``, the final norm a ``TENorm``) every norm is Transformer
Engine's kernel (``transformer_engine/common/normalization/{layernorm,rmsnorm}`` at v2.1: the
tuned and general forward kernels load each row into registers once, ``x[it].load_from``, and
write the normalized row; the backward kernels load the input and the output gradient once and
write the input gradient, the weight's partial sums going to a small workspace that a finalize
kernel reduces). Per element of the norm's input: read + write forward (2 passes), read 2 +
write 1 backward (3 passes), against the zoo's 3 and 6. Nothing else of the layer changes:
its residual adds and SwiGLU are Megatron-Core's own fused kernels under either layer spec.
"""

from __future__ import annotations

from dataclasses import replace

from dlsched.job.run_choices import check_setting
from dlsched.models.layer import Layer
from dlsched.models.ops import Op
from dlsched.models.zoo import TransformerModel

ZOO_NORM_PASSES = 3  # models.ops.norm: the input read twice, the output written
TE_NORM_PASSES = 2  # one read, one write (module docstring)
TE_NORM_BACKWARD_PASSES = 3  # the input and the output gradient read, the input gradient written


def is_norm(op: Op) -> bool:
    """Whether ``op`` is one of the zoo's Megatron decoder norms (its two per layer, the final
    one, MLA's latent norms), by the labels ``models.zoo.gpt_model`` and ``job.compute.mla``
    give them."""
    return op.kind == "elementwise" and (
        op.label == "ln_f" or op.label.endswith((".ln_1", ".ln_2", "_norm")))


def te_norm(op: Op) -> Op:
    """The zoo's norm ``op`` as Transformer Engine's kernel runs it (module docstring): the same
    elements, weights and FLOP; 2 passes forward and 3 backward over its input."""
    elements = op.elements / ZOO_NORM_PASSES
    return replace(op, elements=TE_NORM_PASSES * elements,
                   backward_elements=TE_NORM_BACKWARD_PASSES * elements)


def with_transformer_impl(model: TransformerModel, impl: str) -> TransformerModel:
    """``model`` (the zoo's decoder) with its norms run by ``impl``'s kernels: unchanged for
    ``local``, Transformer Engine's for ``transformer_engine``."""
    if check_setting("transformer_impl", impl) == "local":
        return model
    layers: list[Layer] = []
    for layer in model.layers:
        ops = tuple(te_norm(op) if is_norm(op) else op for op in layer.ops)
        layers.append(layer if ops == layer.ops else replace(layer, ops=ops))
    return replace(model, layers=tuple(layers))
