"""GPT-OSS and Llama 4 bundles: parameter counts by hand against the released configs and
the model cards, attention sinks, router biases, and Llama 4 Maverick's interleaved MoE
layers (``moe_layer_offset``)."""

from __future__ import annotations

import ast
from dataclasses import replace

import pytest

from dlsched.errors import ConfigError
from dlsched.job.model_spec import Model, bundled_specs, load_spec

SPECS = bundled_specs()


def _gpt_oss_by_hand(layers: int, experts: int) -> tuple[int, int, int]:
    """(total, active with both embedding tables, active without the input embedding) of a
    GPT-OSS model from its config.json, every tensor of Hugging Face's GptOssForCausalLM."""
    h, heads, kv, d, f, vocab, k = 2880, 64, 8, 64, 2880, 201088, 4
    attention = (h * heads * d + heads * d          # q_proj with bias
                 + 2 * (h * kv * d + kv * d)        # k_proj, v_proj with biases
                 + heads * d * h + h                # o_proj with bias
                 + heads)                           # sinks: one logit per head
    norms = 2 * h
    router = h * experts + experts                  # a biased nn.Linear
    expert = h * 2 * f + 2 * f + f * h + h          # gate_up_proj (+bias), down_proj (+bias)
    layer = attention + norms + router + experts * expert
    active_layer = attention + norms + router + k * expert
    ends = 2 * vocab * h + h                        # embed_tokens, lm_head, final norm
    return (layers * layer + ends, layers * active_layer + ends,
            layers * active_layer + ends - vocab * h)


@pytest.mark.parametrize(("name", "layers", "experts", "card_total", "card_active"), [
    ("gpt-oss-20b", 24, 32, 20.9e9, 3.6e9), ("gpt-oss-120b", 36, 128, 116.8e9, 5.1e9)])
def test_gpt_oss_parameters_match_the_config_and_the_card(name: str, layers: int, experts: int,
                                                          card_total: float,
                                                          card_active: float) -> None:
    spec = SPECS[name]
    total, active, without_embedding = _gpt_oss_by_hand(layers, experts)
    assert spec.parameters() == total
    assert spec.active_parameters() == active
    assert (total, without_embedding) == {"gpt-oss-20b": (20_914_757_184, 3_608_307_264),
                                          "gpt-oss-120b": (116_829_156_672,
                                                           5_132_849_472)}[name]
    # the card's rounded figures: its active count leaves out the input embedding (a lookup)
    assert round(total / 1e8) == round(card_total / 1e8)
    assert round(without_embedding / 1e8) == round(card_active / 1e8)
    assert spec.is_moe_layer(0) and spec.moe_layers == layers


def _llama4_by_hand(experts: int, step: int) -> tuple[int, int]:
    """(total, active) of a Llama 4 text model from its config.json (Hugging Face's
    Llama4ForCausalLM: no biases, the QK norm an L2 norm without weights)."""
    h, heads, kv, d, vocab = 5120, 40, 8, 128, 202048
    fe, fd, layers = 8192, 16384, 48
    attention = h * heads * d + 2 * h * kv * d + heads * d * h + 2 * h
    expert = 3 * h * fe
    moe = attention + h * experts + experts * expert + expert  # router, experts, shared
    moe_active = attention + h * experts + 2 * expert
    dense = attention + 3 * h * fd
    sparse = layers // step
    ends = 2 * vocab * h + h
    return (sparse * moe + (layers - sparse) * dense + ends,
            sparse * moe_active + (layers - sparse) * dense + ends)


@pytest.mark.parametrize(("name", "experts", "step", "card_total"), [
    ("llama4-scout", 16, 1, 109e9), ("llama4-maverick", 128, 2, 400e9)])
def test_llama4_parameters_match_the_config_and_the_card(name: str, experts: int, step: int,
                                                         card_total: float) -> None:
    spec = SPECS[name]
    total, active = _llama4_by_hand(experts, step)
    assert (spec.parameters(), spec.active_parameters()) == (total, active)
    assert (total, active) == {"llama4-scout": (107_769_861_120, 17_172_894_720),
                               "llama4-maverick": (400_711_848_960, 17_184_691_200)}[name]
    assert round(active / 1e9) == 17  # both cards: "17B active"
    if name == "llama4-maverick":
        assert round(total / 1e9) == 401 and abs(total - card_total) / card_total < 0.002
    else:  # the card's 109B includes the vision encoder, which dlsched does not model
        assert 0 < card_total - total < 1.5e9


def test_maverick_interleaves_moe_on_odd_layers_as_hugging_face() -> None:
    spec = SPECS["llama4-maverick"]
    moe = [i for i in range(spec.layers) if spec.is_moe_layer(i)]
    assert moe == list(range(1, 48, 2))  # range(step - 1, layers, step)
    assert spec.moe_layers == 24
    for start in range(0, 12):
        for stop in range(start, 14):
            assert spec.moe_layers_in(start, stop) == sum(map(spec.is_moe_layer,
                                                              range(start, stop)))
    scout = SPECS["llama4-scout"]
    assert all(scout.is_moe_layer(i) for i in range(48))


def test_moe_offset_is_checked_and_read_from_a_file(tmp_path) -> None:
    with pytest.raises(ConfigError, match="moe_layer_offset"):
        SPECS["llama4-maverick"].replace(moe_layer_offset=2)
    path = tmp_path / "m.yaml"
    path.write_text("layers: 4\nhidden: 64\nheads: 4\nseq: 256\nvocab: 100\nexperts: 4\n"
                    "moe_layer_freq: 2\nmoe_layer_offset: 1\nattention_pattern: SF\n"
                    "attention_window: 16\nattention_sinks: true\n")
    spec = load_spec(str(path))
    assert [spec.is_moe_layer(i) for i in range(4)] == [False, True, False, True]
    assert spec.attention_sinks and spec.attention_pattern == "SF"


def test_sinks_add_one_parameter_per_head_and_router_bias_one_per_expert() -> None:
    base = Model(name="t", layers=2, hidden=64, heads=4, seq=128, vocab=100,
                 experts=8, top_k=2)
    sinks = base.replace(attention_sinks=True)
    assert sinks.parameters() - base.parameters() == 2 * 4
    assert sinks.model_flops_per_token() == base.model_flops_per_token()  # negligible
    unbiased = base.replace(bias=False)
    assert base.router_parameters() - unbiased.router_parameters() == 8


def test_megatron_export_names_the_moe_layers_and_router_groups() -> None:
    from dlsched.job.execution import Execution
    from dlsched.job.exports.writers import _megatron_moe

    layout = Execution(tp=1, pp=1, dp=8, microbatch_size=1, global_batch=8, ep=8)
    args = _megatron_moe(SPECS["llama4-maverick"], layout)
    pattern = args[args.index("--moe-layer-freq") + 1]
    assert ast.literal_eval(pattern) == [i % 2 for i in range(48)]  # Megatron-Core evals it
    deepseek = _megatron_moe(SPECS["deepseek-v3"], replace(layout, ep=8))
    assert deepseek[deepseek.index("--moe-router-num-groups") + 1] == "8"
    assert deepseek[deepseek.index("--moe-router-group-topk") + 1] == "4"
    assert ast.literal_eval(deepseek[deepseek.index("--moe-layer-freq") + 1]) == [0] * 3 + [1] * 58
    scout = _megatron_moe(SPECS["llama4-scout"], layout)
    assert "--moe-layer-freq" not in scout and "--moe-router-num-groups" not in scout
