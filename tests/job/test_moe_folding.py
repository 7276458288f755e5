"""MoE parallel folding (expert TP other than TP) and MoE layers under context parallelism:
the routed shapes and bytes by hand, the expert groups placed on the links they span, memory,
the identity with Megatron-Core's default, the search and the exports."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dlsched.errors import ConfigError
from dlsched.job.cluster import node_cluster
from dlsched.job.communication.tp_overlap import overlapped_tp
from dlsched.job.compute.layer_costs import decoder_model, gpu_compute
from dlsched.job.compute.moe_costs import a2a_bytes, routed_ops
from dlsched.job.evaluation.evaluate import Job, evaluate
from dlsched.job.execution import Execution
from dlsched.job.exports.writers import megatron_args
from dlsched.job.memory.moe import experts_per_gpu, moe_stash_delta
from dlsched.job.memory.per_gpu import memory_per_gpu
from dlsched.job.model_spec import Model
from dlsched.job.run_settings import RunSettings
from dlsched.job.search import SPACES, layouts

SPEC = Model("moe-fold", 4, 1024, 8, 2048, 32000, ffn_hidden=2048, kv_heads=8,
             tied_embeddings=False,
             gated_ffn=True, bias=False, rms_norm=True, learned_positions=False,
             experts=8, top_k=2)


def _job(gpus: int = 16) -> Job:
    return Job(SPEC, node_cluster("dgx-h100", gpus))


def test_expert_shapes_by_hand_under_folding_and_cp():
    """TP 4, CP 2, expert TP 1, EP 8, b = 1, s = 2048: each GPU routes T = 2048 / (2 x 4) =
    256 tokens, sends T k = 512 copies and receives as many (balanced), so its one expert runs
    M = 512 tokens at the whole width (fc1 N = 2 x 2048, fc2 K = 2048); with expert TP 4 (the
    default) the four TP ranks' tokens are gathered: M = 2048 at a quarter of the width."""
    _, folded, _ = routed_ops(SPEC, 1, 4, 8, cp=2, expert_tp=1)
    assert folded[0].shape == (512, 4096, 1024, 1) and folded[2].shape == (512, 1024, 2048, 1)
    _, default, _ = routed_ops(SPEC, 1, 4, 8, cp=2)
    assert default[0].shape == (2048, 1024, 1024, 1) and default[2].shape == (2048, 1024, 512, 1)
    gemm = [op.flops for op in folded if op.kind == "gemm"]
    assert gemm == [2 * 512 * 1024 * 4096, 2 * 512 * 2048 * 1024]
    assert sum(op.flops for op in folded) == pytest.approx(sum(op.flops for op in default))
    assert a2a_bytes(SPEC, 1, 4, cp=2) == 256 * 2 * 1024 * 2


