"""Memory per GPU of a job plan: ZeRO stages by hand, Korthikanti et al.'s activation formulas,
the interleaved schedule's stash against an event walk, and the ZeRO paper's Fig. 1."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dlsched.errors import ConfigError
from dlsched.job.execution import Execution
from dlsched.job.memory.parameters import padded_vocab
from dlsched.job.memory.per_gpu import (
    chunk_stash,
    in_flight_peak,
    layer_activations,
    memory_per_gpu,
    model_state_bytes,
    peak_memory,
    stage_units,
    state_bytes,
)
from dlsched.job.model_spec import Model, bundled_specs
from dlsched.pipeline.chains.memory_model import CONTEXT_BYTES

# h = 64, a = 4, s = 32, V = 256 (a multiple of 128 x TP 2: no padding), FFN 4h, tied.
SMALL = Model("small", layers=8, hidden=64, heads=4, seq=32, vocab=256)
LAYER = 12 * 64 * 64 + 13 * 64  # 49,984 parameters per layer
LAYER_TP2 = (LAYER - 6 * 64) / 2 + 6 * 64  # 25,184: the row biases and norms (6h) replicated
EMBED_TP2 = 256 * 64 / 2 + 32 * 64  # 10,240: vocabulary-parallel words, replicated positions
HEAD_TP2 = 2 * 64 + 256 * 64 / 2  # 8,320: final norm + the tied embedding's last-stage copy
STAGE0 = 4 * LAYER_TP2 + EMBED_TP2  # 110,976 parameters on the first of 2 stages


def small_layout(**fields) -> Execution:
    base = dict(tp=2, pp=2, dp=4, microbatch_size=1, global_batch=8)  # 2 microbatches
    return Execution(**{**base, **fields})


def test_stage_parameters_by_hand():
    layout = small_layout()
    assert LAYER_TP2 == 25_184 and STAGE0 == 110_976
    assert sum(stage_units(SMALL, layout, 0)) == STAGE0
    assert sum(stage_units(SMALL, layout, 1)) == 4 * LAYER_TP2 + HEAD_TP2
    untied = SMALL.replace(tied_embeddings=False)
    one_stage = small_layout(pp=1)
    assert sum(stage_units(SMALL, one_stage, 0)) == 8 * LAYER_TP2 + EMBED_TP2 + 2 * 64
    assert sum(stage_units(untied, one_stage, 0)) == 8 * LAYER_TP2 + EMBED_TP2 + HEAD_TP2


@pytest.mark.parametrize("tp,pp", [(1, 1), (2, 2), (1, 4), (2, 8)])  # V = 256: no padding
def test_parameters_conserved_over_tp_and_pp(tp, pp):
    """Summed over the stages and the TP ranks: every parameter once, the replicated ones
    (norms, row biases, positions) on each TP rank (untied: no copy of the embedding)."""
    spec = SMALL.replace(tied_embeddings=False)
    layout = small_layout(tp=tp, pp=pp)
    held = sum(sum(stage_units(spec, layout, s)) for s in range(pp)) * tp
    replicated = 6 * 64 * 8 + 32 * 64 + 2 * 64
    assert held == pytest.approx(spec.parameters() + (tp - 1) * replicated)


def test_each_zero_stage_by_hand():
    """bf16 with Megatron's FP32 gradients (2 + 4 + 12 B), DP 4, stage 0 of 2 (110,976
    parameters; the largest unit a layer of 25,184)."""
    parts = {z: memory_per_gpu(SMALL, small_layout(zero=z), "bf16", 0) for z in range(4)}
    p, unit = 110_976, 25_184
    assert (parts[0].weights, parts[0].gradients, parts[0].optimizer) == (
        2 * p, 4 * p, 12 * p)  # 221,952 + 443,904 + 1,331,712 B
    assert (parts[1].weights, parts[1].gradients, parts[1].optimizer) == (
        2 * p, 4 * p, 12 * p / 4)  # Megatron's distributed optimizer: 6 + 12/dp B
    assert (parts[2].weights, parts[2].gradients, parts[2].optimizer) == (
        2 * p, 4 * p / 4, 12 * p / 4)
    assert (parts[3].weights, parts[3].gradients, parts[3].optimizer) == (
        2 * p / 4, 4 * p / 4, 12 * p / 4)
    assert parts[0].workspace == parts[1].workspace == 0  # no recomputation, not the last stage
    assert parts[2].workspace == 4 * unit  # one layer's FP32 gradient before reduce-scatter
    assert parts[3].workspace == 4 * unit + 2 * 2 * unit  # + two layers' gathered bf16 weights
    totals = [parts[z].total for z in range(4)]
    assert totals[0] - totals[1] == 12 * p * 3 / 4  # 998,784 B
    assert totals[1] - totals[2] == 4 * p * 3 / 4 - 4 * unit  # 232,192 B
    assert totals[2] - totals[3] == 2 * p * 3 / 4 - 4 * unit  # 65,728 B
    assert totals[0] > totals[1] > totals[2] > totals[3]


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp32"])
def test_zero_changes_nothing_over_one_replica(precision):
    totals = {memory_per_gpu(SMALL, small_layout(dp=1, zero=z), precision).total
              for z in range(4)}
    assert len(totals) == 1


def test_state_bytes_follow_megatron_and_zero():
    assert state_bytes("bf16", 0, 8).total == 18  # Megatron's estimator without distopt
    assert state_bytes("bf16", 1, 8).total == 6 + 12 / 8  # ... with the distributed optimizer
    assert state_bytes("fp16", 0, 1, grad_bytes=2).total == 16  # ZeRO paper: 2 + 2 + 12
    assert state_bytes("fp32", 0, 1).total == 16  # 4 + 4 + 8, no master copy
    assert state_bytes("autocast", 3, 4).total == 16 / 4
    # Adam on the fp16 weights, no FP32 master copy (vTrain's runs): 2 + 2 + 8
    assert state_bytes("fp16", 0, 1, grad_bytes=2, master_weights=False).total == 12
    assert state_bytes("bf16", 1, 4, master_weights=False).optimizer == 8 / 4


def test_no_master_weights_frees_four_bytes_per_parameter_held():
    """The stage's optimizer part without FP32 master weights is 8 / 12 of it with them (Adam's
    two FP32 moments without the 4-byte master copy), every other part unchanged."""
    layout = Execution(2, 2, 2, 1, 4, zero=1)
    with_master = memory_per_gpu(SMALL, layout, "bf16")
    run = replace(layout.run, master_weights=False)
    without = memory_per_gpu(SMALL, replace(layout, run=run), "bf16")
    assert without.optimizer == pytest.approx(with_master.optimizer * 8 / 12)
    assert without.weights == with_master.weights
    assert without.activations == with_master.activations


def test_zero_paper_figure_1():
    """Rajbhandari et al. (SC 2020), Fig. 1: Psi = 7.5B, K = 12, N_d = 64, 16-bit weights and
    gradients: 120 GB -> 31.4 GB (P_os) -> 16.6 GB (P_os+g) -> 1.9 GB (P_os+g+p)."""
    psi, nd = 7.5e9, 64
    exact = [model_state_bytes(psi, z, nd) for z in range(4)]
    assert exact == [120e9, 31.40625e9, 16.640625e9, 1.875e9]
    assert [round(b / 1e9, 1) for b in exact] == [120.0, 31.4, 16.6, 1.9]
    assert [psi * state_bytes("bf16", z, nd, grad_bytes=2).total for z in range(4)] == exact


def korthikanti(mode: str, sp: bool, t: int) -> float:
    """Korthikanti et al. Table 2 for GPT-3 175B's shape, b = 1 (bytes per layer)."""
    s, b, h, a = 2048, 1, 12288, 96
    sbh, attn = s * b * h, 5 * a * s / h
    if mode == "full":
        return 2 * sbh / (t if sp else 1)
    scores = attn / t if mode == "none" else 0.0
    return sbh * (34 / t + scores) if sp else sbh * (10 + 24 / t + scores)


