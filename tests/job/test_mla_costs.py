"""MLA's ops, TP split, TP exchange and stash, the MTP modules on the last pipeline stage, and the
DeepSeek-V3 plan of issue 50's done-when (fixed layout, exposed all-to-all)."""

from __future__ import annotations

import time

import pytest

from dlsched.job.compute.layer_costs import decoder_model
from dlsched.job.compute.mla import (
    attention_exchange_width,
    attention_stash_delta,
    latent_stash,
    replicated_parameters,
)
from dlsched.job.evaluation.pipeline_split import feasible_splits, stage_layers
from dlsched.job.memory.per_gpu import layer_parameters_per_gpu
from dlsched.job.model_spec import bundled_specs
from dlsched.job.scenario import PlanScenario

DSV3 = bundled_specs()["deepseek-v3"]


def test_mla_layer_ops_match_the_spec():
    """The priced decoder's first (dense) layer: its weights are the spec's dense layer, its
    GEMM and attention FLOP the spec's ``2 x matmul elements + attention core`` per token."""
    model = decoder_model(DSV3, 1)
    layer = [item for item in model.layers if item.block == "h.0"]
    assert sum(item.params for item in layer) == DSV3.layer_parameters() == 187_121_664 + \
        3 * 7168 * 18432
    ops = [op for item in layer for op in item.ops if op.kind in ("gemm", "attention")]
    assert sum(op.flops for op in ops) == pytest.approx(
        DSV3.seq * (2 * DSV3.layer_matmul_elements() + DSV3.attention_core_flops()))
    down = [op for item in layer for op in item.ops if op.label.endswith("_down")]
    assert [op.split for op in down] == [False, False]  # Megatron-Core's duplicated TELinear


def test_mla_tp_split_keeps_down_projections_whole():
    """Over TP 8 each rank holds 1/8 of the up/output projections and FFN but the whole down
    projections (7168 x 1536 + 7168 x 576), latent norms (1536 + 512) and two layer norms."""
    whole = 7168 * 1536 + 7168 * 576 + 1536 + 512
    assert replicated_parameters(DSV3) == whole
    layer = DSV3.layer_parameters()
    assert layer_parameters_per_gpu(DSV3, 8) == (layer - whole - 2 * 7168) / 8 + whole + \
        2 * 7168


def test_mla_exchange_and_stash_widths():
    """Under sequence parallelism MLA all-gathers its latents (1536 + 512 + 64 per token), not
    the 7168-wide input; its stash holds queries and keys of 128 x 192, values and output of
    128 x 128 beyond the four h-wide tensors of Korthikanti et al., and the latents twice."""
    assert attention_exchange_width(DSV3, True) == 2112
    assert attention_exchange_width(DSV3, False) == 7168
    assert attention_stash_delta(DSV3) == 2 * 128 * 192 + 2 * 128 * 128 - 4 * 7168
    assert latent_stash(DSV3) == 2 * (1536 + 512)
    qwen = bundled_specs()["qwen3-30b-a3b"]  # GQA: queries 32 x 128, K and V 4 x 128
    assert attention_stash_delta(qwen) == 2 * 32 * 128 + 2 * 4 * 128 - 4 * 2048
    assert latent_stash(qwen) == 0 and attention_exchange_width(qwen, True) == 2048


def test_mtp_module_counts_as_a_layer_beside_the_loss():
    """61 layers + embedding + loss + the MTP module = 64 slots: DualPipe's 16 stages of 4
    (the first 3 layers and the embedding, the last 2 layers, the MTP module and the loss) and
    Megatron-Core's ``Et|(tt|)*30mL`` over 32 virtual stages."""
    spans = stage_layers(61, 16, 1, "account-embedding-loss", 1)
    assert [len(span) for span in spans] == [3] + [4] * 14 + [2]
    spans = stage_layers(61, 16, 2, "account-embedding-loss", 1)
    assert [len(span) for span in spans] == [1] + [2] * 30 + [0]
    assert feasible_splits(61, 16, 1) == ()
    assert feasible_splits(61, 16, 1, mtp=1) == ("account-embedding-loss",)


def test_deepseek_v3_dualpipe_plan_fixed_layout():
    """Issue 50's done-when: DeepSeek-V3 on 2048 H100s, EP 64 over nodes, PP 16 DualPipe,
    DP 128 (TP 1), its 15,360-sequence batch (as the technical report trains), full
    recomputation (nothing less fits 80 GiB in bf16 here): a row with the exposed all-to-all, its
    last stage carrying the MTP module (more work than the middle stages' 4 layers would
    give it alone), in under 3 s here."""
    start = time.perf_counter()
    row = PlanScenario(model="deepseek-v3", cluster="dgx-h100", gpus=2048, tp=1, pp=16,
                       dp=128, ep=64, schedule="dualpipe", microbatch_size=1,
                       global_batch=15360, recompute="full", zero=1,
                       baselines=False).run().rows[0]
    assert time.perf_counter() - start < 6.0  # 3 s on an idle core; shared machine
    assert row["exposed_ep_a2a_s"] > 0
    assert row["iteration_s"] >= row["bound_s"]


def test_cp_ring_passes_mla_keys_and_values_not_the_latent():
    """Ring CP over 4 ranks at TP 2: one K/V block of DeepSeek-V3 is its 1024 tokens' 128
    heads of keys (192) and values (128), split over TP: 1024 x 128 x 320 / 2 x 2 bytes."""
    from dlsched.job.communication.context_parallel import kv_block_bytes
    from dlsched.job.execution import Execution

    layout = Execution(tp=2, pp=1, dp=1, microbatch_size=1, cp=4)
    assert kv_block_bytes(DSV3, layout) == 1024 * 128 * (192 + 128) / 2 * 2


