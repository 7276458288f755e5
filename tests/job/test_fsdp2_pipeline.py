"""FSDP2 under a pipeline schedule (job.communication.fsdp2_costs ``stage_start`` /
``stage_end``, job.evaluation.replica ``fsdp2_pipeline_ends``): each unit gathered once and
reduce-scattered once per iteration, by hand on a two-layer Llama-style model, against
Megatron-FSDP's per-microbatch ZeRO 3 (sharding ``zero``)."""

from __future__ import annotations

import tomllib

import pytest
from tiny_llama import EMBEDDING, HEAD, LAYER, TINY, Linear

import dlsched.job.evaluation.evaluate as evaluate_module
from dlsched.job.cluster import node_cluster
from dlsched.job.communication.collective_costs import curve
from dlsched.job.communication.fsdp2_costs import Unit, stage_end, stage_start
from dlsched.job.compute.layer_costs import gpu_compute
from dlsched.job.evaluation.evaluate import Job, evaluate
from dlsched.job.evaluation.replica import _stage_units, fsdp2_pipeline_ends, replica_parts
from dlsched.job.execution import Execution
from dlsched.job.exports.writers import megatron_args, torchtitan_toml
from dlsched.job.model_spec import Model
from dlsched.job.run_settings import RunSettings
from dlsched.job.scenario import PlanScenario

FOUR = Model("tiny-llama-4", layers=4, hidden=64, heads=4, seq=16, vocab=256,
             ffn_hidden=128, kv_heads=2, tied_embeddings=False, gated_ffn=True,
             bias=False, rms_norm=True, learned_positions=False)
# 16 tokens through ~100 M parameters a layer: far less compute than its weights take to move
WIDE = Model("wide-llama", layers=2, hidden=2048, heads=16, seq=16, vocab=256,
             ffn_hidden=8192, kv_heads=8, tied_embeddings=False, gated_ffn=True,
             bias=False, rms_norm=True, learned_positions=False)


def test_stage_start_by_hand() -> None:
    """Gathers at 1e6 B/s, copies at 1e9 B/s. The root (65,664 B) and block 0 (73,984 B) wait
    for nothing to hide behind; block 1's gather (0.073984 s) runs during block 0's forward
    (0.05 s): 0.023984 s of it exposed, none with a 0.1 s forward. Every copy-out reads and
    writes its bytes on the compute stream."""
    gather, rate = Linear(1e6), 1e9
    root, block = 2 * 32_832, 2 * LAYER
    copies = 2 * (root + 2 * block) / rate
    units = [Unit(32_832, root, 0.0), Unit(LAYER, block, 0.05), Unit(LAYER, block, 0.05)]
    assert stage_start(units, gather, rate) == pytest.approx(
        (root + block) / 1e6 + (block / 1e6 - 0.05) + copies)
    slow = [units[0], Unit(LAYER, block, 0.1), units[2]]
    assert stage_start(slow, gather, rate) == pytest.approx((root + block) / 1e6 + copies)


def test_stage_end_by_hand() -> None:
    """Reduce-scatters at 2e6 B/s of FP32 gradients, copies at 1e9 B/s: per unit the copy-in
    (read the accumulated FP32 gradient, write the FP32 input: 8 B per parameter) then its
    reduce-scatter (4 B per parameter), one after the other."""
    units = [Unit(32_832, 0.0, 0.0), Unit(LAYER, 0.0, 0.0)]
    params = 32_832 + LAYER
    assert stage_end(units, 4, Linear(2e6), 1e9) == pytest.approx(
        8 * params / 1e9 + 4 * params / 2e6)


def _job() -> Job:
    return Job(TINY, node_cluster("dgx-h100", 8))


def _layout(sharding: str, global_batch: int = 16, **fields: object) -> Execution:
    """PP 2 x DP 4 on one DGX H100, microbatch 1: 4 microbatches per replica at batch 16."""
    base = dict(tp=1, pp=2, dp=4, microbatch_size=1, global_batch=global_batch, zero=3,
                run=RunSettings(sharding=sharding))
    return Execution(**{**base, **fields})


