"""TorchTitan's per-op selective checkpointing (``--recompute selective-op``): which matmuls a
Llama layer keeps and reruns, their FLOP and the stash by hand, the time and memory between the
other modes, and the mode through the search, the exports and the ledger."""

from __future__ import annotations

import tomllib
from dataclasses import replace

import pytest

from dlsched.errors import ConfigError
from dlsched.job.cluster import load_cluster
from dlsched.job.communication.collective_costs import curve
from dlsched.job.compute.layer_costs import decoder_model, gpu_compute
from dlsched.job.compute.op_checkpoint import (
    kept_matmuls,
    recompute_flops_per_token,
    recomputed_matmuls,
    recomputed_ops,
)
from dlsched.job.evaluation.evaluate import Job, _flops, evaluate
from dlsched.job.evaluation.replica import block_costs_of
from dlsched.job.execution import Execution
from dlsched.job.exports.writers import megatron_args, torchtitan_toml
from dlsched.job.memory.per_gpu import layer_activations, peak_memory
from dlsched.job.model_spec import Model, load_spec
from dlsched.job.search import SPACES, layouts
from dlsched.ledger import load_ledger
from dlsched.ledger.predict import job_and_layout
from dlsched.models.ops import matmul

# Llama-shaped: h = 64, 4 heads of 16, 2 KV heads (K, V 32 wide), SwiGLU FFN 160, s = 32.
LLAMA = Model("tiny-llama", layers=4, hidden=64, heads=4, seq=32, vocab=256,
              ffn_hidden=160, kv_heads=2, tied_embeddings=False, gated_ffn=True,
              bias=False, rms_norm=True, learned_positions=False)
RERUN_PER_TOKEN = 2 * (64 * 32 + 64 * 64 + 64 * 160)  # wk + wo + w3: 32,768 FLOP
LLAMA8B = load_spec("llama3-8b")
MODES = ("none", "selective", "selective-op", "full")


def test_every_other_matmul_is_kept_in_torchtitans_call_order():
    """wq wk wv wo w1 w3 w2: the 1st, 3rd, 5th, 7th kept; a GeLU FFN (w1 w2) keeps wq, wv, w1
    and does not rerun w2 (its output feeds no backward: early stop)."""
    assert [m.name for m in kept_matmuls(LLAMA)] == ["wq", "wv", "w1", "w2"]
    assert [m.name for m in recomputed_matmuls(LLAMA)] == ["wk", "wo", "w3"]
    gelu = LLAMA.replace(gated_ffn=False)
    assert [m.name for m in kept_matmuls(gelu)] == ["wq", "wv", "w1"]
    assert [m.name for m in recomputed_matmuls(gelu)] == ["wk", "wo"]
    assert recompute_flops_per_token(LLAMA, "flash") == RERUN_PER_TOKEN
    assert recompute_flops_per_token(LLAMA, "unfused") == RERUN_PER_TOKEN + 4 * 32 * 64
    assert recompute_flops_per_token(gelu, "flash") == 2 * (64 * 32 + 64 * 64)


def _layer_ops(spec: Model, attention: str = "flash") -> tuple:
    model = decoder_model(spec, 1, attention=attention)
    return tuple(op for item in model.layers if item.block == "h.0" for op in item.ops)


def test_recomputed_ops_are_the_unkept_forward_up_to_w2():
    """Norm, wk, the K/V heads' repeat_kv (SDPA's inputs, not saved), (an unfused core), wo,
    the residual feeding the second norm, the norm, w3 and SwiGLU; the fused kernel and the
    kept matmuls are not rerun, nothing after w2 is; the GEMMs' FLOP per sample are wk, wo,
    w3's at s = 32 tokens."""
    flash = recomputed_ops(LLAMA, _layer_ops(LLAMA), 32)
    assert [op.label for op in flash] == ["h.0.ln_1", "wk", "repeat_kv", "wo",
                                          "bias-dropout-add", "h.0.ln_2", "w3", "swiglu"]
    assert [op.shape for op in flash if op.kind == "gemm"] == [
        (32, 32, 64, 0), (32, 64, 64, 0), (32, 160, 64, 0)]
    assert sum(op.flops for op in flash if op.kind == "gemm") == 32 * RERUN_PER_TOKEN
    unfused = recomputed_ops(LLAMA, _layer_ops(LLAMA, "unfused"), 32)
    assert [op.label for op in unfused][2:7] == ["scores", "softmax", "attention-dropout",
                                                 "context", "merge-heads"]


