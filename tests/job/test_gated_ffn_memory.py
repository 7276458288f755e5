"""A gated FFN's activations: SwiGLU keeps its gate and up projections' outputs (the input of
its backward) and the down projection's input, ``3 f`` per token where a GeLU MLP keeps
``2 f``; Korthikanti et al.'s per-layer formula assumes the 2-matrix MLP."""

from __future__ import annotations

import pytest

from dlsched.job.execution import Execution
from dlsched.job.memory.moe import moe_stash_delta
from dlsched.job.memory.per_gpu import layer_activations
from dlsched.job.model_spec import Model

LLAMA = Model("llama-small", 4, 1024, 8, 2048, 32000, ffn_hidden=3072, kv_heads=2,
              tied_embeddings=False, gated_ffn=True, bias=False, rms_norm=True,
              learned_positions=False)


@pytest.mark.parametrize(("recompute", "extra"), [("none", 1), ("selective", 1), ("full", 0)])
@pytest.mark.parametrize("attention", ["flash", "unfused"])
def test_the_gate_is_kept_once_per_token(recompute, extra, attention):
    """Gated minus the same layer ungated: one more ``p s b f / t`` bytes kept (bf16, s 2048,
    b 2, f 3072, TP 4: 12 MiB) without full recomputation, nothing with it (the layer input
    alone is kept); the recomputation transient grows by what the stash no longer keeps."""
    layout = Execution(4, 1, 2, 2, 16, recompute=recompute, sequence_parallel=True)
    gated = layer_activations(LLAMA, layout, "bf16", attention)
    plain = layer_activations(LLAMA.replace(gated_ffn=False), layout, "bf16", attention)
    by_hand = 2 * 2048 * 2 * 3072 / 4
    assert gated[0] - plain[0] == pytest.approx(extra * by_hand)
    assert sum(gated) - sum(plain) == pytest.approx(by_hand)  # the full layer's stash


def test_an_moe_layer_replaces_the_gated_stash_it_counts():
    """An MoE layer's delta takes out the dense FFN's 3 f (gated) or 2 f: the layer's total
    is the same whichever dense FFN it replaces."""
    moe = LLAMA.replace(experts=8, top_k=2)
    layout = Execution(4, 1, 2, 1, 16, sequence_parallel=True, ep=2)
    both = [layer_activations(spec, layout, "bf16")[0] + moe_stash_delta(spec, layout, 2)
            for spec in (moe, moe.replace(gated_ffn=False))]
    f, local = 3072, 2048 / 4
    routed_gate = 2 * local * 4 * 2 * f / 4  # the experts' own gates: T e k tokens x f / e
    assert both[0] - both[1] == pytest.approx(routed_gate)
