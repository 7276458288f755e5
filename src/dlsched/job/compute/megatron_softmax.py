"""Megatron-LM's attention softmax where its fused kernel does not apply: PyTorch's ops.

Megatron's unfused attention core (``attention: unfused``, the zoo's ``megatron_attention``)
runs its scale, causal mask and softmax through ``FusedScaleMaskSoftmax``, which calls the
fused ``ScaledUpperTriangMaskedSoftmax`` kernel (one kernel forward, one backward: the zoo's
``softmax`` op) only when ``is_kernel_available`` (the constraint in ``forward``) accepts the
scores' shape ``[b, np, sq, sk]``: among its conditions, ``attn_batches = b * np`` a multiple
of 4 and ``sq % 4 == 0`` in every version read (microsoft/Megatron-DeepSpeed
``megatron/model/fused_softmax.py`` at 0782d753: ``query_seq_len % 4 == 0 and
attn_batch_size % 4 == 0``; NVIDIA/Megatron-LM's later ``is_kernel_available`` adds
``attn_batches % batch_per_block == 0``, and ``get_batch_per_block`` is 4 for keys from 129 to
2,048: 128 threads a block, one row a warp). Here ``b`` is the microbatch and ``np`` the
heads per TP rank: 16 heads at TP 8 and microbatch 1 give 2 (vTrain's single-node set), and
Megatron then runs ``forward_torch_softmax``. With ``apply_query_key_layer_scaling`` (on by
default in Megatron-LM and Megatron-DeepSpeed's arguments until 2023; it forces
``attention_softmax_in_fp32``) that is, on the ``[b, np, sq, sk]`` scores:

======================  =======================  ==========================================
forward (5 kernels)     bytes per score element  backward by autograd (5 kernels), bytes
======================  =======================  ==========================================
``input.float()``       read 2, write 4          the cast back to 16 bits: read 4, write 2
``input * self.scale``  read 4, write 4          ``grad * scale``: read 4, write 4
``masked_fill_``        read 4, write 4          ``grad.masked_fill(mask, 0)``: 4, 4
(``attention_mask_func``, in place; the ``[b or 1, 1, s, s]`` mask broadcast, not counted)
``Softmax(dim=-1)``     read 4, write 4          ``_softmax_backward_data``: read 4 + 4, write 4
``probs.half()``        read 4, write 2          ``grad.float()``: read 2, write 4
======================  =======================  ==========================================

36 bytes forward and 40 backward per element, against the fused kernel's 2 + 2 forward. The
other conditions (a 16-bit input, the key length's upper bound, which moved from 2,048 to
4,096 and 8,192 between versions) are not checked here: the job's attention is 16-bit
wherever ``unfused`` is priced.
"""

from __future__ import annotations

from dataclasses import replace

from dlsched.models.layer import Layer
from dlsched.models.ops import Op
from dlsched.models.zoo import TransformerModel

SOFTMAX_LABEL = "softmax"
"""The zoo's fused scale-mask-softmax op (``models.zoo.megatron_attention``)."""
KERNEL_MULTIPLE = 4
"""``attn_batches % 4 == 0`` and ``sq % 4 == 0`` (fused_softmax.py, module docstring)."""
TORCH_FORWARD_BYTES = 2 + 4 + 4 + 4 + 4 + 4 + 4 + 4 + 4 + 2
"""Bytes per score element of ``forward_torch_softmax``'s five kernels (table above): 36."""
TORCH_BACKWARD_BYTES = 4 + 2 + 4 + 4 + 4 + 4 + 4 + 4 + 4 + 2 + 4
"""Bytes per score element of their five backward kernels (table above): 40."""
TORCH_KERNELS = 5
"""Kernels of ``forward_torch_softmax`` and of its backward (table above)."""
SCORE_ELEMENT_BYTES = 2
"""A 16-bit score element: the unit of the zoo's ``softmax`` op (read and written once)."""


def fused_softmax_available(microbatch_size: int, heads_per_rank: int, queries: int) -> bool:
    """Whether Megatron's ``FusedScaleMaskSoftmax`` runs its fused kernel on scores of
    ``microbatch_size`` x ``heads_per_rank`` attention batches of ``queries`` rows
    (the module docstring's two conditions)."""
    for name, value in (("microbatch_size", microbatch_size),
                        ("heads_per_rank", heads_per_rank), ("queries", queries)):
        if not (isinstance(value, int) and value >= 1):
            raise ValueError(f"{name}: must be an integer >= 1 (got {value!r})")
    return (microbatch_size * heads_per_rank) % KERNEL_MULTIPLE == 0 and \
        queries % KERNEL_MULTIPLE == 0


def torch_softmax_op(fused: Op) -> Op:
    """``forward_torch_softmax`` in place of the zoo's fused ``softmax`` op ``fused`` (2 x the
    scores' elements per sample: read and written once at 16 bits): the same scores, 36 bytes
    forward and 40 backward per element, 5 kernels each way (module docstring). Elements are
    counted in 16-bit units, as the op's precision prices them."""
    if fused.label != SOFTMAX_LABEL or fused.kind != "elementwise":
        raise ValueError(f"op label: expected the zoo's elementwise {SOFTMAX_LABEL!r} op "
                         f"(got {fused.kind} {fused.label!r})")
    scores = fused.elements / 2
    return replace(fused, label="softmax-torch",
                   elements=scores * TORCH_FORWARD_BYTES / SCORE_ELEMENT_BYTES,
                   backward_elements=scores * TORCH_BACKWARD_BYTES / SCORE_ELEMENT_BYTES,
                   kernels=float(TORCH_KERNELS), backward_kernels=float(TORCH_KERNELS))


def with_megatron_softmax(model: TransformerModel, microbatch_size: int, heads_per_rank: int,
                          queries: int) -> TransformerModel:
    """``model`` with its attention softmax as Megatron runs it at this shape: unchanged where
    the fused kernel applies (``fused_softmax_available``) or the model has no zoo ``softmax``
    op (fused attention kernels), every such op ``torch_softmax_op`` otherwise."""
    if fused_softmax_available(microbatch_size, heads_per_rank, queries):
        return model
    layers: list[Layer] = []
    for layer in model.layers:
        ops = tuple(torch_softmax_op(op) if op.label == SOFTMAX_LABEL else op
                    for op in layer.ops)
        layers.append(layer if ops == layer.ops else replace(layer, ops=ops))
    return replace(model, layers=tuple(layers))
