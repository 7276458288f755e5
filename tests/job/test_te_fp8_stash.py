"""Transformer Engine's FP8 linears keep their inputs quantized (job.memory.te_fp8_stash): one
layer's saved bytes by hand, dense and MoE, under each recipe and recomputation; the FP8
linear weights a rank holds and FP8 primary weights (job.memory.fp8_weights)."""

from __future__ import annotations

import pytest

from dlsched.errors import ConfigError
from dlsched.job.execution import Execution
from dlsched.job.memory.fp8_weights import fp8_linear_parameters, primary_saving
from dlsched.job.memory.moe import moe_stash_delta
from dlsched.job.memory.per_gpu import chunk_stash, layer_activations, memory_per_gpu
from dlsched.job.memory.recompute_modules import layer_saving
from dlsched.job.memory.te_fp8_stash import dense_discount, moe_discount, saved_bytes
from dlsched.job.model_spec import Model
from dlsched.job.run_settings import RunSettings

# h = 64, 4 heads of 16, s = 32, FFN 4h = 256 (GeLU, 2 matrices), b = 1.
SMALL = Model("small", layers=4, hidden=64, heads=4, seq=32, vocab=256)
# 8 experts of width 32, top 2, every layer MoE, no shared expert; gated (3 matrices).
MOE = Model("moe", layers=2, hidden=64, heads=4, seq=32, vocab=256, ffn_hidden=128,
            gated_ffn=True, experts=8, top_k=2, expert_ffn_hidden=32)


def layout(recipe: str | None, recompute: str = "none", tp: int = 2, sp: bool = True,
           **fields) -> Execution:
    run = RunSettings("fp8" if recipe else "bf16", fp8_recipe=recipe, attention="flash")
    base = dict(tp=tp, pp=1, dp=1, microbatch_size=1, global_batch=1, recompute=recompute,
                sequence_parallel=sp, run=run)
    return Execution(**{**base, **fields})


def test_saved_bytes_per_recipe():
    assert saved_bytes("current") == saved_bytes("delayed") == 1.0
    assert saved_bytes("mxfp8") == pytest.approx(33 / 32)  # 1 B + one E8M0 scale per 32
    assert saved_bytes("tensorwise") is None and saved_bytes(None) is None  # torchao, bf16


def test_dense_layer_by_hand():
    """TP 2 with SP: QKV's and FC1's inputs (s h / t = 1,024 elements each) and FC2's (s f / t
    = 4,096) at 1 byte instead of 2: 6,144 bytes less; delayed also keeps linear_proj's FP8
    copy of the core's output (s a / t = 1,024 bytes)."""
    assert dense_discount(SMALL, layout("current"), 2) == (1024.0, 1024.0 + 4096.0)
    assert dense_discount(SMALL, layout("delayed"), 2) == (0.0, 5120.0)
    attention, ffn = dense_discount(SMALL, layout("mxfp8"), 2)
    assert attention + ffn == pytest.approx(6144 * (2 - 33 / 32))
    # without SP the QKV and FC1 inputs are whole on every rank (s h = 2,048 each)
    assert dense_discount(SMALL, layout("current", sp=False), 2) == (2048.0, 2048.0 + 4096.0)
    bf16, fp8 = (layer_activations(SMALL, layout(r), "fp8" if r else "bf16")[0]
                 for r in (None, "current"))
    assert bf16 - fp8 == 6144.0


def test_recomputed_inputs_get_no_discount():
    assert dense_discount(SMALL, layout("current", "full"), 2) == (0.0, 0.0)
    assert dense_discount(SMALL, layout("current", "modules:layernorm"), 2) == (0.0, 4096.0)
    assert dense_discount(SMALL, layout("current", "modules:mlp"), 2) == (1024.0, 1024.0)
    assert dense_discount(SMALL, layout("current", "selective"), 2) == (1024.0, 5120.0)
    assert dense_discount(SMALL, layout("tensorwise"), 2) == (0.0, 0.0)  # torchao's own