@pytest.mark.parametrize("mode", ["none", "selective", "full"])
@pytest.mark.parametrize("sp,t", [(False, 1), (False, 8), (True, 8), (True, 2)])
def test_korthikanti_table_2(mode, sp, t):
    spec = bundled_specs()["gpt3-175b"]
    layout = Execution(t, 1, 1, 1, 1, recompute=mode, sequence_parallel=sp)
    kept, transient = layer_activations(spec, layout, "bf16", "unfused")
    assert kept == pytest.approx(korthikanti(mode, sp, t), rel=1e-12)
    full = korthikanti("none", sp, t)
    assert transient == pytest.approx(full - kept, rel=1e-12)  # what one layer recomputes


def test_gqa_and_ffn_width_replace_4h_and_h():
    """K and V at kv_heads x head_dim wide, the GeLU and second-linear inputs at ffn_hidden
    wide: p s b (2 (f - 4h) + 2 (kv d - h)) bytes fewer/more than the MHA/4h formula."""
    base = Model("mha", 2, 64, 8, 32, 256)
    gqa = base.replace(kv_heads=2, ffn_hidden=192)
    layout = Execution(2, 1, 1, 1, 1)
    delta = 2 * 32 * (2 * (192 - 256) + 2 * (2 * 8 - 64)) / 2
    assert (layer_activations(gqa, layout, "bf16")[0]
            - layer_activations(base, layout, "bf16")[0]) == delta


