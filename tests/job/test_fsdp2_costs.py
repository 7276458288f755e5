"""FSDP2's exposed first all-gathers and last reduce-scatters (job.communication.fsdp2_costs),
by hand on one small Llama-style model and through the evaluator on Llama 3.1 8B."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tiny_llama import LAYER, TINY, Linear

from dlsched.job.communication.collective_costs import curve
from dlsched.job.communication.fsdp2_costs import (
    copy_seconds,
    first_unit_parameters,
    fsdp2_ends,
)
from dlsched.job.compute.layer_costs import gpu_compute
from dlsched.job.evaluation.evaluate import Job, dp_group, evaluate
from dlsched.job.evaluation.replica import block_costs_of, fsdp2_pipeline_ends, replica_parts
from dlsched.job.execution import Execution
from dlsched.job.memory.sharded_units import layer_unit
from dlsched.job.model_spec import Model
from dlsched.job.run_settings import RunSettings
from dlsched.ledger import load_ledger
from dlsched.ledger.predict import job_and_layout


def test_first_unit_is_the_root_or_the_embedding() -> None:
    """fsdp2: embedding + final norm + output = 16,384 + 64 + 16,384; fsdp2-split: the
    embedding alone; TP 2 halves the two matrices, not the norm; a tied model has no output."""
    assert first_unit_parameters(TINY, 1, "fsdp2") == 32_832
    assert first_unit_parameters(TINY, 1, "fsdp2-split") == 16_384
    assert first_unit_parameters(TINY, 2, "fsdp2") == 16_448
    tied = Model("tiny-tied", layers=2, hidden=64, heads=4, seq=16, vocab=256,
                 ffn_hidden=128, kv_heads=2, tied_embeddings=True, gated_ffn=True,
                 bias=False, rms_norm=True, learned_positions=False)
    assert first_unit_parameters(tied, 1, "fsdp2") == 16_448
    with pytest.raises(ValueError, match="sharding: 'zero' is not FSDP2's; accepted: fsdp2"):
        first_unit_parameters(TINY, 1, "zero")


def test_copies_by_hand() -> None:
    """At 1e6 B/s: the copy-out reads and writes the gathered bytes each way (2 x 73,984 B),
    the backward adds the copy-in of the bf16 gradient into FP32 (2 + 4 B per parameter)."""
    forward, backward = copy_seconds(2 * LAYER, LAYER, 4, 1e6)
    assert forward == pytest.approx(4 * LAYER / 1e6)
    assert backward == pytest.approx((4 * LAYER + 6 * LAYER) / 1e6)


def test_ends_by_hand() -> None:
    """Gathers at 1e6 B/s, reduce-scatters at 2e6 B/s, memory at 1e9 B/s. Start: the root in
    bf16 (2 x 32,832 B), its copy-out (read and write 65,664 B), then block 0 (2 x 36,992 B;
    with the float8 all-gather its linears 1 B: 36,864 + 2 x 128). End: block 0's FP32
    gradients (4 x 36,992 B at 2e6 B/s = 73,984 us) overlap the embedding's backward and the
    root's copy-in (6 x 32,832 B at 1e9 B/s = 197 us), then the root's (65,664 us)."""
    gather, reduce, rate = Linear(1e6), Linear(2e6), 1e9
    root_copy, root_in = 2 * 2 * 32_832 / rate, 6 * 32_832 / rate
    block, fp8 = layer_unit(TINY, 1, "bf16", "fsdp2", False, 4), layer_unit(TINY, 1, "fp8",
                                                                         "fsdp2", True, 4)
    start, end = fsdp2_ends(TINY, 1, "fsdp2", block, 4, gather, reduce, 0.0, rate)
    assert start == pytest.approx((2 * 32_832 + 2 * LAYER) / 1e6 + root_copy)
    assert end == pytest.approx((4 * LAYER + 4 * 32_832) / 2e6)
    fp8_start, _ = fsdp2_ends(TINY, 1, "fsdp2", fp8, 4, gather, reduce, 0.0, rate)
    assert fp8_start == pytest.approx((2 * 32_832 + 36_864 + 2 * 128) / 1e6 + root_copy)
    # an embedding backward of 0.05 s hides 0.05 s of block 0's 0.073984 s
    _, hidden = fsdp2_ends(TINY, 1, "fsdp2", block, 4, gather, reduce, 0.05, rate)
    assert hidden == pytest.approx(end - 0.05)
    # one longer than block 0's reduce-scatter hides all of it, and the root's copy-in follows
    _, longer = fsdp2_ends(TINY, 1, "fsdp2", block, 4, gather, reduce, 0.1, rate)
    assert longer == pytest.approx(root_in + 4 * 32_832 / 2e6)
    split_start, split_end = fsdp2_ends(TINY, 1, "fsdp2-split", block, 4, gather, reduce,
                                        0.0, rate)
    assert split_start == pytest.approx((2 * 16_384 + 2 * LAYER) / 1e6 + 4 * 16_384 / rate)
    assert split_end == pytest.approx((4 * LAYER + 4 * 16_384) / 2e6)


def _t3_job() -> tuple[Job, Execution]:
    row = next(r for r in load_ledger() if r.id == "torchtitan-2412-t3-8b-fsdp")
    return job_and_layout(row)


def test_evaluator_adds_the_ends_and_copies_to_fsdp2_only() -> None:
    """Llama 3.1 8B FSDP over 128 GPUs (16 nodes), one microbatch: the iteration under
    TorchTitan's FSDP2 is ZeRO 3's plus the two ends priced on the FSDP group's own curves (as
    ``dp_s``) plus each of the 32 layers' copies forward and backward."""
    job, layout = _t3_job()
    assert layout.run.sharding == "fsdp2" and layout.num_microbatches == 1
    zero = evaluate(job, replace(layout, run=replace(layout.run, sharding="zero")))
    fsdp = evaluate(job, layout)
    group, run = dp_group(job, layout), layout.run
    rate = gpu_compute(job.cluster.gpu, run.precision).gpu.memory_rate
    block = layer_unit(job.spec, 1, run.precision, "fsdp2", False, run.grad_bytes)
    start, end = fsdp2_ends(job.spec, 1, "fsdp2", block, run.grad_bytes,
                            curve(group, "all-gather", run.collective_policy),
                            curve(group, "reduce-scatter", run.collective_policy),
                            block_costs_of(job, layout).embed_b, rate)
    copy_f, copy_b = copy_seconds(block.gathered, block.params, run.grad_bytes, rate)
    assert start > 0 and end > 0 and copy_b > copy_f > 0
    assert fsdp.exposed["dp_s"] - zero.exposed["dp_s"] == pytest.approx(start + end)
    assert fsdp.iteration_s - zero.iteration_s == pytest.approx(
        start + end + job.spec.layers * (copy_f + copy_b))
    # the root's 1.05 G parameters dominate the ends: 2.1 GB gathered, 4.2 GB reduced in FP32
    assert first_unit_parameters(job.spec, 1, "fsdp2") == 2 * 128_256 * 4096 + 4096


def test_pipeline_stages_have_their_own_ends() -> None:
    """With PP the ends above are not priced: FSDP2's once-per-iteration start and each rank's
    reduce-scatters are (``replica.fsdp2_pipeline_ends``, tests/job/test_fsdp2_pipeline.py),
    as ``dp_s``, and nothing per microbatch (PP 2 x DP 64)."""
    job, layout = _t3_job()
    staged = replace(layout, pp=2, dp=64, global_batch=256)
    fsdp = evaluate(job, staged)
    start, bursts = fsdp2_pipeline_ends(job, staged, replica_parts(job, staged).times)
    assert fsdp.exposed["zero3_s"] == 0.0
    assert fsdp.exposed["dp_s"] in (pytest.approx(start + bursts[0]),
                                    pytest.approx(start + bursts[1]))
    assert RunSettings().sharding == "zero"  # ZeRO 3 elsewhere keeps its pricing