def test_megatron_args_name_mla_and_mtp():
    """The Megatron-LM export of a DeepSeek-V3 plan carries MLA's ranks and head sizes (the
    key's non-rotary 128, rotary 64, value 128) and the MTP module, not --kv-channels."""
    import shlex

    from dlsched.job.execution import Execution
    from dlsched.job.exports.writers import megatron_args

    layout = Execution(tp=1, pp=16, dp=128, microbatch_size=1, global_batch=16384, chunks=2,
                       schedule="interleaved", recompute="full", zero=1, ep=64,
                       pipeline_split="account-embedding-loss")
    text = megatron_args(DSV3, layout)
    args = shlex.split(text.splitlines()[-1])
    value = {flag: args[i + 1] for i, flag in enumerate(args[:-1])}
    assert "--multi-latent-attention" in args and "--kv-channels" not in args
    assert [value[f] for f in ("--q-lora-rank", "--kv-lora-rank", "--qk-head-dim",
                               "--qk-pos-emb-head-dim", "--v-head-dim", "--mtp-num-layers")] \
        == ["1536", "512", "128", "64", "128", "1"]
    assert "pipeline-model-parallel-layout" in text


@pytest.mark.parametrize("schedule, rank, held", [("1f1b", 15, 2 + 1), ("1f1b", 0, 0),
                                                  ("1f1b", 1, 4), ("dualpipe", 0, 2 + 1)])
def test_mtp_moe_layer_is_held_with_the_last_stage(schedule, rank, held):
    """Over PP 16 (64 slots, 4 a stage): 1F1B's last rank holds layers 59-60 and the MTP
    module's MoE layer 61, its first the dense layers 0-2; DualPipe's rank 0 holds stages 0
    and 15, so the same three MoE layers; their experts and all-to-alls are that rank's."""
    from dlsched.job.execution import Execution
    from dlsched.job.memory.moe import stage_moe_layers

    layout = Execution(tp=1, pp=16, dp=128, microbatch_size=1, global_batch=15360,
                       schedule=schedule, ep=64, pipeline_split="account-embedding-loss")
    assert stage_moe_layers(DSV3, layout, rank) == held


def test_mla_tp_exchange_gathers_the_latents_under_sp():
    """At TP 8 with sequence parallelism a DeepSeek-V3 layer's TP exchange is the FFN's
    all-gather and reduce-scatter of the 7168-wide activation and the attention's all-gather
    of its 2112-wide latents with the 7168-wide reduce-scatter; without SP, two all-reduces."""
    from dlsched.job.cluster import load_cluster
    from dlsched.job.communication.collective_costs import curve
    from dlsched.job.compute.layer_costs import block_costs

    cluster = load_cluster("dgx-h100", 8, "h100")
    group = cluster.group_topology(1, 8)  # 8 ranks 1 apart: the node's NVLink
    message = 1 * 4096 * 7168 * 2
    gather, scatter, reduce = (curve(group, op, "baseline").seconds for op in
                               ("all-gather", "reduce-scatter", "all-reduce"))
    sp = block_costs(DSV3, 1, "h100", "bf16", 8, True, "none", group, "baseline")
    assert sp.tp_forward_s == pytest.approx(
        gather(message) + scatter(message) + gather(message * 2112 / 7168) + scatter(message))
    assert sp.tp_forward_s < 2 * (gather(message) + scatter(message))
    plain = block_costs(DSV3, 1, "h100", "bf16", 8, False, "none", group, "baseline")
    assert plain.tp_forward_s == pytest.approx(2 * reduce(message))


@pytest.mark.parametrize("sp, share", [(False, 1), (True, 8)])
def test_mla_latent_stash_whole_without_sp_split_with_it(sp, share):
    """Two MLA shapes 512 apart in ``q_lora_rank`` differ in one layer's stash by the query
    latent kept before and after its norm, 2 x 512 16-bit elements per token: whole on each
    of TP 8's ranks without sequence parallelism, an eighth with it."""

    from dlsched.job.execution import Execution
    from dlsched.job.memory.per_gpu import layer_activations

    narrow = DSV3.replace(q_lora_rank=1024)
    layout = Execution(tp=8, pp=1, dp=1, microbatch_size=1, sequence_parallel=sp,
                       recompute="none")
    wide_stash = layer_activations(DSV3, layout, "bf16")[0]
    narrow_stash = layer_activations(narrow, layout, "bf16")[0]
    assert wide_stash - narrow_stash == pytest.approx(2 * 512 * 2 * 4096 / share)


def test_per_op_checkpointing_uses_the_value_width_and_refuses_mla():
    """TorchTitan's per-op policy (``--recompute selective-op``): values ``v_head_dim`` wide
    make ``wv`` kv x d_v and ``wo`` heads x d_v; MLA is refused, naming it."""
    from dlsched.errors import ConfigError
    from dlsched.job.compute.op_checkpoint import check_op_checkpoint, layer_matmuls
    from dlsched.job.execution import Execution
    from dlsched.job.model_spec import Model

    spec = Model("m", 2, 256, 4, 16, 100, head_dim=64, kv_heads=2, bias=False,
                 v_head_dim=32)
    shapes = {m.name: (m.fan_in, m.fan_out) for m in layer_matmuls(spec)}
    assert shapes["wv"] == (256, 2 * 32) and shapes["wo"] == (4 * 32, 256)
    layout = Execution(tp=1, pp=1, dp=1, microbatch_size=1, recompute="selective-op")
    dense = Model("d", 2, 256, 4, 16, 100, head_dim=64, bias=False, q_lora_rank=32,
                  kv_lora_rank=16, qk_rope_head_dim=16)
    with pytest.raises(ConfigError, match="multi-head latent attention"):
        check_op_checkpoint(dense, layout)