def test_megatron_estimator_layer_formula():
    """Megatron-LM's theoretical_memory_usage.py (selective recomputation with SP): a layer
    keeps s b h (18 + 4 f / h) / t bytes; 34 at f = 4h, and the FFN width enters as here."""
    spec = bundled_specs()["gpt3-175b"].replace(ffn_hidden=3 * 12288)
    layout = Execution(8, 1, 1, 2, 2, recompute="selective", sequence_parallel=True)
    sbh = 2048 * 2 * 12288
    assert layer_activations(spec, layout, "bf16", "unfused")[0] == sbh * (18 + 4 * 3) / 8


def test_autocast_keeps_a_16_bit_weight_copy_per_microbatch():
    """torch.autocast saves each linear's 16-bit weight for its backward: 2 B per layer
    parameter per microbatch in flight (2 on stage 0), none kept under full recomputation."""
    layout = small_layout()
    bf16, autocast = (memory_per_gpu(SMALL, layout, p, 0) for p in ("bf16", "autocast"))
    assert autocast.activations - bf16.activations == 2 * 4 * LAYER_TP2 * 2
    assert (autocast.weights, autocast.gradients, autocast.optimizer) == (
        4 * STAGE0, 4 * STAGE0, 8 * STAGE0)  # FP32 weights and gradients, Adam, no master
    full = small_layout(recompute="full")
    kept = [memory_per_gpu(SMALL, full, p, 0) for p in ("bf16", "autocast")]
    assert kept[0].activations == kept[1].activations
    assert kept[1].workspace - kept[0].workspace == 2 * LAYER_TP2  # the recomputed layer's


def test_small_stash_by_hand():
    """TP 2 without SP, s b h = 2,048, 5 a s / h = 10: a layer keeps 2,048 (10 + 12 + 5) =
    55,296 B; the embedding 8 s b + s b h = 2,304 B; the head 2 p s b h = 8,192 B and FP32
    logits 4 s b V / t = 16,384 B. 1F1B: stage 0 holds 2 microbatches, stage 1 one."""
    layout = small_layout()
    first, last = (memory_per_gpu(SMALL, layout, "bf16", s, attention="unfused") for s in (0, 1))
    assert first.activations == 2 * (4 * 55_296 + 2_304) and first.logits == 0
    assert last.activations == 4 * 55_296 + 8_192 and last.logits == 16_384
    assert last.workspace == 2 * 32 * 256 / 2  # the bf16 logits beside their FP32 copy
    assert first.in_flight == (2,) and last.in_flight == (1,)
    assert first.reserve == CONTEXT_BYTES
    assert peak_memory(SMALL, layout, "bf16", attention="unfused") == max(
        first, last, key=lambda b: b.total)


@pytest.mark.parametrize("mode", ["none", "selective", "full"])
def test_flash_attention_keeps_no_scores(mode):
    """A fused attention kernel writes no scores: GPT-3 175B's layer (TP 8 with SP) keeps
    Korthikanti's selective 34 s b h / t plus the FP32 log-sum-exp, 4 a s b / t bytes, whether
    or not the core is recomputed; full recomputation keeps the layer input alone."""
    spec = bundled_specs()["gpt3-175b"]
    layout = Execution(8, 1, 1, 1, 1, recompute=mode, sequence_parallel=True)
    kept, transient = layer_activations(spec, layout, "bf16", "flash")
    s, h, a = 2048, 12288, 96
    stash = (34 * s * h + 4 * a * s) / 8
    assert kept == (2 * s * h / 8 if mode == "full" else stash)
    assert transient == (stash - kept)


