"""The embeddings' weight gradients outside the GEMMs (``job.compute.embedding_grads``): the dense
gradient PyTorch's embedding backward creates zeroed on every microbatch, and the tied word
embedding's two gradients summed on a single stage; bytes by hand for vTrain's hidden-2048 GPT
(vocabulary 50,257 padded to 50,304 at TP 1 and 50,432 at TP 2, 1,024 positions), and where
the evaluator adds them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dlsched.experiments import vtrain
from dlsched.job.compute.embedding_grads import embedding_fill_bytes, tied_sum_bytes
from dlsched.job.compute.layer_costs import gpu_compute
from dlsched.job.evaluation import replica
from dlsched.job.evaluation.replica import (
    accumulation_seconds,
    embedding_fill_s,
    replica_parts,
)
from dlsched.job.execution import Execution

ROW = next(r for r in vtrain.load_rows() if r.hidden == 2048 and r.tp == 1 and r.pp == 1)
SPEC = ROW.spec()
RUN = vtrain.RUN  # fp16, gradients accumulated separately (DeepSpeed's fp16 engine)


def test_the_fill_writes_the_padded_shard_and_the_position_table_by_hand() -> None:
    """2 B per element of the 50,304 x 2,048 word table and the 1,024 x 2,048 position table
    at TP 1; at TP 2 the rank's 25,216 rows; 4 B under autocast (FP32 weights)."""
    assert SPEC.vocab == 50304
    assert embedding_fill_bytes(SPEC, 1, "fp16") == 2 * (50304 * 2048 + 1024 * 2048)
    assert embedding_fill_bytes(SPEC, 1, "fp16") == 210_239_488
    assert embedding_fill_bytes(SPEC, 1, "autocast") == 420_478_976
    tp2 = SPEC.model_copy(update={"vocab": 50432})
    assert embedding_fill_bytes(tp2, 2, "fp16") == 2 * (25216 * 2048 + 1024 * 2048)


def test_the_tied_sum_reads_two_gradients_and_writes_one_on_a_single_stage_only() -> None:
    """3 x 2 B per word-table element (the positions are not tied) at PP 1 with separate
    accumulation; nothing on two stages, with the fusion, or with an untied output matrix."""
    one = Execution(1, 1, 2, 2, 16, recompute="full", run=RUN)
    assert tied_sum_bytes(SPEC, one) == 3 * 2 * 50304 * 2048 == 618_135_552
    assert tied_sum_bytes(SPEC, replace(one, pp=2, dp=1)) == 0.0
    assert tied_sum_bytes(SPEC, replace(one, run=replace(RUN, grad_accumulation="fused"))) == 0
    assert tied_sum_bytes(SPEC.model_copy(update={"tied_embeddings": False}), one) == 0.0


def test_the_evaluator_adds_both_at_the_memory_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    """Against the same replica with either pass taken out: the first stage's backward is
    longer by the fill (``embedding_fill_s``) and by the tied sum (in its accumulation), each at
    the GPU's memory rate; with the fusion the accumulation has nothing to add the sum to."""
    job, layout = vtrain.job(ROW), ROW.layout()
    rate = gpu_compute("a100", "fp16").gpu.memory_rate
    both = replica_parts(job, layout)
    assert embedding_fill_s(job, layout) == pytest.approx(210_239_488 / rate)
    monkeypatch.setattr(replica, "embedding_fill_bytes", lambda *args: 0.0)
    no_fill = replica_parts(job, layout)
    monkeypatch.setattr(replica, "tied_sum_bytes", lambda *args: 0.0)
    neither = replica_parts(job, layout)
    assert both.times.backward[0] - no_fill.times.backward[0] == pytest.approx(
        210_239_488 / rate)
    assert no_fill.times.backward[0] - neither.times.backward[0] == pytest.approx(
        618_135_552 / rate)
    fused = replace(layout, run=replace(RUN, grad_accumulation="fused"))
    assert accumulation_seconds(job, fused) == [0.0]
