"""One layer as a ZeRO 3 / FSDP unit per GPU (job.memory.sharded_units), by hand on small
models, and the evaluator's ZeRO 3 traffic and the memory model reading the same bytes."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tiny_llama import LAYER, LINEAR, TINY

from dlsched.job.communication.collective_costs import curve
from dlsched.job.evaluation.replica import _zero3_exposed, block_costs_of
from dlsched.job.execution import Execution
from dlsched.job.memory.per_gpu import memory_per_gpu
from dlsched.job.memory.sharded_units import (
    fp8_weights_per_gpu,
    gathered_weight_bytes,
    layer_parameters_per_gpu,
    layer_unit,
)
from dlsched.job.memory.torch_runtime import Runtime
from dlsched.job.model_spec import Model
from dlsched.ledger import load_ledger
from dlsched.ledger.predict import job_and_layout

# h 64, 4 heads (no GQA: QKV width 192), plain FFN of 128, biases, LayerNorm: wq/wk/wv 64 x 192
# (12,288) + wo 64 x 64 (4,096) + w1, w2 2 x 64 x 128 (16,384) = 32,768 weights; biases QKV 192
# + wo 64 + w1 128 + w2 64 = 448; two LayerNorms 2 x (64 + 64) = 256: 33,472 parameters.
GPT = Model("tiny-gpt", layers=2, hidden=64, heads=4, seq=16, vocab=256, ffn_hidden=128,
            gated_ffn=False, bias=True, rms_norm=False, learned_positions=False)
# TINY's layer with its FFN an MoE: router 64 x 4 (256, whole on every TP rank), one shared
# expert of width 32 (3 x 64 x 32 = 6,144); the routed experts are EP's, not the unit's.
MOE = Model("tiny-moe", layers=2, hidden=64, heads=4, seq=16, vocab=256, ffn_hidden=128,
            kv_heads=2, gated_ffn=True, bias=False, rms_norm=True, learned_positions=False,
            experts=4, top_k=2, expert_ffn_hidden=32, shared_experts=1)


def test_tp_splits_the_linears_and_keeps_the_norms_whole() -> None:
    """TINY at TP 2: 36,864 / 2 + 128 = 18,560 parameters per GPU (the norms whole; half the
    layer, 18,496, would split them); GPT at TP 2: its weights and column-parallel biases
    (QKV 192, w1 128) halved, (32,768 + 320) / 2 = 16,544, plus the row-parallel biases
    (wo 64, w2 64) and the norms (256) whole: 16,928."""
    assert layer_parameters_per_gpu(TINY, 1) == LAYER
    assert layer_parameters_per_gpu(TINY, 2) == 18_560
    assert GPT.layer_parameters() == 33_472
    assert layer_parameters_per_gpu(GPT, 2) == 16_928
    assert fp8_weights_per_gpu(TINY, 2) == LINEAR / 2
    assert fp8_weights_per_gpu(GPT, 2) == 16_384


def test_bytes_gathered_and_reduced_by_hand() -> None:
    """TINY at TP 2: bf16 2 x 18,560 = 37,120 B; the float8 all-gather its 18,432 linear
    weights in 1 byte, its 128 norm weights in 2: 18,688 B (not 18,496, every parameter at 1
    byte with the norms split); under Megatron's ZeRO 3 autocast's FP32 weights 4 x 18,560,
