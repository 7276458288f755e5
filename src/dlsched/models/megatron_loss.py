"""Megatron's vocab-parallel cross-entropy as one op of the zoo's GPT models
(``models.zoo.gpt_model`` with ``megatron``): its memory traffic in FP32 and its kernels."""

from __future__ import annotations

from dlsched.models.ops import Op, elementwise

CROSS_ENTROPY_KERNELS = (18, 8)
"""Kernels of Megatron's vocab-parallel cross-entropy, forward and backward
(``megatron_cross_entropy``: one per eager tensor op of ``_VocabParallelCrossEntropy``)."""


def megatron_cross_entropy(logits: int) -> Op:
    """Megatron-LM's vocab-parallel cross-entropy on ``logits`` elements per sample: its GPT
    casts the logits to FP32 first (``vocab_parallel_cross_entropy(output.float(), labels)``
    unless ``--fp16-lm-cross-entropy``; neither SC21's scripts nor Korthikanti et al.'s pass
    it), then in FP32: the maximum (read), subtract it (read, write), exp (read, write), the
    sum (read), divide by it (read, write); the backward scales the saved softmax in place
    (read, write) and casts the gradient back to 16 bits. With the casts (read 2 bytes, write 4;
    read 4, write 2) that is 13 FP32 passes per logit over forward and backward, here split
    1:2 as every elementwise op's (``models.ops``): 13/3 in the forward.

    Kernels (``CROSS_ENTROPY_KERNELS``), one per eager tensor op of
    ``_VocabParallelCrossEntropy`` (NVIDIA/Megatron-LM ``megatron/mpu/cross_entropy.py`` at
    aed2f75, SC21's and Korthikanti et al.'s code; the same ops in
    ``megatron/core/tensor_parallel/cross_entropy.py`` at ee6737da and in
    microsoft/Megatron-DeepSpeed's at f4157bea). Forward, 18: the cast, max, subtract, exp,
    sum and divide over the logits, and twelve over the ``s`` targets and their logits: the
    vocabulary-range mask (``target < start``, ``target >= end``, their ``|``), the targets'
    ``clone()`` and offset, ``masked_target[target_mask] = 0`` (a ``masked_fill_``: one
    boolean mask and a scalar), ``torch.arange``, the gather ``logits_2d[arange_1d,
    masked_target_1d]`` and its ``clone()``, ``predicted_logits[target_mask] = 0.0``, and
    ``torch.log(sum_exp_logits) - predicted_logits`` (two). Backward, 8: ``torch.arange``,
    ``1.0 - target_mask.view(-1).float()`` (two), ``grad_2d[arange_1d, masked_target_1d] -=
    ...`` (a gather, a subtraction and a scatter: three), the in-place scaling and the cast
    back. The ops over the targets move a few bytes per token (left out of the traffic); what
    they cost is their launches, which set the pace where the head is launch-bound (a small
    vocabulary shard per GPU). The three TP all-reduces of the row maxima, target logits and
    sums (``s`` FP32 values each) are collectives, not counted here."""
    forward, backward = CROSS_ENTROPY_KERNELS
    return elementwise("cross-entropy", logits, 13 / 3, kernels=forward,
                       backward_kernels=backward, upcast=True)
