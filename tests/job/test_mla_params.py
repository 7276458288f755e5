"""MLA, first-k-dense and MTP parameter counts of the bundled DeepSeek-V3 and Qwen3 MoE models,
each computed here by hand from the released config.json and checked against the model cards."""

import math

import pytest

from dlsched.errors import ConfigError
from dlsched.job.model_spec import Model, bundled_specs

H, V = 7168, 129280  # DeepSeek-V3 hidden_size, vocab_size


def _dsv3_by_hand() -> dict[str, int]:
    heads, q_rank, kv_rank, nope, rope, vdim = 128, 1536, 512, 128, 64, 128
    mla = (H * q_rank + q_rank + q_rank * heads * (nope + rope) + H * (kv_rank + rope)
           + kv_rank + kv_rank * heads * (nope + vdim) + heads * vdim * H)
    attention = mla + 2 * H  # input and post-attention RMSNorms
    expert = 3 * H * 2048  # gate, up, down of moe_intermediate_size 2048
    dense = attention + 3 * H * 18432
    moe = attention + H * 256 + 256 * expert + expert  # router, 256 routed, 1 shared
    active_moe = attention + H * 256 + 8 * expert + expert
    main = 3 * dense + 58 * moe + V * H + H + V * H  # embedding, final norm, untied head
    active = 3 * dense + 58 * active_moe + V * H + H + V * H
    mtp = 3 * H + 2 * H * H + moe  # enorm, hnorm, shared-head norm, eh_proj, layer 61 (MoE)
    mtp_active = 3 * H + 2 * H * H + active_moe
    return {"mla": mla, "main": main, "active": active, "mtp": mtp, "mtp_active": mtp_active,
            "eh_proj": 2 * H * H}


def test_deepseek_v3_main_model_is_the_cards_671b():
    spec, hand = bundled_specs()["deepseek-v3"], _dsv3_by_hand()
    assert spec.attention_parameters() == hand["mla"] + 2 * H == 187_121_664
    assert spec.moe_layers == 58  # first_k_dense_replace 3 of 61
    assert spec.parameters() == hand["main"] == 671_026_404_352
    assert round(spec.parameters() / 1e9) == 671  # "671B total parameters"
    # "37B activated for each token" (technical report abstract; the cards truncate, as
    # Qwen3-30B-A3B's 3.35B is its card's "3.3B")
    assert spec.active_parameters() == hand["active"] == 37_552_282_624
    assert math.floor(spec.active_parameters() / 1e9) == 37


def test_deepseek_v3_mtp_module_counts():
    spec, hand = bundled_specs()["deepseek-v3"], _dsv3_by_hand()
    assert spec.mtp_parameters() == hand["mtp"] == 11_610_067_968
    assert spec.mtp_parameters(active=True) == hand["mtp_active"]
    # README_WEIGHTS.md: "11.5B unique parameters, excluding the shared 0.9B Embedding and 0.9B
    # output Head"; "2.4B activated (including the shared 0.9B Embedding and 0.9B output Head)":
    # both are our counts without eh_proj's 2 h^2 = 0.10B (the README leaves it out)
    assert math.floor((spec.mtp_parameters() - hand["eh_proj"]) / 1e8) == 115
    shared = 2 * V * H
    assert math.floor((spec.mtp_parameters(True) - hand["eh_proj"] + shared) / 1e8) == 24
    # the Hugging Face checkpoint's 685B: main + MTP (eh_proj included) + the MTP module's
    # stored copies of the embedding and head + the FP8 weights' FP32 128x128 block scales
    checkpoint = spec.parameters() + spec.mtp_parameters() + shared
    assert round(checkpoint / 1e9) == 684
    scales = _fp8_block_scales(62)
    assert round((checkpoint + scales) / 1e9) == 685


def _fp8_block_scales(layers: int) -> int:
    """``weight_scale_inv`` elements: one per 128 x 128 block of every FP8 linear weight of
    ``layers`` layers (embedding, head, norms and router gate stay BF16/FP32)."""
    def blocks(rows: int, cols: int) -> int:
        return math.ceil(rows / 128) * math.ceil(cols / 128)
    attention = (blocks(1536, H) + blocks(128 * 192, 1536) + blocks(576, H)
                 + blocks(128 * 256, 512) + blocks(H, 128 * 128))
    dense = 2 * blocks(18432, H) + blocks(H, 18432)
    expert = 2 * blocks(2048, H) + blocks(H, 2048)
    return layers * attention + 3 * dense + (layers - 3) * 257 * expert + blocks(H, 2 * H)


@pytest.mark.parametrize("name, total, active, card", [
    ("qwen3-30b-a3b", 30_532_122_624, 3_353_032_704, (30.5, 3.3, 1e8)),
    ("qwen3-235b-a22b", 235_093_634_560, 22_190_763_520, (235, 22, 1e9)),
])
def test_qwen3_moe_counts(name, total, active, card):
    spec = bundled_specs()[name]
    h, layers, heads, experts, fe = spec.hidden, spec.layers, spec.heads, 128, \
        spec.expert_ffn_hidden
    attention = h * heads * 128 + 2 * h * 4 * 128 + heads * 128 * h + 2 * h + 2 * 128
    layer = attention + h * experts + experts * 3 * h * fe
    by_hand = layers * layer + 151936 * h + h + 151936 * h
    assert spec.parameters() == by_hand == total
    assert spec.active_parameters() == by_hand - layers * (experts - 8) * 3 * h * fe == active
    # the cards: 30.5B / 3.3B activated, 235B / 22B activated (to the figure's last digit)
    figure_total, figure_active, unit = card
    assert math.floor(total / unit) == round(figure_total * 1e9 / unit)
    assert math.floor(active / unit) == round(figure_active * 1e9 / unit)


def test_first_k_dense_and_frequency_share_one_rule():
    spec = Model("m", 12, 64, 4, 16, 100, experts=4, first_k_dense=3,
                 moe_layer_freq=2)
    moe = [i for i in range(12) if spec.is_moe_layer(i)]
    assert moe == [4, 6, 8, 10]
    for start in range(13):
        for stop in range(start, 13):
            assert spec.moe_layers_in(start, stop) == sum(start <= i < stop for i in moe)


def test_value_head_dim_independent_of_key_head_dim():
    base = Model("m", 2, 256, 4, 16, 100, head_dim=64, kv_heads=2, bias=False)
    wide = Model("m", 2, 256, 4, 16, 100, head_dim=64, kv_heads=2, bias=False,
                 v_head_dim=32)
    # QKV 256 x (4*64 + 2*64 + 2*v), output projection 4*v x 256
    assert base.attention_parameters() - wide.attention_parameters() == \
        256 * 2 * 32 + 4 * 32 * 256
    assert wide.attention_core_flops() == 2 * 16 * 4 * (64 + 32)


@pytest.mark.parametrize("fields, word", [
    ({"q_lora_rank": 8}, "kv_lora_rank"),
    ({"kv_lora_rank": 8, "qk_rope_head_dim": 0}, "qk_rope_head_dim"),
    ({"kv_lora_rank": 8, "qk_rope_head_dim": 8, "kv_heads": 2}, "kv_heads"),
    ({"first_k_dense": 5}, "first_k_dense"),
])
def test_bad_shapes_name_the_field(fields, word):
    with pytest.raises(ConfigError, match=word):
        Model("m", 4, 64, 4, 16, 100, head_dim=16, **fields)