def test_pipeline_stash_per_schedule():
    """Korthikanti et al. Sec. 4.2.3: 1F1B's first stage holds L layers' worth (pp microbatches
    of L/pp layers), interleaving multiplies it by 1 + (pp - 1)/(pp v); GPipe holds all m."""
    spec = bundled_specs()["gpt3-175b"]
    base = Execution(8, 8, 1, 1, 64, recompute="selective", sequence_parallel=True)
    layer = layer_activations(spec, base, "fp16")[0]
    embedding = 8 * 2048 + 2048 * 12288 / 8  # token ids whole, dropout mask split by SP

    def first_stage(**fields):
        return memory_per_gpu(spec, replace(base, **fields), "fp16", 0).activations

    assert first_stage() == pytest.approx(96 * layer + 8 * embedding)
    assert first_stage(schedule="zb-h1") == first_stage()
    assert first_stage(schedule="gpipe") == pytest.approx(64 * 12 * layer + 64 * embedding)
    interleaved = first_stage(schedule="interleaved", chunks=3)
    layers = 96 * (1 + 7 / (8 * 3))  # 124 layers' worth
    # at the peak chunk 0 holds 2 pp = 16 microbatches, each with its embedding stash
    assert interleaved == pytest.approx(layers * layer + 16 * embedding)


def walk_interleaved(m: int, v: int, pp: int, stage: int, sizes: list[float]) -> float:
    """Event walk of Megatron-LM's interleaved 1F1B on one rank: the forward order by groups
    of pp microbatches per chunk, warm-up 2 (pp - stage - 1) + (v - 1) pp, then one forward and
    one backward; the backward of step k is of chunk v - 1 - (chunk of forward k)."""
    table = []
    for first in range(0, m, pp):
        group = range(first, min(first + pp, m)) if first + pp < m else range(first, m)
        table += [(mb, chunk) for chunk in range(v) for mb in group]
    warmup = min(2 * (pp - stage - 1) + (v - 1) * pp, m * v)
    held: set[tuple[int, int]] = set()
    peak = 0.0
    backwards = iter([(mb, v - 1 - chunk) for mb, chunk in table])
    for k, item in enumerate(table):
        held.add(item)
        peak = max(peak, sum(sizes[c] for _, c in held))
        if k >= warmup:
            held.remove(next(backwards))
    return peak


@pytest.mark.parametrize("m,v,pp", [(8, 2, 4), (12, 3, 4), (4, 2, 4), (16, 4, 2), (6, 2, 3)])
def test_interleaved_peak_matches_event_walk(m, v, pp):
    spec = Model("walk", layers=pp * v * 2, hidden=64, heads=4, seq=32, vocab=256)
    layout = Execution(1, pp, 1, 1, m, chunks=v, schedule="interleaved")
    for stage in range(pp):
        sizes = [a + b for a, b in chunk_stash(spec, layout, "bf16", stage)]
        acts, logits, held = in_flight_peak(layout, stage, chunk_stash(spec, layout, "bf16",
                                                                       stage))
        assert acts + logits == pytest.approx(walk_interleaved(m, v, pp, stage, sizes))
        assert sum(held) == min(2 * (pp - stage - 1) + (v - 1) * pp + 1, m * v)


@pytest.mark.parametrize("fields", [
    dict(), dict(schedule="gpipe"), dict(schedule="zb-h1", zero=3),
    dict(schedule="interleaved", chunks=2, recompute="full", sequence_parallel=True),
    dict(pp=4, global_batch=16, recompute="selective", zero=2),
    dict(pp=8, global_batch=4, tp=1)])
def test_peak_is_the_worst_of_every_stage(fields):
    spec = SMALL.replace(layers=16, tied_embeddings=False)
    layout = small_layout(**fields)
    every = [memory_per_gpu(spec, layout, "bf16", s) for s in range(layout.pp)]
    assert peak_memory(spec, layout, "bf16").total == max(b.total for b in every)


