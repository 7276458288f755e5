"""Transformer Engine's FP8 under sequence parallelism, by hand: the gathered operand cast on
the GPU's shard and transposed after the gather (``job.compute.fp8``), and the userbuffers
in FP8 beside FP8 GEMMs (``job.communication.tp_overlap``)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from llama3_8b import L8

from dlsched.job.cluster import load_cluster
from dlsched.job.communication.collective_costs import curve
from dlsched.job.communication.tp_overlap import (
    buffer_bytes,
    overlapped_tp,
    ring_reduce_scatter,
)
from dlsched.job.compute.block_pricing import KernelOptions
from dlsched.job.compute.fp8 import amax_reductions, cast_bytes, cast_kernels, operand_elements
from dlsched.job.compute.layer_costs import block_costs, decoder_model, gpu_compute
from dlsched.job.model_spec import bundled_specs
from dlsched.models.pricing import product_seconds


def _ops() -> dict[str, object]:
    return {op.label: op for layer in decoder_model(L8, 1).layers if layer.block == "h.0"
            for op in layer.ops}


@pytest.mark.parametrize(("recipe", "gathered", "kernels"), [
    ("delayed", 3 / 4 + 2, 2),  # local cast (2 + 1) / 4, the gathered copy transposed (1 + 1)
    ("current", 5 / 4 + 2, 3),  # amax (2), cast (2 + 1) on the shard, transpose
    ("mxfp8", (2 + 2 * 33 / 32) / 4, 1),  # both quantizations on the shard, no transpose
])
def test_te_casts_the_gathered_operand_on_its_shard(recipe, gathered, kernels) -> None:
    """FC1 (column-parallel) forward and FC2 (row-parallel) backward at TP 4 with SP: the
    gathered input / output gradient (8,192 x 4,096 elements) costs ``gathered`` bytes per
    element instead of the 4 / 6 / 4.06 of a cast after the gather; the other passes' operands
    (FC1's gradient, FC2's input) and the weight are unchanged; without SP nothing changes."""
    ops, t = _ops(), 4
    fc1, fc2 = ops["h.0.mlp.c_fc"], ops["h.0.mlp.c_proj"]
    after = {"delayed": 4.0, "current": 6.0, "mxfp8": 2 + 2 * 33 / 32}[recipe]
    x, w, _ = operand_elements(fc1, 1, t)
    assert x == 8192 * 4096
    forward = cast_bytes(fc1, 1, t, recipe, False, False, 8, sequence_parallel=True)
    assert forward == pytest.approx(x * gathered + w * after / 8)
    assert cast_bytes(fc1, 1, t, recipe, False, False, 8) == pytest.approx(x * after
                                                                           + w * after / 8)
    _, _, g = operand_elements(fc2, 1, t)
    assert g == 8192 * 4096
    assert cast_bytes(fc2, 1, t, recipe, True, False, sequence_parallel=True) == \
        pytest.approx(g * gathered)
    for op, backward in ((fc1, True), (fc2, False)):  # not gathered: as without SP
        assert cast_bytes(op, 1, t, recipe, backward, False, 8, sequence_parallel=True) == \
            cast_bytes(op, 1, t, recipe, backward, False, 8)
    assert cast_kernels(recipe, True, False, op=fc2, tp=t, sequence_parallel=True) == kernels


def test_torchao_recipes_and_tp_1_are_untouched() -> None:
    """torchao's casts are not Transformer Engine's (rowwise's gathered input only reads its
    amax, which compiled is otherwise fused into its producer: 2 bytes per element; eager
    it is read anyway); at TP 1 nothing is gathered."""
    fc1 = _ops()["h.0.mlp.c_fc"]
    x, _, _ = operand_elements(fc1, 1, 4)
    for recipe, compiled, more in (("tensorwise", True, 0.0), ("rowwise", True, 2.0 * x),
                                   ("rowwise", False, 0.0)):
        assert cast_bytes(fc1, 1, 4, recipe, False, compiled, sequence_parallel=True) == \
            pytest.approx(cast_bytes(fc1, 1, 4, recipe, False, compiled) + more)
    assert cast_bytes(fc1, 1, 1, "current", False, False, 8, sequence_parallel=True) == \
        cast_bytes(fc1, 1, 1, "current", False, False, 8)


def test_userbuffers_in_fp8_where_te_puts_them() -> None:
    """Every all-gather in FP8 (1 byte, MXFP8 with a scale per 32); every reduce-scatter in
    bf16 (Megatron-Bridge's FP8 configurations: fp8_buf off); torchao and bf16: bf16."""
    assert buffer_bytes("all-gather", "current") == buffer_bytes("all-gather", "delayed") == 1.0
    assert buffer_bytes("all-gather", "mxfp8") == pytest.approx(33 / 32)
    assert buffer_bytes("reduce-scatter", "current") == 2.0
    assert buffer_bytes("all-gather", "tensorwise") == buffer_bytes("all-gather", None) == 2.0


def test_ring_exchange_reduce_scatter_by_hand() -> None:
    """A 1 s GEMM at TP 4 on 132 SMs (one kept for the exchange): chunks of 132 / 131 / 4 s.
    Sends of 0.1 s each end within the chunks, so only the 0.05 s reduction and the SM lost
    are exposed; sends of 1 s each are a chain after the first chunk: 1 chunk + 3 s - 1 s."""
    chunk = 132 / 131 / 4
    assert ring_reduce_scatter(0.3, 1.0, 132, 4, 0.05) == pytest.approx(4 * chunk + 0.05 - 1)
    assert ring_reduce_scatter(3.0, 1.0, 132, 4, 0.0) == pytest.approx(chunk + 3.0 - 1)


def _llama_70b_tp4_fp8() -> tuple:
    """Llama 3 70B's decoder at microbatch 1, CP 2 on dgx-h100 in FP8 at TP 4 with SP: the
    model, its compute (and as FP8 GEMMs run), the TP group and the GEMMs by label."""
    cluster = load_cluster("dgx-h100", 64, None)
    compute = gpu_compute(cluster.gpu, "fp8", 4, True)
    model = decoder_model(bundled_specs()["llama3-70b"], 1, 2)
    gemms = {op.label: op for layer in model.layers for op in layer.ops if op.kind == "gemm"}
    return (model, compute, replace(compute, precision="fp8", autocast=False),
            cluster.group_topology(1, 4), gemms)


def test_llama_70b_fp8_forward_reduce_scatters_by_ring_exchange() -> None:
    """Llama 3 70B, TP 4, SP, CP 2, current scaling: the forward's gathers (16 MiB per FP8
    ring step) hide behind their FP8 GEMMs; the projection's and FC2's reduce-scatters (bf16,
    64 MiB) are ring exchanges beside their FP8 GEMMs, each followed by the sum of the four
    partial chunks (80 MiB moved at the memory rate)."""
    model, compute, fp8, group, gemms = _llama_70b_tp4_fp8()
    message = 64 * 2**20
    scatter = curve(group, "reduce-scatter", "baseline").seconds(message)
    gather = curve(group, "all-gather", "baseline").seconds(message / 2)
    assert gather < min(product_seconds(fp8, gemms[label], 1, False)
                        for label in ("h.0.attn.c_attn", "h.0.mlp.c_fc"))
    reduction = message * 1.25 / compute.gpu.memory_rate
    expected = sum(ring_reduce_scatter(scatter, product_seconds(fp8, gemms[label], 1, False),
                                       132, 4, reduction)
                   for label in ("h.0.attn.c_proj", "h.0.mlp.c_proj"))
    forward, _ = overlapped_tp(model, compute, 1, message, group, "baseline",
                               fp8_recipe="current")
    assert forward == pytest.approx(expected)


def test_llama_70b_fp8_backward_by_hand() -> None:
    """Llama 3 70B, TP 4, SP, CP 2 (a 64 MiB bf16 activation), current scaling: the two bulk
    all-gathers carry 32 MiB of FP8 and are exposed in full (each FP8 GEMM half beside them is
    longer); each bulk reduce-scatter (64 MiB, bf16) is exposed up to its FP8 weight-gradient
    GEMM half (a persistent GEMM's second wave); the two ring exchanges hide behind their FP8
    data-gradient GEMM halves."""
    model, compute, fp8, group, gemms = _llama_70b_tp4_fp8()
    message = 64 * 2**20
    gather = curve(group, "all-gather", "baseline").seconds(message / 2)
    scatter = curve(group, "reduce-scatter", "baseline").seconds(message)
    half = {label: product_seconds(fp8, gemms[label], 1, True) / 2
            for label in ("h.0.attn.c_attn", "h.0.mlp.c_fc", "h.0.attn.c_proj",
                          "h.0.mlp.c_proj")}
    assert min(half.values()) > gather
    expected = 2 * gather + sum(max(scatter, g + min(scatter, g)) - g
                                for g in (half["h.0.attn.c_attn"], half["h.0.mlp.c_fc"]))
    _, backward = overlapped_tp(model, compute, 1, message, group, "baseline",
                                fp8_recipe="current")
    assert backward == pytest.approx(expected)
    _, bf16 = overlapped_tp(model, compute, 1, message, group, "baseline")
    assert backward < bf16


def test_current_scaling_reduces_the_gathered_amax_over_tp_blocking() -> None:
    """Current scaling under SP all-reduces one FP32 amax per gathered operand over the TP
    group (QKV's and FC1's inputs forward, the projection's and FC2's output gradients
    backward): the layer's TP time is delayed scaling's + 2 small all-reduces each way; none
    without SP, at TP 1 or for other recipes."""
    assert amax_reductions("current", 4, True) == (2, 2)
    assert amax_reductions("current", 4, False) == amax_reductions("current", 1, True) == (0, 0)
    assert amax_reductions("delayed", 4, True) == amax_reductions("mxfp8", 4, True) == (0, 0)
    llama = bundled_specs()["llama3-70b"]
    cluster = load_cluster("dgx-h100", 64, None)
    group = cluster.group_topology(1, 4)
    args = (llama, 1, cluster.gpu, "fp8", 4, True, "none", group, "baseline", 2, "ring",
            "fused", True)
    delayed = block_costs(*args, KernelOptions(fp8_recipe="delayed"))
    current = block_costs(*args, KernelOptions(fp8_recipe="current"))
    amax = curve(group, "all-reduce", "baseline").seconds(4)
    assert current.tp_forward_s == pytest.approx(delayed.tp_forward_s + 2 * amax)
    assert current.tp_backward_s == pytest.approx(delayed.tp_backward_s + 2 * amax)