def test_units_and_bytes_per_step() -> None:
    """Each stage's units as TorchTitan wraps them: ``fsdp2`` the stage's root (embedding on
    stage 0, norm and output on stage 1) then its block; ``fsdp2-split`` the embedding, the
    block, then [norm, output]. Bytes per GPU per iteration: every parameter all-gathered once
    in bf16 (2 B) and reduce-scattered once in FP32 (4 B), whatever the microbatches."""
    job = _job()
    for sharding, expected in (("fsdp2", [[EMBEDDING, LAYER], [HEAD, LAYER]]),
                               ("fsdp2-split", [[EMBEDDING, LAYER], [LAYER, HEAD]])):
        layout = _layout(sharding)
        times = replica_parts(job, layout).times
        units = [_stage_units(job, layout, times, s) for s in range(2)]
        assert [[u.params for u in stage] for stage in units] == expected
        assert sum(u.gathered for stage in units for u in stage) == 2 * (
            EMBEDDING + HEAD + 2 * LAYER)


def test_once_per_iteration_not_per_microbatch() -> None:
    """Twice the microbatches: Megatron-FSDP's per-microbatch ZeRO 3 (sharding ``zero``) exposes
    twice the traffic (16 tokens: the gathers and reduce-scatters outlast the layers), FSDP2
    under PP the same once-per-iteration start and reduce-scatters and nothing per microbatch."""
    job = Job(WIDE, node_cluster("dgx-h100", 8))
    zero4, zero8 = (evaluate(job, _layout("zero", batch)) for batch in (16, 32))
    assert zero4.exposed["zero3_s"] > 0
    assert zero8.exposed["zero3_s"] == pytest.approx(2 * zero4.exposed["zero3_s"])
    for sharding in ("fsdp2", "fsdp2-split"):
        ends = []
        for batch in (16, 32):
            layout = _layout(sharding, batch)
            assert evaluate(job, layout).exposed["zero3_s"] == 0.0
            ends.append(fsdp2_pipeline_ends(job, layout, replica_parts(job, layout).times))
        assert ends[0] == ends[1]
        assert ends[0][0] > 0 and min(ends[0][1]) > 0