under FSDP2 its 16-bit ``param_dtype`` 2 x 18,560; the reduce-scatter every
    gradient in ``grad_bytes`` whatever the gather: 4 x 18,560 = 74,240 B. GPT at TP 2 under
    float8: 16,384 + 2 x (320 / 2 + 128 + 256) = 17,472 B (biases and norms 16-bit)."""
    bf16 = layer_unit(TINY, 2, "bf16", "zero", False, 4)
    fp8 = layer_unit(TINY, 2, "fp8", "fsdp2", True, 4)
    assert (bf16.params, bf16.gathered, bf16.reduced) == (18_560, 37_120, 74_240)
    assert (fp8.params, fp8.gathered, fp8.reduced) == (18_560, 18_688, 74_240)
    assert layer_unit(TINY, 2, "autocast", "zero", False, 4).gathered == 74_240
    assert layer_unit(TINY, 2, "autocast", "fsdp2", False, 4).gathered == 37_120
    assert layer_unit(TINY, 1, "fp8", "zero", True, 2).gathered == LINEAR + 2 * 128
    assert layer_unit(TINY, 1, "fp8", "zero", True, 2).reduced == 2 * LAYER
    assert layer_unit(GPT, 2, "fp8", "fsdp2-split", True, 4).gathered == 17_472
    with pytest.raises(ValueError,
                       match="precision: 'int8'; accepted: bf16, fp16, autocast, fp8, fp32"):
        gathered_weight_bytes("int8")
    with pytest.raises(ValueError, match="sharding: 'fsdp1'; accepted: zero, fsdp2, fsdp2-split"):
        gathered_weight_bytes("bf16", "fsdp1")
    with pytest.raises(ValueError, match="tp: 0; accepted: a positive integer"):
        layer_unit(TINY, 0, "bf16", "zero", False, 4)


def test_an_moe_unit_keeps_its_router_whole_and_16_bit() -> None:
    """MOE at TP 2: attention 12,288 / 2 + shared expert 6,144 / 2 + norms 128 + router 256 =
    9,600 parameters; under float8 the 9,216 linear weights in 1 byte, norms and router in 2:
    9,216 + 2 x 384 = 9,984 B."""
    unit = layer_unit(MOE, 2, "fp8", "zero", True, 4, moe=True)
    assert unit.params == 9_600
    assert unit.gathered == 9_216 + 2 * 384
    assert unit.reduced == 4 * 9_600


def test_memory_holds_the_same_gathered_block() -> None:
    """FSDP2 at TP 2 x DP 2 with the float8 all-gather keeps the root unsharded in bf16
    (embedding 256 x 64 / 2 = 8,192, final norm 64 + output 8,192) and the last block as
    ``layer_unit`` gathers it: 2 x (8,192 + 8,256) + 18,688 B."""
    layout = Execution(tp=2, pp=1, dp=2, microbatch_size=2, global_batch=8,
                       recompute="selective-op", zero=3)
    memory = memory_per_gpu(TINY, layout, "fp8", runtime=Runtime("fsdp2", fp8_all_gather=True))
    assert memory.gathered == 2 * (8_192 + 8_256) + 18_688


def test_zero3_traffic_is_the_units() -> None:
    """Llama 3.1 70B at TP 8 with the float8 all-gather (torchtitan-2412-t4-70b-2d) as
    Megatron-FSDP's per-layer ZeRO 3 (sharding ``zero``: no FSDP2 copies), its compute set to
    zero so nothing hides: exposed forward = all-gather of 855,638,016 / 8 = 106,954,752 linear
    weights in 1 byte plus 16,384 norm weights in 2 (106,987,520 B), backward that plus the
    reduce-scatter of the 106,971,136 parameters' gradients."""
    row = next(r for r in load_ledger() if r.id == "torchtitan-2412-t4-70b-2d")
    job, layout = job_and_layout(row)
    layout = replace(layout, run=replace(layout.run, sharding="zero"))
    run = layout.run
    unit = layer_unit(job.spec, 8, run.precision, "zero", True, run.grad_bytes)
    assert (unit.params, unit.gathered) == (106_971_136, 106_987_520)
    costs = replace(block_costs_of(job, layout), layer_f=0.0, layer_b=0.0)
    group = layout.group("dp_cp", job.cluster)
    gather = curve(group, "all-gather", run.collective_policy).seconds(unit.gathered)
    scatter = curve(group, "reduce-scatter", run.collective_policy).seconds(unit.reduced)
    assert _zero3_exposed(job, layout, costs) == pytest.approx((gather, gather + scatter))
