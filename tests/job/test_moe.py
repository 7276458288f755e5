"""Mixture-of-experts layers and expert parallelism in the job planner: parameter counts against
the model cards, the All-to-All's seconds by hand, conserved bytes and FLOP, memory, the
policies' order on a multi-dimensional EP group, the search over EP and the exports."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from dlsched.errors import ConfigError
from dlsched.job.cluster import load_cluster, node_cluster
from dlsched.job.compute.moe_costs import a2a_bytes, moe_layer_costs, routed_ops
from dlsched.job.evaluation.evaluate import Job, evaluate
from dlsched.job.execution import Execution
from dlsched.job.exports.writers import megatron_args, torchtitan_toml
from dlsched.job.memory.per_gpu import memory_per_gpu
from dlsched.job.model_spec import Model, bundled_specs, load_spec
from dlsched.job.run_settings import RunSettings
from dlsched.job.search import SPACES, layouts

SMALL = Model("moe-small", 4, 1024, 8, 1024, 32000, ffn_hidden=2048, kv_heads=8,
              tied_embeddings=False,
              gated_ffn=True, bias=False, rms_norm=True, learned_positions=False,
              experts=8, top_k=2)


def test_mixtral_8x7b_parameters_by_hand():
    h, f, v, q = 4096, 14336, 32000, 4096 + 2 * 8 * 128
    attention = h * q + h * h + 2 * h  # QKV, projection, two RMSNorms
    expert = 3 * h * f  # SwiGLU: gate, up, down
    layer = attention + h * 8 + 8 * expert  # router h x 8
    total = 32 * layer + 2 * v * h + h  # untied embedding and output, final norm
    active = 32 * (attention + h * 8 + 2 * expert) + 2 * v * h + h
    spec = load_spec("mixtral-8x7b")
    assert spec.parameters() == total == 46_702_792_704  # the paper's 46.7B
    assert spec.active_parameters() == active == 12_879_925_248  # 12.9B active
    assert spec.moe_layers == 32
    flops = 3 * (32 * (2 * (h * q + h * h + h * 8 + 2 * expert) + 4 * 4096 * h) + 2 * v * h)
    assert spec.model_flops_per_token() == flops


def test_mixtral_8x22b_parameters_match_the_announcement():
    spec = load_spec("mixtral-8x22b")
    assert round(spec.parameters() / 1e9) == 141
    assert round(spec.active_parameters() / 1e9) == 39


def test_dense_models_are_unchanged():
    spec = load_spec("llama3-8b")
    assert spec.parameters() == spec.active_parameters() == 8_030_261_248
    assert spec.moe_layers == 0


def test_every_kth_layer_and_shared_experts():
    spec = SMALL.replace(moe_layer_freq=2, shared_experts=1)
    assert [spec.is_moe_layer(i) for i in range(4)] == [True, False, True, False]
    h = 1024
    dense = spec.layer_parameters()
    moe = spec.attention_parameters() + 8 * h + 9 * 3 * h * 2048
    assert spec.parameters() == 2 * dense + 2 * moe + 2 * 32000 * h + h


def _small_job(gpus: int = 8) -> Job:
    """The small MoE model on ``gpus`` GPUs (its layouts run with the default settings:
    bf16, baseline collectives, the DP reduction after the backward)."""
    return Job(SMALL, node_cluster("dgx-h100", gpus))


def test_all_to_all_seconds_by_hand():
    """8 GPUs on one NVSwitch, NCCL's All-to-All (collectives.nccl_alltoall): D bytes per GPU
    cost NCCL's Simple base and NVLink step latencies (8.4 + 3.4 us) + 7/8 D at the 370.8 GB/s
    NCCL credits an H100's NVLinks; the dispatcher's routing probabilities (FP32, one per
    routed copy) go in a third All-to-All."""
    job = _small_job()
    layout = Execution(1, 1, 8, 1, 8, ep=8)
    costs = moe_layer_costs(SMALL, layout, "h100", "bf16", None,
                            layout.group("ep", job.cluster), "baseline")
    sent = 1024 * 2 * 1024 * 2  # tokens x top-k x hidden x 2 bytes
    assert costs.dispatch_bytes == costs.combine_bytes == sent == a2a_bytes(SMALL, 1, 1)
    one = 11.8e-6 + sent * 7 / 8 / 370.8e9
    probs = 11.8e-6 + 1024 * 2 * 4 * 7 / 8 / 370.8e9
    assert costs.a2a_forward_s == pytest.approx(2 * one + probs, rel=1e-3)
    assert costs.a2a_backward_s == pytest.approx(2 * one + probs, rel=1e-3)
    assert costs.tokens_per_expert == 1024 * 2 / 1  # one expert per rank
    result = evaluate(job, layout)
    assert result.exposed["ep_a2a_s"] == pytest.approx(  # m=1, 4 layers, forward and backward
        4 * 2 * (2 * one + probs), rel=1e-3)


def test_expert_flops_conserved_over_the_ep_group():
    """The routed FLOP on the EP group's ranks add up to every token's top-k experts."""
    tokens, h, f = 1024, 1024, 2048
    for ep in (1, 2, 4, 8):
        _, experts, _ = routed_ops(SMALL, 1, 1, ep)
        flops = ep * sum(op.flops for op in experts if op.kind == "gemm")
        assert flops == 2 * ep * tokens * 2 * 3 * h * f
        assert math.prod(experts[0].shape[::3]) == tokens * 2  # M x local experts: T k


def test_capacity_factor_caps_the_imbalance():
    skewed = SMALL.replace(router_imbalance=2.0)
    capped = skewed.replace(capacity_factor=1.25)
    assert a2a_bytes(skewed, 1, 1) == 2 * a2a_bytes(SMALL, 1, 1)
    assert a2a_bytes(capped, 1, 1) == 1.25 * a2a_bytes(SMALL, 1, 1)
    layout = Execution(1, 1, 8, 1, 8, ep=8)
    group = layout.group("ep", node_cluster("dgx-h100", 8))
    # at a capacity factor of 1 the load stays the mean's (and, like the capped layer, takes
    # the padded dispatch path: no dropless host launches, job.compute.moe_host)
    times = [moe_layer_costs(s, layout, "h100", "bf16", None, group, "baseline").layer_f
             for s in (SMALL.replace(capacity_factor=1.0), capped, skewed)]
    assert times[0] < times[1] < times[2]


def test_expert_state_sharded_over_experts_and_expert_dp():
    layout4, layout8 = Execution(1, 1, 8, 1, 8, ep=4), Execution(1, 1, 8, 1, 8, ep=8)
    m4, m8 = (memory_per_gpu(SMALL, lay, "bf16") for lay in (layout4, layout8))
    experts_per_layer = 8 * 3 * 1024 * 2048
    held = 4 * experts_per_layer * (1 / 4 - 1 / 8)  # 4 layers, 2 vs 1 experts per GPU
    assert m4.parameters - m8.parameters == pytest.approx(held)
    assert m4.weights - m8.weights == pytest.approx(2 * held)
    zero1 = [memory_per_gpu(SMALL, replace(lay, zero=1), "bf16") for lay in (layout4, layout8)]
    # ZeRO-1 shards expert optimizer state over cp x dp / ep = 2 and 1 ranks
    expert4 = 4 * experts_per_layer / 4 * 12 / 2
    expert8 = 4 * experts_per_layer / 8 * 12 / 1
    assert zero1[0].optimizer - zero1[1].optimizer == pytest.approx(expert4 - expert8)


def test_policies_order_on_a_multi_dimensional_ep_group():
    """EP 8 with TP 2 spans 4 GPUs of a node and 2 nodes of the NIC fabric. Themis's and
    dlsched's chunk schedules are simulated (dlsched's no slower); ``baseline`` is NCCL's own
    All-to-All (collectives.nccl_alltoall, tests/collectives/test_nccl_alltoall.py), not a
    simulated schedule, so it is not ordered against them."""
    spec = load_spec("mixtral-8x7b")
    cluster = load_cluster("dgx-h100", 64, None)
    layout = Execution(2, 4, 8, 1, 64, sequence_parallel=True, ep=8)
    exposed = {policy: evaluate(Job(spec, cluster), replace(
                   layout, run=RunSettings("bf16", policy, "none"))).exposed["ep_a2a_s"]
               for policy in ("baseline", "themis", "dlsched")}
    assert exposed["dlsched"] <= exposed["themis"]
    assert exposed["baseline"] > 0


def test_policies_order_on_a_3d_topology():
    cluster = load_cluster("3D-FC_Ring_SW", None, None)
    spec = SMALL.replace(experts=64, layers=8)
    layout = Execution(1, 1, cluster.num_gpus, 1, cluster.num_gpus, ep=64)
    exposed = {policy: evaluate(Job(spec, cluster), replace(
                   layout, run=RunSettings("bf16", policy, "none"))).exposed["ep_a2a_s"]
               for policy in ("baseline", "themis", "dlsched")}
    assert exposed["dlsched"] <= exposed["themis"] <= exposed["baseline"]


def test_search_covers_ep_of_moe_models_only():
    choice = Execution.searching(global_batch=8, tp=1, pp=1)
    moe = {layout.ep for layout in layouts(_small_job(), choice, SPACES["dlsched"])}
    dense = Job(SMALL.replace(experts=0), node_cluster("dgx-h100", 8))
    assert moe == {1, 2, 4, 8}
    assert {layout.ep for layout in layouts(dense, choice, SPACES["dlsched"])} == {1}


@pytest.mark.parametrize(("spec", "layout", "field"), [
    (SMALL.replace(experts=0), Execution(1, 1, 8, 1, 8, ep=2), "ep"),
    (SMALL.replace(experts=6), Execution(1, 1, 8, 1, 8, ep=4), "ep"),
    (SMALL, Execution(2, 1, 4, 1, 8, ep=4), "sequence_parallel"),
    (SMALL, Execution(1, 1, 8, 1, 8, zero=3, ep=8), "zero")])
def test_layouts_moe_cannot_run_name_the_field(spec, layout, field):
    with pytest.raises(ConfigError, match=f"^{field}: ") as refused:
        evaluate(Job(spec, node_cluster("dgx-h100", 8)), layout)
    assert refused.value.field == field


def test_exports_carry_the_experts():
    layout = Execution(1, 1, 8, 1, 8, ep=8)
    args = megatron_args(SMALL, layout)
    assert "--num-experts 8 --moe-router-topk 2" in args
    assert "--expert-model-parallel-size 8" in args and "--moe-grouped-gemm" in args
    with pytest.raises(ConfigError, match=r"^model: moe-small is a mixture of experts"):
        torchtitan_toml(SMALL, layout)  # TorchTitan's llama3 is dense


def test_spec_file_with_experts(tmp_path):
    path = tmp_path / "moe.yaml"
    path.write_text("layers: 2\nhidden: 512\nheads: 8\nseq: 256\nvocab: 1000\n"
                    "experts: 4\ntop_k: 1\ncapacity_factor: 1.5\n")
    spec = load_spec(str(path))
    assert (spec.experts, spec.top_k, spec.capacity_factor) == (4, 1, 1.5)
    with pytest.raises(ConfigError, match="top_k"):
        Model("bad", 2, 512, 8, 256, 1000, experts=4, top_k=5)


@pytest.mark.parametrize("freq", [1, 2, 3])
def test_moe_layers_in_counts_every_multiple_of_the_frequency(freq: int) -> None:
    """The closed form of ``moe_layers_in`` equals the per-layer count on every range, and a
    dense model has none."""
    spec = bundled_specs()["mixtral-8x7b"].replace(moe_layer_freq=freq)
    for start in range(10):
        for stop in range(start, 13):
            assert spec.moe_layers_in(start, stop) == sum(spec.is_moe_layer(i)
                                                          for i in range(start, stop))
    assert bundled_specs()["llama3-70b"].moe_layers_in(0, 80) == 0
