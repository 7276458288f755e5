"""Head size independent of hidden (``Model.head_dim``, issue 50 item 1) and the
bundled Qwen3 dense models (issue 50 item 2)."""

import pytest

from dlsched.errors import ConfigError
from dlsched.job.compute.layer_costs import decoder_model
from dlsched.job.compute.op_checkpoint import layer_matmuls
from dlsched.job.execution import Execution
from dlsched.job.exports.writers import megatron_args, torchtitan_toml
from dlsched.job.model_spec import Model, bundled_specs, load_spec

# Every model bundled before head_dim: (parameters, active parameters, model FLOP per token)
# as the code at 7fbb04e computed them; head_dim's default (hidden / heads) keeps them.
BEFORE = {
    'gpt-1.7b': (1_652_230_656, 1_652_230_656, 11239686144.0),
    'gpt-3.6b': (3_562_168_320, 3_562_168_320, 23592960000.0),
    'gpt-7.5b': (7_467_786_240, 7_467_786_240, 48368713728.0),
    'gpt-18.4b': (18_449_756_160, 18_449_756_160, 116643594240.0),
    'gpt-39.1b': (39_096_041_472, 39_096_041_472, 244108492800.0),
    'gpt-76.1b': (76_050_739_200, 76_050_739_200, 471230054400.0),
    'gpt-145.6b': (145_622_261_760, 145_622_261_760, 897664942080.0),
    'gpt-310.1b': (310_130_540_544, 310_130_540_544, 1899113742336.0),
    'gpt-529.6b': (529_600_819_200, 529_600_819_200, 3230033510400.0),
    'gpt-1008b': (1_008_038_758_400, 1_008_038_758_400, 6128192716800.0),
    'gpt-22b': (22_074_273_792, 22_074_273_792, 139594825728.0),
    'gpt3-175b': (174_615_846_912, 174_615_846_912, 1076442955776.0),
    'mt-nlg-530b': (529_600_819_200, 529_600_819_200, 3230033510400.0),
    'gpt-1t': (1_008_038_758_400, 1_008_038_758_400, 6128192716800.0),
    'llama3-8b': (8_030_261_248, 8_030_261_248, 57912852480.0),
    'llama3-70b': (70_553_706_496, 70_553_706_496, 481434796032.0),
    'llama3-405b': (405_853_388_800, 405_853_388_800, 2625424588800.0),
    'mixtral-8x7b': (46_702_792_704, 12_879_925_248, 82933972992.0),
    'mixtral-8x22b': (140_620_634_112, 39_152_031_744, 250639810560.0),
}


def test_bundled_models_unchanged_by_head_dim():
    specs = bundled_specs()
    for name, (total, active, flops) in BEFORE.items():
        spec = specs[name]
        assert spec.head_dim * spec.heads == spec.hidden and not spec.qk_norm
        assert (spec.parameters(), spec.active_parameters(),
                spec.model_flops_per_token()) == (total, active, flops), name


def _wide() -> Model:
    # hidden 64, 4 heads of 32 (attention width 128 = 2 x hidden), 2 KV heads, FFN 256,
    # gated, no biases, RMSNorm, untied, rotary, qk-norm
    return Model("wide", 2, 64, 4, 16, 100, ffn_hidden=256, kv_heads=2, head_dim=32,
                 qk_norm=True, gated_ffn=True, bias=False, rms_norm=True,
                 tied_embeddings=False, learned_positions=False)


def test_head_dim_parameters_by_hand():
    spec = _wide()
    assert spec.attention_width == 128 and spec.qkv_width == 128 + 2 * 2 * 32
    q, kv, o = 64 * 128, 2 * 64 * (2 * 32), 128 * 64   # wq, wk + wv, wo
    layer = q + kv + o + 2 * 32 + 2 * 64 + 3 * 64 * 256  # + qk-norm, two RMSNorms, SwiGLU
    assert spec.layer_parameters() == layer == 8192 + 8192 + 8192 + 64 + 128 + 49152
    assert spec.parameters() == 2 * layer + 2 * 100 * 64 + 64