def test_ends_exposed_after_the_replica(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing hides the ends: each rank's iteration ends its start plus its reduce-scatters
    later than without them (the evaluation with the ends taken out), the fast walk and the
    pipeline simulator alike (1F1B and interleaved, whose ranks hold two stages' units)."""
    for spec, fields in ((TINY, {}), (FOUR, {"chunks": 2, "schedule": "interleaved"})):
        job = Job(spec, node_cluster("dgx-h100", 8))
        layout = _layout("fsdp2", **fields)
        start, bursts = fsdp2_pipeline_ends(job, layout, replica_parts(job, layout).times)
        priced = [evaluate(job, layout, fast) for fast in (True, False)]
        assert priced[0].iteration_s == pytest.approx(priced[1].iteration_s)
        with monkeypatch.context() as patch:
            patch.setattr(evaluate_module, "fsdp2_pipeline_ends",
                          lambda job, layout, times: (0.0, [0.0] * layout.pp))
            bare = evaluate(job, layout)
        rank_ends = [bare.replica.last_backward_end[r] + bare.exposed["optimizer_s"]
                     + start + bursts[r] for r in range(layout.pp)]
        assert priced[0].iteration_s == pytest.approx(max(bare.replica.end, *rank_ends))
        assert priced[0].iteration_s > bare.iteration_s + start


def test_interleaved_rank_reduces_both_stages() -> None:
    """Interleaved, two stages per rank: rank 0 holds stages 0 and 2 and reduce-scatters both
    (the embedding's root and a block; a block), rank 1 stages 1 and 3 (a block; a block and
    the head's root); four layers over four virtual stages."""
    job = Job(FOUR, node_cluster("dgx-h100", 8))
    layout = _layout("fsdp2", chunks=2, schedule="interleaved")
    times = replica_parts(job, layout).times
    _, bursts = fsdp2_pipeline_ends(job, layout, times)
    units = [_stage_units(job, layout, times, s) for s in range(4)]
    assert [[u.params for u in stage] for stage in units] == [
        [EMBEDDING, LAYER], [LAYER], [LAYER], [HEAD, LAYER]]
    run, group = layout.run, layout.group("dp_cp", job.cluster)
    reduce = curve(group, "reduce-scatter", run.collective_policy)
    rate = gpu_compute(job.cluster.gpu, run.precision).gpu.memory_rate
    assert bursts[0] == pytest.approx(stage_end(units[0], 4, reduce, rate)
                                      + stage_end(units[2], 4, reduce, rate))
    assert bursts[1] == pytest.approx(stage_end(units[1], 4, reduce, rate)
                                      + stage_end(units[3], 4, reduce, rate))


@pytest.mark.parametrize("sharding,pp,reshard,noted", [
    ("fsdp2-split", 2, "default", False), ("fsdp2", 2, "default", False),
    ("fsdp2-split", 1, "default", False), ("zero", 1, "always", False),
    ("zero", 2, "always", True)])
def test_torchtitan_export_reshards_as_priced(sharding: str, pp: int, reshard: str,
                                              noted: bool) -> None:
    """The TorchTitan TOML of a ZeRO 3 plan: priced as FSDP2, TorchTitan's ``"default"`` (no
    reshard after forward with PP: one gather per iteration, as priced); priced as
    Megatron-FSDP (``zero``), ``"always"``, with a note under PP that TorchTitan's pipelining
    would reduce-scatter once and hold FP32 unsharded gradients instead."""
    layout = _layout(sharding, pp=pp, dp=8 // pp, global_batch=16)
    text = torchtitan_toml(TINY, layout)
    assert tomllib.loads(text)["parallelism"]["fsdp_reshard_after_forward"] == reshard
    assert ("reduce-scatters once per iteration" in text) == noted


@pytest.mark.parametrize("sharding,noted", [("zero", False), ("fsdp2-split", True)])
def test_megatron_export_notes_a_plan_priced_as_fsdp2(sharding: str, noted: bool) -> None:
    """Megatron-LM's ZeRO 3 is Megatron-FSDP (per-microbatch gathers and reduce-scatters): a
    plan priced as FSDP2 says so in its arguments' comments; one priced as ``zero`` does not."""
    text = megatron_args(TINY, _layout(sharding))
    assert "--data-parallel-sharding-strategy optim_grads_params" in text
    assert ("ZeRO-3 priced as PyTorch's FSDP2" in text) == noted


def test_plan_prices_the_sharding_it_is_given() -> None:
    """``dlsched plan --sharding``: one layout (Llama 3 8B, TP 2 x PP 2 x DP 4) priced as
    Megatron-FSDP and as TorchTitan's FSDP2, its ends in ``dp_s`` only for the latter, and the
    TorchTitan config of each plan resharding as it was priced."""
    fixed = dict(model="llama3-8b", cluster="dgx-h100", gpus=16, tp=2, pp=2, dp=4, cp=1,
                 chunks=1, microbatch_size=1, global_batch=32, zero=3, schedule="1f1b",
                 recompute="full", sequence_parallel=True, baselines=False)
    zero, fsdp = (PlanScenario(**fixed, sharding=sharding).run()
                  for sharding in ("zero", "fsdp2-split"))
    assert zero.rows[0]["exposed_dp_s"] == 0.0 < fsdp.rows[0]["exposed_dp_s"]
    assert fsdp.rows[0]["exposed_zero3_s"] == 0.0
    assert 'fsdp_reshard_after_forward = "default"' in fsdp.torchtitan_toml()
    assert 'fsdp_reshard_after_forward = "always"' in zero.torchtitan_toml()
