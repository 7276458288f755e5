"""FP8 MoE layers (``job.compute.moe_fp8``): the experts' grouped GEMMs in FP8 with their casts
counted by hand, the 16-bit path unchanged, and the recipes refused with their reason."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dlsched.errors import ConfigError
from dlsched.job.cluster import load_cluster
from dlsched.job.communication.collective_costs import curve
from dlsched.job.compute.block_pricing import KernelOptions
from dlsched.job.compute.expert_launches import (
    EXPERT_GEMM_LAUNCH_S,
    expert_launch_ops,
    routed_seconds,
)
from dlsched.job.compute.fp8 import _tensor, _weight
from dlsched.job.compute.layer_costs import gpu_compute
from dlsched.job.compute.moe_costs import moe_layer_costs, routed_ops
from dlsched.job.compute.moe_fp8 import (
    QUANTIZE_KERNELS,
    expert_fp8_parts,
    expert_fp8_work,
    expert_operands,
    layer_seconds,
    split_casts,
)
from dlsched.job.evaluation.evaluate import Job, check_run, evaluate
from dlsched.job.execution import Execution
from dlsched.job.model_spec import Model
from dlsched.job.run_settings import RunSettings
from dlsched.models.layer import Layer
from dlsched.models.pricing import product_seconds

# Qwen3-30B-A3B's shape (Qwen/Qwen3-30B-A3B config.json: 48 layers, hidden 2048, 32 heads of 128,
# 4 KV heads, 128 experts of 768, top 8, vocabulary 151,936).
Q30 = Model("qwen3-30b-a3b", 48, 2048, 32, 4096, 151936, ffn_hidden=6144, kv_heads=4,
            tied_embeddings=False, gated_ffn=True, bias=False, rms_norm=True,
            learned_positions=False, experts=128, top_k=8, expert_ffn_hidden=768,
            head_dim=128, qk_norm=True)


def _fc1(microbatch: int = 1):
    """fc1 of the experts on one GPU of EP 8: 4096 b tokens x top 8 over 16 local experts."""
    _, experts, _ = routed_ops(Q30, microbatch, 1, 8)
    return next(op for op in experts if op.label == "expert-fc1")


def test_expert_operands_by_hand() -> None:
    """EP 8, one sequence of 4,096 tokens: 32,768 routed copies over 16 local experts, 2,048
    each; fc1 (gate and up, 2 x 768 = 1,536 wide, K 2,048): X 16 x 2048 x 2048, W 16 x 1536 x
    2048, G 16 x 2048 x 1536."""
    op = _fc1()
    assert op.shape == (2048, 1536, 2048, 16)
    assert expert_operands(op) == (16 * 2048 * 2048, 16 * 1536 * 2048, 16 * 2048 * 1536)


def test_mxfp8_expert_gemm_is_its_fp8_product_plus_its_casts() -> None:
    """Forward: the FP8 product plus X at 2 + 2 x 33/32 bytes and W at the same, cast once over
    8 microbatches; backward: the product's backward plus G's cast. At b200's memory rate."""
    op = _fc1()
    fp8 = replace(gpu_compute("b200", "fp8"), precision="fp8", autocast=False)
    mx = 2 + 2 * 33 / 32
    x, w, g = 16 * 2048 * 2048, 16 * 1536 * 2048, 16 * 2048 * 1536
    forward = expert_fp8_work(op, fp8, "mxfp8", False, 8)
    assert forward.gpu_s == pytest.approx(product_seconds(fp8, op, 1.0, False)
                                          + (x * mx + w * mx / 8) / fp8.gpu.memory_rate)
    backward = expert_fp8_work(op, fp8, "mxfp8", True, 8)
    assert backward.gpu_s == pytest.approx(product_seconds(fp8, op, 1.0, True)
                                           + g * mx / fp8.gpu.memory_rate)
    bf16 = gpu_compute("b200", "bf16")
    assert forward.gpu_s < bf16.work(op, 1.0).gpu_s  # FP8 at twice the dense rate, casts cheap


def test_sixteen_bit_layers_price_as_before() -> None:
    """Without an FP8 recipe a layer costs what CalibratedCompute.forward_time says."""
    compute = gpu_compute("b200", "bf16")
    _, experts, _ = routed_ops(Q30, 1, 1, 8)
    layer = Layer("moe.experts", 0, ops=experts)
    for options in (None, KernelOptions()):
        assert layer_seconds(layer, 1, compute, options, False) == \
            compute.forward_time(layer, 1)
        assert layer_seconds(layer, 1, compute, options, True) == \
            compute.backward_time(layer, 1)


def _job(precision: str, recipe: str | None, microbatch: int = 4) -> tuple[Job, Execution]:
    """The B200 MoE job and its EP 8 layout, checked as ``evaluate`` checks them first."""
    job = Job(Q30, load_cluster("dgx-b200", 8, "b200"))
    run = RunSettings(precision, "baseline", "ddp", "fused", overlap_param_gather=True,
                      grad_reduce="bf16", fp8_recipe=recipe)
    check_run(job, run)
    return job, Execution(1, 1, 8, microbatch, 256, 1, "1f1b", "none", False, 1, 1, 8, run=run)