def test_fp8_linears_all_rerun_but_w2():
    """torchao's float8 linears run aten._scaled_mm, neither saved nor counted by the policy:
    QKV (wq, wk, wv), wo and the FFN's input projection (w1, w3) run again with the norms,
    the residual and SwiGLU, as the zoo's fused linears (priced in FP8 by job.compute.fp8);
    the fused attention kernel and w2 do not: 3 x the FLOP of wq..w3, against wk, wo, w3."""
    again = recomputed_ops(LLAMA, _layer_ops(LLAMA), 32, fp8=True)
    assert [op.label for op in again] == ["h.0.ln_1", "h.0.attn.c_attn", "repeat_kv",
                                          "h.0.attn.c_proj", "bias-dropout-add", "h.0.ln_2",
                                          "h.0.mlp.c_fc", "swiglu"]
    every_but_w2 = 2 * 32 * (64 * (64 + 2 * 32) + 64 * 64 + 64 * 2 * 160)
    assert sum(op.flops for op in again if op.kind == "gemm") == every_but_w2
    assert every_but_w2 > 32 * RERUN_PER_TOKEN


def test_stash_by_hand():
    """Microbatch 2 (64 tokens), bf16: the input 64 x 64, wq 64 x 64, wv 64 x 32, w1 64 x 160,
    w2 64 x 64 and the fused kernel's output 64 x 64 = 28,672 elements x 2 B, its log-sum-exp
    64 x 4 heads x 4 B: 58,368 B. TP 2 with SP: the input, the column-parallel outputs and the
    kernel's halved, w2's partial sum whole, the two reduce-scatter outputs added: 20,480 x 2 B
    + 128 x 4 B = 41,472 B. The transient is the rest of the full stash."""
    one = Execution(1, 1, 1, 2, 2, recompute="selective-op")
    kept, transient = layer_activations(LLAMA, one, "bf16", "flash")
    assert kept == 2 * 28_672 + 4 * 256 == 58_368
    none, _ = layer_activations(LLAMA, replace(one, recompute="none"), "bf16", "flash")
    assert transient == none - kept > 0
    two = Execution(2, 1, 1, 2, 2, recompute="selective-op", sequence_parallel=True)
    assert layer_activations(LLAMA, two, "bf16", "flash")[0] == 2 * 20_480 + 4 * 128 == 41_472
    unfused, _ = layer_activations(LLAMA, one, "bf16", "unfused")
    assert unfused == 2 * (28_672 - 4096)  # nothing of the core kept: it is rerun


@pytest.fixture(scope="module")
def fsdp8() -> dict[str, object]:
    """Llama 3 8B on 8 H100s, FSDP, microbatch 2 (TorchTitan's Table 1 layout), each mode."""
    job = Job(LLAMA8B, load_cluster("dgx-h100", 8, None))
    layout = Execution(1, 1, 8, 2, 16, zero=3)
    return {"job": job, **{mode: (replace(layout, recompute=mode),
                                  evaluate(job, replace(layout, recompute=mode)))
                           for mode in MODES}}


def test_time_between_selective_and_full_and_memory_between_none_and_full(fsdp8):
    seconds = [fsdp8[mode][1].iteration_s for mode in ("selective", "selective-op", "full")]
    assert seconds == sorted(seconds) and len(set(seconds)) == 3
    memory = [peak_memory(LLAMA8B, fsdp8[mode][0], "bf16").activations
              for mode in ("none", "selective-op", "full")]
    assert memory[0] > memory[1] > memory[2]
    # per layer, mb 2: 16,384 tokens x (4 h + kv + f = 31,744) x 2 B + 16,384 x 32 x 4 B
    kept, _ = layer_activations(LLAMA8B, fsdp8["selective-op"][0], "bf16")
    assert kept == 16_384 * 31_744 * 2 + 16_384 * 32 * 4
    assert fsdp8["selective-op"][1].memory == peak_memory(
        LLAMA8B, fsdp8["selective-op"][0], fsdp8["selective-op"][0].run.precision).parts()


def test_backward_adds_the_recomputed_ops_gpu_seconds(fsdp8):
    """The backward grows by the hand-listed ops' forward GPU seconds (wk, wo, w3 at their
    shapes; the layer's norms, first residual and SwiGLU), plus at most their launches."""
    job = fsdp8["job"]
    extra = (block_costs_of(job, fsdp8["selective-op"][0]).layer_b
             - block_costs_of(job, fsdp8["none"][0]).layer_b)
    h, kv, f, tokens = 4096, 1024, 14336, 8192
    ops = [op for op in _layer_ops(LLAMA8B) if op.label in (
        "h.0.ln_1", "h.0.ln_2", "swiglu")] + [next(
            op for op in _layer_ops(LLAMA8B) if op.label == "bias-dropout-add")]
    ops += [matmul(name, fan_in, fan_out, tokens, bias=False) for name, fan_in, fan_out in (
        ("wk", h, kv), ("wo", h, h), ("w3", h, f))]
    compute = gpu_compute("h100", "bf16")
    gpu = sum(compute.work(op, 2).gpu_s for op in ops)
    launches = sum(compute.work(op, 2).launches for op in ops)
    assert gpu <= extra <= gpu + launches * compute.gpu.spec.kernel_overhead