def test_head_dim_flops_by_hand():
    spec = _wide()
    s = 16
    gemm = 64 * (128 + 2 * 64) + 128 * 64 + 3 * 64 * 256  # QKV, projection, SwiGLU weights
    core = 2 * s * 128 + 2 * s * 128  # scores and context per token: heads x head_dim = 128
    assert spec.model_flops_per_token() == 3 * (2 * (2 * gemm + core) + 2 * 100 * 64)
    # the zoo's ops: the QKV GEMM h x (a + 2 kv d), the projection a x h, the core at width 128
    model = decoder_model(spec)
    flops = {layer.name: layer.forward_flops for layer in model.layers}
    params = {layer.name: layer.params for layer in model.layers}
    assert (params["h.0.attn.c_attn.weight"], params["h.0.attn.c_proj.weight"]) == (
        64 * 256, 128 * 64)
    assert flops["h.0.attn.c_attn.weight"] == 2 * 64 * 256 * s + 2 * 2 * s * s * 4 * 32
    assert flops["h.0.attn.c_proj.weight"] == 2 * 128 * 64 * s
    wq, wk, wv, wo = layer_matmuls(spec)[:4]
    assert (wq.fan_out, wk.fan_out, wv.fan_out, wo.fan_in) == (128, 64, 64, 128)


def test_head_dim_lifts_the_divisibility_rule():
    with pytest.raises(ConfigError):
        Model("bad", 2, 65, 4, 16, 100)
    assert Model("ok", 2, 65, 4, 16, 100, head_dim=16).attention_width == 64


def test_qwen3_dense_parameters_by_hand():
    specs = bundled_specs()
    # Qwen3-8B (config.json): h 4096, 36 layers, 32 heads x 128, 8 KV heads, FFN 12288, V 151936
    attention = 4096 * 32 * 128 + 2 * 4096 * 8 * 128 + 32 * 128 * 4096  # 41,943,040
    layer = attention + 2 * 128 + 2 * 4096 + 3 * 4096 * 12288  # + qk-norm, 2 RMSNorms, SwiGLU
    assert layer == 192_946_432
    total = 36 * layer + 2 * 151936 * 4096 + 4096  # untied embedding and head, final norm
    assert specs["qwen3-8b"].parameters() == total == 8_190_735_360
    assert round(total / 1e9, 1) == 8.2  # the model card's 8.2B
    # Qwen3-32B: h 5120, 64 layers, 64 heads x 128, 8 KV heads, FFN 25600, V 151936
    attention = 5120 * 64 * 128 + 2 * 5120 * 8 * 128 + 64 * 128 * 5120  # 94,371,840
    layer = attention + 2 * 128 + 2 * 5120 + 3 * 5120 * 25600
    assert layer == 487_598_336
    total = 64 * layer + 2 * 151936 * 5120 + 5120
    assert specs["qwen3-32b"].parameters() == total == 32_762_123_264
    assert round(total / 1e9, 1) == 32.8  # the model card's 32.8B
    # the cards' non-embedding counts: 6.95B and 31.2B
    assert round((36 * 192_946_432 + 4096) / 1e9, 2) == 6.95
    assert round((64 * layer + 5120) / 1e9, 1) == 31.2


def test_head_dim_from_a_spec_file(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("name: wide\nlayers: 2\nhidden: 64\nheads: 4\nseq: 16\nvocab: 100\n"
                    "ffn_hidden: 256\n"
                    "kv_heads: 2\nhead_dim: 32\nqk_norm: true\ngated_ffn: true\nbias: false\n"
                    "rms_norm: true\ntied_embeddings: false\nlearned_positions: false\n")
    assert load_spec(str(path)) == _wide()


def test_qwen3_exports():
    layout = Execution(8, 4, 1, 1, 64, schedule="1f1b")
    args = megatron_args(bundled_specs()["qwen3-32b"], layout).splitlines()[-1].split()
    assert args[args.index("--kv-channels") + 1] == "128" and "--qk-layernorm" in args
    args = megatron_args(bundled_specs()["qwen3-8b"], layout).splitlines()[-1].split()
    assert "--kv-channels" not in args and "--qk-layernorm" in args  # 32 x 128 = 4096
    with pytest.raises(ConfigError, match="qk-norm"):
        torchtitan_toml(bundled_specs()["qwen3-8b"], layout)