def test_the_ffn_under_cp_is_the_ffn_of_the_cp_ranks_tokens():
    """The MoE FFN is token-wise: at CP 2 its ops are those of the sequence of s / 2 tokens."""
    half = SPEC.replace(seq=SPEC.seq // 2)
    for etp in (None, 1, 2):
        assert routed_ops(SPEC, 2, 2, 4, cp=2, expert_tp=etp) == routed_ops(half, 2, 2, 4,
                                                                           expert_tp=etp)


def test_expert_tp_equal_to_tp_is_megatron_cores_default():
    job, run = _job(), RunSettings("bf16", "baseline", "none", tp_comm_overlap=True)
    layout = Execution(4, 1, 4, 1, 16, sequence_parallel=True, ep=4, cp=1, run=run)
    same = Execution(4, 1, 4, 1, 16, sequence_parallel=True, ep=4, expert_tp=4, run=run)
    assert same == layout and same.expert_tp is None and same.etp == 4
    assert evaluate(job, same).iteration_s == evaluate(job, layout).iteration_s
    assert "ETP" not in layout.label()
    assert "ETP1" in Execution(4, 1, 4, 1, 16, sequence_parallel=True, ep=4, expert_tp=1).label()


def test_expert_groups_fold_into_the_node():
    """16 H100s, TP 4, DP 4: EP 8 with expert TP 1 is the node's 8 neighbouring ranks (one
    NVSwitch dimension); EP 4 with expert TP 4 is 4 ranks 4 apart, crossing into the other
    node; expert DP is what is left of TP x CP x DP = 16."""
    cluster = node_cluster("dgx-h100", 16)
    folded = Execution(4, 1, 4, 1, 16, sequence_parallel=True, ep=8, expert_tp=1)
    group = folded.group("ep", cluster)
    assert [dim.size for dim in group.dims] == [8]
    assert folded.expert_dp == 2
    assert [dim.size for dim in folded.group("expert_dp", cluster).dims] == [2]
    default = Execution(4, 1, 4, 1, 16, sequence_parallel=True, ep=4)
    assert [dim.size for dim in default.group("ep", cluster).dims] == [2, 2]
    assert default.expert_dp == 1  # 16 / (4 x 4)


def test_folded_memory_by_hand():
    """Expert TP 1, EP 8: each GPU holds one whole expert per layer (3 h f_e parameters); its
    stash of the routed tokens is that of T e k = 256 x 1 x 2 tokens at the whole width."""
    layout = Execution(4, 1, 2, 1, 16, sequence_parallel=True, ep=8, expert_tp=1, cp=2)
    h, fe = 1024, 2048
    assert experts_per_gpu(SPEC, layout) == 3 * h * fe
    local, routed = 1024 // 4, 1024 // 4 * 2
    moe = 2 * local * h + 4 * local * 8 + 2 * routed * h + 2 * routed * 3 * fe + 2 * routed * h
    dense = 2 * local * h + 3 * 2 * 1024 * 2048 / 4  # gated: gate, up and down inputs
    assert moe_stash_delta(SPEC, layout, 2) == pytest.approx(moe - dense)
    default = Execution(4, 1, 2, 1, 16, sequence_parallel=True, ep=2, cp=2)
    held = memory_per_gpu(SPEC, default, "bf16").parameters - memory_per_gpu(
        SPEC, layout, "bf16").parameters
    assert held == pytest.approx(4 * (8 / 2 / 4 - 1) * 3 * h * fe)  # 4 layers: 1 vs 1 expert
    # expert DP: 16 / (1 x 8) = 2 ranks shard the experts' optimizer state under ZeRO 1
    zero = memory_per_gpu(SPEC, replace(layout, zero=1), "bf16")
    plain = memory_per_gpu(SPEC, layout, "bf16")
    assert plain.optimizer - zero.optimizer >= 4 * 3 * h * fe * 12 / 2


def test_attention_and_mlp_overlaps_add_up_to_the_layer():
    """The MoE layer's attention half takes the attention's collectives of TE's overlap; the
    two halves' exposed seconds sum to the whole layer's."""
    model = decoder_model(SPEC)
    compute = gpu_compute("h100", "bf16", 4, True)
    group = node_cluster("dgx-h100", 8).group_topology(1, 4)
    message = 2048 * 1024 * 2
    whole = overlapped_tp(model, compute, 1, message, group, "baseline")
    attn = overlapped_tp(model, compute, 1, message, group, "baseline", halves=("attn",))
    mlp = overlapped_tp(model, compute, 1, message, group, "baseline", halves=("mlp",))
    assert attn[0] + mlp[0] == pytest.approx(whole[0])
    assert attn[1] + mlp[1] == pytest.approx(whole[1])
    assert 0 < attn[0] < whole[0]


def test_folding_keeps_the_all_to_all_on_nvlink():
    """EP 8 across the node's TP x CP ranks (expert TP 1) exchanges over NVLink; EP 8 carved out
    of DP with expert TP 4 crosses the NICs: its All-to-All is slower."""
    job = _job(64)
    folded = Execution(4, 1, 8, 1, 64, sequence_parallel=True, ep=8, expert_tp=1, cp=2)
    default = Execution(4, 1, 8, 1, 64, sequence_parallel=True, ep=8, cp=2)
    fast, slow = evaluate(job, folded), evaluate(job, default)
    assert fast.exposed["ep_a2a_s"] < slow.exposed["ep_a2a_s"]
    assert evaluate(job, folded, fast=False).iteration_s == pytest.approx(fast.iteration_s)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"tp": 4, "dp": 2, "ep": 8, "expert_tp": 2}, "expert_tp"),
    ({"tp": 2, "dp": 2, "ep": 1, "expert_tp": 0}, "expert_tp")])
def test_a_fold_that_does_not_fit_names_the_field(kwargs, field):
    with pytest.raises(ConfigError, match=f"^{field}: "):
        Execution(pp=1, microbatch_size=1, global_batch=8, sequence_parallel=True, **kwargs)


def test_expert_tp_on_a_dense_model_or_an_uneven_width_is_refused():
    dense = Job(SPEC.replace(experts=0), node_cluster("dgx-h100", 8))
    with pytest.raises(ConfigError, match=r"^expert_tp: ") as refused:
        evaluate(dense, Execution(2, 1, 4, 1, 8, sequence_parallel=True, expert_tp=1))
    assert refused.value.field == "expert_tp"
    odd = Job(SPEC.replace(expert_ffn_hidden=2050), node_cluster("dgx-h100", 8))
    with pytest.raises(ConfigError, match=r"^expert_tp: 4 does not divide"):
        evaluate(odd, Execution(1, 1, 8, 1, 8, ep=2, expert_tp=4))


def test_search_folds_experts_beside_tp():
    """With TP 4 fixed on 16 GPUs the search tries expert TP 4 (EP out of DP 4: 1, 2, 4) and
    expert TP 1 (EP out of the 16 ranks: 1, 2, 4, 8); a fixed expert TP is kept."""
    choice = Execution.searching(global_batch=16, tp=4, pp=1, cp=1)
    pairs = {(layout.etp, layout.ep) for layout in layouts(_job(), choice, SPACES["dlsched"])}
    assert pairs == {(4, 1), (4, 2), (4, 4), (1, 1), (1, 2), (1, 4), (1, 8)}
    fixed = Execution.searching(global_batch=16, tp=4, pp=1, cp=1, expert_tp=4)
    assert {layout.etp for layout in layouts(_job(), fixed, SPACES["dlsched"])} == {4}


def test_exports_write_the_expert_tp():
    layout = Execution(4, 1, 4, 1, 16, sequence_parallel=True, ep=8, expert_tp=1)
    assert "--expert-tensor-parallel-size 1" in megatron_args(SPEC, layout)
    assert "--expert-tensor-parallel-size 4" in megatron_args(SPEC, replace(
        layout, ep=4, expert_tp=None))
