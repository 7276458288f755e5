"""Megatron's softmax fallback (``job.compute.megatron_softmax``): when it applies and what it
costs, by hand."""

from __future__ import annotations

import pytest

from dlsched.job.compute.megatron_softmax import (
    fused_softmax_available,
    torch_softmax_op,
    with_megatron_softmax,
)
from dlsched.models.ops import elementwise
from dlsched.models.zoo import megatron_attention


def test_fused_kernel_needs_attention_batches_and_queries_multiple_of_four() -> None:
    # 16 heads (vTrain's GPT): TP 8 leaves 2 per rank; microbatch 1 -> 2 batches, 2 -> 4
    assert not fused_softmax_available(1, 16 // 8, 1024)
    assert fused_softmax_available(2, 16 // 8, 1024)
    assert fused_softmax_available(1, 16 // 4, 1024)
    assert not fused_softmax_available(3, 3, 1024)
    assert not fused_softmax_available(4, 1, 1022)  # sq % 4
    with pytest.raises(ValueError, match="heads_per_rank"):
        fused_softmax_available(1, 0, 1024)


def test_torch_path_bytes_and_kernels() -> None:
    scores = 16 * 1024 * 1024  # heads x queries x keys per sample
    fused = elementwise("softmax", scores)  # read and write at 2 bytes: 4 bytes per score
    torch_op = torch_softmax_op(fused)
    # forward: float() 2+4, *scale 4+4, masked_fill_ 4+4, softmax 4+4, half() 4+2 = 36 bytes
    assert torch_op.elements * 2 == 36 * scores
    # backward: 4+2, 4+4, 4+4, 4+4+4, 2+4 = 40 bytes
    assert torch_op.backward_elements * 2 == 40 * scores
    assert torch_op.kernels == 5 and torch_op.launches_backward == 5
    assert torch_op.split  # per head: divided across the TP group as the fused op
    with pytest.raises(ValueError, match="label"):
        torch_softmax_op(elementwise("attention-dropout", scores))


def test_model_ops_replaced_only_where_the_kernel_is_unavailable() -> None:
    from dlsched.models.layer import Layer
    from dlsched.models.zoo import TransformerModel

    ops = megatron_attention(1024, 1024, 64, 16)
    model = TransformerModel(name="t", layers=(Layer("h.0.attn", 0, ops=ops, block="h.0"),))
    assert with_megatron_softmax(model, 2, 2, 1024) is model
    labels = [op.label for op in with_megatron_softmax(model, 1, 2, 1024).layers[0].ops]
    assert labels == ["scores", "softmax-torch", "attention-dropout", "context", "merge-heads"]