def test_one_stage_holds_one_microbatch_but_gpipe_holds_all():
    one_f_one_b = memory_per_gpu(SMALL, small_layout(pp=1), "bf16")
    gpipe = memory_per_gpu(SMALL, small_layout(pp=1, schedule="gpipe"), "bf16")
    assert one_f_one_b.in_flight == (1,) and gpipe.in_flight == (2,)
    assert gpipe.activations == 2 * one_f_one_b.activations


def test_fits_leaves_the_reserve_and_fragmentation():
    breakdown = memory_per_gpu(SMALL, small_layout(), "bf16")
    model = breakdown.total - CONTEXT_BYTES
    exact = CONTEXT_BYTES + model / (1 - 0.15)  # the capacity that leaves exactly `model`
    assert breakdown.fits(exact * (1 + 1e-9)) and not breakdown.fits(exact * (1 - 1e-9))
    assert breakdown.fits(CONTEXT_BYTES + model, fragmentation=0.0)


def test_vocabulary_padding_follows_megatron():
    assert padded_vocab(50257, 1) == 50304 and padded_vocab(50257, 8) == 51200
    assert padded_vocab(51200, 8) == 51200


@pytest.mark.parametrize("call,field", [
    (lambda: memory_per_gpu(SMALL, small_layout(), "int8"), "precision"),
    (lambda: memory_per_gpu(SMALL, small_layout(), "bf16", grad_bytes=3), "grad_bytes"),
    (lambda: memory_per_gpu(SMALL, small_layout(pp=3, global_batch=8), "bf16"), "pp"),
    (lambda: memory_per_gpu(SMALL, small_layout(), "bf16", stage=2), "stage")])
def test_bad_input_names_the_field(call, field):
    with pytest.raises(ConfigError, match=f"^{field}: .*; accepted: "):
        call()


@pytest.mark.parametrize("name", sorted(bundled_specs()))
def test_one_gpu_holds_the_specs_parameters_and_tp_splits_only_the_split_ones(name: str):
    """At TP 1 and PP 1 the memory model's per-GPU count (which the DP step and the gradient
    accumulation share, ``job.memory.parameters.stage_parameters``) is the spec's own
    parameter count plus the vocabulary's padding; over TP 4 the four ranks together hold it
    plus three more copies of what every rank keeps whole: the norms, the row-parallel biases,
    the learned positions, Qwen3's per-head query/key norms."""
    from dlsched.job.compute.mla import replicated_parameters
    from dlsched.job.memory.parameters import padded_vocab, stage_parameters

    spec = bundled_specs()[name]
    h, copies = spec.hidden, 1 if spec.tied_embeddings else 2
    one = Execution(1, 1, 1, 1, 1)
    padding = (padded_vocab(spec.vocab, 1) - spec.vocab) * h * copies
    mtp = spec.mtp_parameters()  # on the last stage (job.compute.mtp)
    assert memory_per_gpu(spec, one, "bf16").parameters == spec.parameters() + mtp + padding
    assert sum(stage_parameters(spec, one, experts=True)) == pytest.approx(
        spec.parameters() + mtp + padding, rel=1e-12)
    four = Execution(4, 1, 1, 1, 1)
    whole = (spec.layers * (2 * spec.norm_parameters() + (2 * h if spec.bias else 0)
                            + (2 * spec.head_dim if spec.qk_norm else 0))  # qk-norms whole
             + spec.norm_parameters() + (spec.seq * h if spec.learned_positions else 0))
    # MLA's down projections and latent norms are kept whole too (job.compute.mla), as are the
    # MTP modules' layer's and their three norms (job.compute.mtp)
    mla = replicated_parameters(spec)
    mtp_whole = spec.mtp_layers * (2 * spec.norm_parameters() + mla + 3 * spec.norm_parameters())
    whole += spec.layers * mla + mtp_whole
    split = (spec.parameters() + mtp + (padded_vocab(spec.vocab, 4) - spec.vocab) * h * copies
             - whole)
    if spec.experts:
        routers = (spec.moe_layers + spec.mtp_layers) * spec.router_parameters()
        split -= routers  # the router is kept whole too
        whole += routers
    assert 4 * memory_per_gpu(spec, four, "bf16").parameters == pytest.approx(
        split + 4 * whole, rel=1e-12)