def test_hardware_flop_count_the_rerun_matmuls_and_mfu_does_not(fsdp8):
    layout = fsdp8["selective-op"][0]
    flops = _flops(LLAMA8B, layout, "flash")
    per_token = 2 * (4096 * 1024 + 4096 * 4096 + 4096 * 14336)
    assert flops["hardware"] - flops["model"] == 32 * per_token * 16 * 8192
    result = fsdp8["selective-op"][1]
    assert result.hfu / result.mfu == pytest.approx(flops["hardware"] / flops["model"])
    assert _flops(LLAMA8B, fsdp8["none"][0])["model"] == flops["model"]


def test_sequence_parallel_tp_reruns_the_two_gathers():
    job = Job(LLAMA8B, load_cluster("dgx-h100", 8, None))
    op = Execution(2, 1, 4, 1, 4, recompute="selective-op", sequence_parallel=True)
    extra = (block_costs_of(job, op).tp_backward_s
             - block_costs_of(job, replace(op, recompute="none")).tp_backward_s)
    gather = curve(job.cluster.group_topology(1, 2), "all-gather", "baseline")
    assert extra == pytest.approx(2 * gather.seconds(1 * 8192 * 4096 * 2))


@pytest.mark.parametrize("spec,layout,field", [
    (LLAMA.replace(bias=True), Execution(1, 1, 8, 1, 8, recompute="selective-op"), "biases"),
    (load_spec("mixtral-8x7b"), Execution(1, 1, 8, 1, 8, recompute="selective-op"), "MoE"),
    (LLAMA8B.replace(seq=32768), Execution(1, 1, 4, 1, 4, cp=2, recompute="selective-op"),
     "context parallelism")])
def test_outside_the_policy_is_refused(spec, layout, field):
    """By the evaluator and by the memory model alike, naming the field and the reason."""
    job = Job(spec, load_cluster("dgx-h100", 8, None))
    with pytest.raises(ConfigError, match=f"^recompute: selective-op.*{field}") as refused:
        evaluate(job, layout)
    assert refused.value.field == "recompute"
    with pytest.raises(ConfigError, match=f"^recompute: selective-op.*{field}"):
        layer_activations(spec, layout, "bf16")


def test_searched_only_when_given():
    """The searches try Megatron's three modes; a fixed selective-op is tried by dlsched's
    and FSDP's spaces, not by Megatron's."""
    job = Job(LLAMA8B, load_cluster("dgx-h100", 8, None))
    free = Execution.searching(global_batch=16, tp=1, pp=1, microbatch_size=2)
    assert {lay.recompute for lay in layouts(job, free, SPACES["dlsched"])} == {
        "none", "selective", "full"}
    given = replace(free, recompute="selective-op")
    for space, count in (("dlsched", 1), ("fsdp", 1), ("megatron-sp", 0)):
        found = {lay.recompute for lay in layouts(job, given, SPACES[space])}
        assert len(found) == count and found <= {"selective-op"}


def test_exports_torchtitan_op_and_refuses_megatron():
    layout = Execution(1, 1, 8, 2, 16, recompute="selective-op", zero=3)
    text = torchtitan_toml(LLAMA8B, layout)
    assert tomllib.loads(text)["activation_checkpoint"] == {
        "mode": "selective", "selective_ac_option": "op"}
    assert "Korthikanti" not in text  # exactly TorchTitan's policy: no nearest-mode note
    with pytest.raises(ConfigError, match=r"^recompute: selective-op.*none, selective, full"):
        megatron_args(LLAMA8B, layout)


def test_torchtitan_rows_map_onto_the_mode():
    """The row's per-op policy reaches the layout as ``selective-op``, on its own GPU's
    preset (the 500 W HBM2e H100) and on the SXM5's."""
    rows = {row.id: row for row in load_ledger("torchtitan")}
    row = rows["torchtitan-2412-t1-8b-fsdp"]
    sxm = row.model_copy(update={"hardware": row.hardware.model_copy(update={"gpu": "h100-sxm"})})
    for variant, gpu in ((row, "h100-hbm2e-96gb"), (sxm, "h100")):
        job, layout = job_and_layout(variant)
        assert layout.recompute == "selective-op" and layout.run.attention == "flash"
        assert job.cluster.gpu.name == gpu
