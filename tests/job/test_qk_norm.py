"""Megatron-Core's per-head query and key norms (``qk_norm``: Qwen3's q_norm and k_norm) as
Transformer Engine's RMSNorm runs them: job.compute.qk_norm, counted by hand from the module
docstring."""

from __future__ import annotations

import pytest

from dlsched.job.cluster import load_cluster
from dlsched.job.compute.layer_costs import block_costs, decoder_model, rank_decoder
from dlsched.job.compute.qk_norm import qk_norm_ops, with_qk_norms
from dlsched.job.compute.transformer_impl import with_transformer_impl
from dlsched.job.model_spec import Model, bundled_specs

QWEN = bundled_specs()["qwen3-8b"]  # 32 query heads, 8 key heads of 128, sequence 4096
PLAIN = QWEN.model_copy(update={"qk_norm": False})
Q, K = 4096 * 32 * 128, 4096 * 8 * 128  # elements per sample
RATE = 0.6832 * 3.35e12  # the h100 preset's achieved memory rate, B/s (test_unfused_rope)


def _attention_ops(spec: Model) -> list[str]:
    """The op labels of block 0's QKV layer."""
    model = rank_decoder(spec, 1, "ring", "fused", 1, "local")
    return [op.label for layer in model.layers if layer.name == "h.0.attn.c_attn.weight"
            for op in layer.ops]


def test_ops_by_hand() -> None:
    """The keys' copy: 1 kernel, 2 passes over the keys, nothing backward; the two norms: 2
    kernels forward, 4 backward, the zoo norm's 3 passes over q + k (Transformer Engine's 2
    forward and 3 backward once ``transformer_engine`` prices the norms)."""
    copy, norms = qk_norm_ops(Q, K, 128)
    assert (copy.kernels, copy.launches_backward) == (1, 0)
    assert copy.elements == 2 * K and copy.backward_elements == 0
    assert (norms.kernels, norms.launches_backward) == (2, 4)
    assert norms.elements == 3 * (Q + K) and norms.split and copy.split
    model = with_transformer_impl(decoder_model(QWEN, 1, 1, "ring", "fused"),
                                  "transformer_engine")
    te = next(op for layer in model.layers for op in layer.ops if op.label == "attn.qk_norm")
    assert (te.elements, te.backward_elements) == (2 * (Q + K), 3 * (Q + K))
    with pytest.raises(ValueError, match="qk_norm_ops"):
        qk_norm_ops(Q, 0, 128)


def test_placed_after_the_qkv_gemm_once_per_block() -> None:
    # with job.compute.qkv_layout's copies of the attention's inputs around them
    assert _attention_ops(QWEN) == ["h.0.attn.c_attn", "attn.qkv-grad-cat", "attn.q-reshape",
                                    "attn.k-contiguous", "attn.qk_norm", "attn.kv-contiguous",
                                    "flash-attention"]
    assert _attention_ops(PLAIN) == ["h.0.attn.c_attn", "attn.qkv-grad-cat", "attn.q-reshape",
                                     "attn.kv-contiguous", "flash-attention"]
    deep = with_qk_norms(decoder_model(PLAIN, 2, 1, "ring", "fused"), 4096, 32, 8, 128)
    assert sum(op.label == "attn.qk_norm" for layer in deep.layers for op in layer.ops) == 2


def test_seconds_by_hand() -> None:
    """One H100 microbatch of 1, TP 1, Transformer Engine's norms. Backward GPU-bound: 3 passes
    of 16-bit q and k at the preset's memory rate (0.0550 ms: the copy has no backward; the
    norms' weights, 2 x 128 elements, are the rest of the tolerance); forward at least the
    norms' 2 passes and the copy's 2 over k (0.0440 ms), at most that and its 3 launches."""
    group = load_cluster("dgx-h100", 8, None).group_topology(1, 1)
    costs = [block_costs(spec, 1, "h100", "bf16", 1, False, "none", group, "baseline", 1,
                         "ring", "fused", transformer_impl="transformer_engine")
             for spec in (PLAIN, QWEN)]
    assert costs[1].layer_b - costs[0].layer_b == pytest.approx(3 * (Q + K) * 2 / RATE, rel=1e-4)
    forward = costs[1].layer_f - costs[0].layer_f
    assert forward >= (2 * (Q + K) + 2 * K) * 2 / RATE * (1 - 1e-4)
    assert forward <= (2 * (Q + K) + 2 * K) * 2 / RATE + 3 * 77.44e-6