def test_moe_layer_by_hand():
    """TP 1, EP 1: R = s k = 64 routed tokens; fc1's input R h = 4,096 and fc2's R f_e = 2,048
    elements at 1 byte instead of 2; moe_act frees fc2's input (its discount goes), moe the
    whole stash. The MoE layer's stash is the dense FFN's discount back plus this off."""
    assert moe_discount(MOE, layout("current", tp=1, sp=False), 2) == 6144.0
    assert moe_discount(MOE, layout("current", "modules:moe_act", tp=1, sp=False), 2) == 4096.0
    assert moe_discount(MOE, layout("current", "modules:moe", tp=1, sp=False), 2) == 0.0
    shared = MOE.replace(shared_experts=1)  # FC2 input s f_e = 1,024 less, FC1's copy 2,048 more
    assert moe_discount(shared, layout("current", tp=1, sp=False), 2) == 6144.0 + 1024 - 2048
    bf16 = chunk_stash(MOE, layout(None, tp=1, sp=False), "bf16", 0)[0][0]
    fp8 = chunk_stash(MOE, layout("current", tp=1, sp=False), "fp8", 0)[0][0]
    # per layer: attention's QKV input s h = 2,048 B less, the MoE FFN 6,144 B less
    assert bf16 - fp8 == 2 * (2048.0 + 6144.0)


def test_fp8_linear_weights_by_hand():
    """SMALL's attention linears 64 x 192 + 64 x 64 = 16,384 elements, its FFN 2 x 64 x 256 =
    32,768: 4 layers over TP 2 hold 98,304 FP8-linear parameters; MOE's routed experts
    8 x 3 x 64 x 32 = 49,152 per layer, over EP 2: 24,576 per GPU per layer."""
    assert fp8_linear_parameters(SMALL, layout("current"), 0) == (98_304.0, 0.0)
    moe = layout("current", tp=1, sp=False, dp=2, ep=2, global_batch=2)
    attention = 64 * (64 + 2 * 64) + 64 * 64
    assert fp8_linear_parameters(MOE, moe, 0) == (2.0 * attention, 2 * 24_576.0)


def test_fp8_primary_weights_drop_the_16_bit_copy():
    """With --fp8-param-gather the FP8 linears keep no 16-bit weight: 2 B x 98,304 less; the
    FP8 copies (data and transpose, 2 x 98,304 B) stay."""
    plain = layout("current")
    primary = layout("current").with_run(fp8_param_gather=True)
    assert primary_saving(plain, (2.0, 2.0), (98_304.0, 0.0)) == 0.0
    weights = [memory_per_gpu(SMALL, lay, "fp8").weights for lay in (plain, primary)]
    assert weights[0] - weights[1] == 2 * 98_304
    bf16 = memory_per_gpu(SMALL, layout(None), "bf16").weights
    assert weights[0] - bf16 == 2 * 98_304  # the cached FP8 weight and its transpose
    with pytest.raises(ConfigError, match="fp8_param_gather"):
        RunSettings("bf16", fp8_param_gather=True)


def test_probabilities_in_the_activation_keep_no_combined_outputs():
    """Megatron-Core >= 0.13 weights the routing probabilities in the activation: the combine's
    R h / e = 64 x 64 expert outputs (8,192 B) give way to R = 64 FP32 probabilities (256 B),
    in the stash and in what recomputing the whole MoE layer frees."""
    old, new = layout(None, tp=1, sp=False), layout(None, tp=1, sp=False).with_run(
        moe_probs_in_activation=True)
    assert moe_stash_delta(MOE, old, 2) - moe_stash_delta(MOE, new, 2) == 8192 - 256
    whole_old, whole_new = (layout(None, "modules:moe", tp=1, sp=False), layout(
        None, "modules:moe", tp=1, sp=False).with_run(moe_probs_in_activation=True))
    assert (layer_saving(MOE, whole_old, 2, moe=True)
            - layer_saving(MOE, whole_new, 2, moe=True)) == 8192 - 256


def test_mla_up_projection_recompute_frees_the_normed_latents():
    """MLA (4 heads, head_dim 24, v_head_dim 16, q_lora 32, kv_lora 16), s = 32, TP 1: the up
    projections' outputs 4 x 24 + 4 x (24 + 16) = 256 elements a token and the normed latents
    they read, 32 + 16 = 48 (the checkpoint keeps the latents before the fused norm only):
    2 x 32 x (256 + 48) = 19,456 B."""
    mla = Model("mla", layers=2, hidden=64, heads=4, seq=32, vocab=256, head_dim=24,
                v_head_dim=16, q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8)
    lay = layout(None, "modules:mla_up_proj", tp=1, sp=False)
    assert layer_saving(mla, lay, 2, moe=False) == 2 * 32 * (256 + 48)