def test_fp8_moe_run_is_faster_than_bf16_and_slower_than_its_compute_halved() -> None:
    """Microbatches of 8: MXFP8 on the experts and the attention's linears is faster than
    BF16, by less than 2x (the All-to-Alls, the attention core, the casts stay). At 4 the
    eager layer is host-bound on B200 and the casts' per-expert launches (16 local experts, one
    kernel per expert and operand) cost the host about what FP8 saves on the GPU: no faster."""
    bf16 = evaluate(*_job("bf16", None, 8)).iteration_s
    mx = evaluate(*_job("fp8", "mxfp8", 8)).iteration_s
    assert bf16 / 2 < mx < bf16
    at_four = evaluate(*_job("fp8", "mxfp8")).iteration_s
    assert at_four > evaluate(*_job("bf16", None)).iteration_s * 0.99


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_torchao_recipes_refused_for_moe_experts(recipe: str) -> None:
    with pytest.raises(ConfigError, match=r"^fp8_recipe: MoE experts run FP8 as Transformer "
                                          r"Engine's grouped GEMMs.*accepted: delayed, current, "
                                          r"mxfp8"):
        _job("fp8", recipe)


def test_split_quantize_launches_one_kernel_per_expert_three_under_current_scaling() -> None:
    """Transformer Engine v2.12's split_quantize: delayed scaling one fused kernel for the
    group; MXFP8 one per expert; current scaling amax, scale and cast per expert. fc1 of 16
    experts: forward the routed tokens' casts plus the 16 weights' over 8 microbatches
    (16 x 3 + 16 x 3 / 8 = 54 under current scaling), backward the output gradient's (48)."""
    op = _fc1()
    fp8 = replace(gpu_compute("h100", "fp8"), precision="fp8", autocast=False)
    assert split_casts("delayed", 16) == 1 and split_casts("mxfp8", 16) == 16
    assert split_casts("current", 16) == 48
    casts, products = expert_fp8_parts(op, fp8, "current", False, 8)
    assert casts.launches == pytest.approx(54) and products.launches == op.kernels
    casts, products = expert_fp8_parts(op, fp8, "current", True, 8)
    assert casts.launches == 48 and products.launches == op.launches_backward
    with pytest.raises(ValueError, match=r"^recipe: one of delayed, current, mxfp8"):
        split_casts("tensorwise", 16)


def test_host_bound_casts_cost_their_launches_at_the_c_plus_plus_rate() -> None:
    """One expert op alone, B200, microbatch 1, MXFP8: the timeline from an idle host runs the
    casts' 16 + 16 / 8 = 18 launches at backward_overhead (23.81 us) before the GEMM loop's 16
    at 33.4 us; each expert's product is shorter than its launch, so the host sets the pace:
    the op takes 18 x 23.81 + 16 x 33.4 us and the last product (a few us)."""
    (op,) = expert_launch_ops((_fc1(),), 16)
    layer = Layer("moe.experts", 0, ops=(op,))
    compute = gpu_compute("b200", "fp8")
    options = KernelOptions(fp8_recipe="mxfp8", microbatches=8)
    seconds = routed_seconds(layer, compute, options, False)
    host = 18 * 23.81e-6 + 16 * EXPERT_GEMM_LAUNCH_S
    assert host <= seconds < host + 2e-5  # the last expert's product after its launch


def test_dense_and_expert_quantizers_launch_the_same_kernels() -> None:
    """One tensor's quantization launches as many kernels in a dense TE linear
    (job.compute.fp8) as in one expert's split (QUANTIZE_KERNELS): current scaling 3 (amax,
    scale, cast), MXFP8 and delayed scaling 1."""
    for recipe in ("delayed", "current", "mxfp8"):
        assert _tensor(recipe, False).kernels == QUANTIZE_KERNELS[recipe]
        assert _weight(recipe, 1).kernels == QUANTIZE_KERNELS[recipe]


def test_current_scaling_amax_all_reduces_of_the_attention_under_sp() -> None:
    """Qwen3-30B-A3B at TP 2 with SP, EP 8, on an H100 node: current scaling adds one blocking
    all-reduce of one FP32 amax over the TP group to the layer's forward (QKV's gathered input)
    and one to its backward (the projection's gathered output gradient); delayed scaling and
    TP 1 none. Nothing else of the layer differs between the two recipes' TP exchanges."""
    cluster = load_cluster("dgx-h100", 16, None)
    tp_group = cluster.group_topology(1, 2)
    ep_group = cluster.group_topology(2, 8)
    amax = curve(tp_group, "all-reduce", "baseline").seconds(4)
    assert amax > 0
    layout = Execution(2, 1, 8, 1, 64, ep=8, sequence_parallel=True, expert_tp=1)
    costs = {recipe: moe_layer_costs(Q30, layout, "h100", "fp8", tp_group, ep_group,
                                     "baseline", "fused",
                                     kernels=KernelOptions(fp8_recipe=recipe, microbatches=8))
             for recipe in ("delayed", "current")}
    assert costs["current"].tp_forward_s - costs["delayed"].tp_forward_s == pytest.approx(amax)
    assert costs["current"].tp_backward_s - costs["delayed"].tp_backward_s == \
        pytest.approx(amax)
    one = Execution(1, 1, 8, 1, 64, ep=8)
    plain = {recipe: moe_layer_costs(Q30, one, "h100", "fp8", None, ep_group, "baseline",
                                     "fused",
                                     kernels=KernelOptions(fp8_recipe=recipe, microbatches=8))
             for recipe in ("delayed", "current")}
    assert plain["current"].tp_forward_s == plain["delayed"].tp_forward_s == 0.0
