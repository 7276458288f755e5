"""A Megatron layer's norms by implementation (job.compute.transformer_impl): the zoo's apex
fused layer norm (3 passes forward, 6 backward) or Transformer Engine's kernels (2 and 3),
checked by hand on Llama 3 8B."""

from __future__ import annotations

import pytest

from dlsched.errors import ConfigError
from dlsched.job.cluster import load_cluster
from dlsched.job.compute.layer_costs import block_costs, decoder_model
from dlsched.job.compute.transformer_impl import is_norm, te_norm, with_transformer_impl
from dlsched.job.model_spec import bundled_specs
from dlsched.job.run_settings import RunSettings

SPEC = bundled_specs()["llama3-8b"]
TOKENS, HIDDEN = 4096, 4096  # one GPU's 8192 / CP 2 tokens of Llama 3 8B
RATE = 0.6832 * 3.35e12  # the h100 preset's achieved memory bandwidth, B/s
ROW = TOKENS * HIDDEN * 2  # bytes of one norm's 16-bit input per microbatch


def test_only_the_norms_change() -> None:
    model = decoder_model(SPEC, 1, 2, "ring", "fused")
    assert with_transformer_impl(model, "local") is model
    te = with_transformer_impl(model, "transformer_engine")
    changed = {op.label for a, b in zip(model.layers, te.layers, strict=True)
               for op, new in zip(a.ops, b.ops, strict=True) if op != new}
    assert changed == {"h.0.ln_1", "h.0.ln_2", "ln_f"}
    norm = next(op for layer in model.layers for op in layer.ops if op.label == "h.0.ln_1")
    assert is_norm(norm) and norm.elements == 3 * TOKENS * HIDDEN
    fast = te_norm(norm)
    assert (fast.elements, fast.backward_elements) == (2 * TOKENS * HIDDEN, 3 * TOKENS * HIDDEN)
    assert (fast.flops, fast.weights, fast.split) == (norm.flops, norm.weights, norm.split)


def test_layer_saving_by_hand() -> None:
    """TP 1: each of the two norms saves one pass of its 4096 x 4096 16-bit input forward
    (2 x 33.6 MB at 2.289 TB/s = 0.0293 ms) and three backward (6 -> 3: 0.0880 ms); under
    sequence parallelism at TP 4 the norms see a quarter of the tokens, and save a quarter."""
    group = load_cluster("dgx-h100", 8, None).group_topology(1, 1)
    costs = {impl: block_costs(SPEC, 1, "h100", "bf16", 1, False, "none", group, "baseline", 2,
                               "ring", "fused", transformer_impl=impl)
             for impl in ("local", "transformer_engine")}
    local, te = costs["local"], costs["transformer_engine"]
    assert local.layer_f - te.layer_f == pytest.approx(2 * ROW / RATE)
    assert local.layer_b - te.layer_b == pytest.approx(2 * 3 * ROW / RATE)
    assert local.head_f - te.head_f == pytest.approx(ROW / RATE)  # the final norm
    group4 = load_cluster("dgx-h100", 8, None).group_topology(4, 1)
    quarter = [block_costs(SPEC, 1, "h100", "bf16", 4, True, "none", group4, "baseline", 2,
                           "ring", "fused", transformer_impl=impl)
               for impl in ("local", "transformer_engine")]
    assert quarter[0].layer_b - quarter[1].layer_b == pytest.approx(2 * 3 * ROW / 4 / RATE)


def test_unknown_impl_is_refused_naming_the_field() -> None:
    with pytest.raises(ConfigError, match=r"^transformer_impl: 'apex' is not accepted; "
                                          r"accepted: local, transformer_engine"):
        RunSettings(transformer_impl="apex")
