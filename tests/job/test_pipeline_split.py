"""Megatron-Core's uneven pipeline split (``job.pipeline_split``): the layers of each virtual
stage by hand, the stage times and memory that follow from them, the simulator against the
fast walk and a hand closed form, the exports, the search and the CLI option."""

from __future__ import annotations

import shlex
import subprocess
import sys
import tomllib
from dataclasses import replace

import pytest

from dlsched.errors import ConfigError
from dlsched.job.cluster import load_cluster
from dlsched.job.evaluation.evaluate import Job, evaluate, pipeline_times
from dlsched.job.evaluation.pipeline_split import feasible_splits, slots_per_stage, stage_layers
from dlsched.job.evaluation.pipeline_time import event_pipeline, fast_pipeline
from dlsched.job.evaluation.replica import embedding_fill_s
from dlsched.job.execution import Execution
from dlsched.job.exports.writers import megatron_args, torchtitan_toml
from dlsched.job.memory.per_gpu import memory_per_gpu, peak_memory, stage_units
from dlsched.job.model_spec import Model, bundled_specs
from dlsched.job.run_settings import RunSettings
from dlsched.job.search import SPACES, search
from dlsched.pipeline.chains.memory_model import CONTEXT_BYTES

SPLIT = "account-embedding-loss"
# Llama 3.1 405B as NeMo's llama31_405b recipe runs it: TP8 CP2 PP8 VP8, 64 microbatches
L405 = Execution(8, 8, 4, 1, 256, chunks=8, schedule="interleaved", sequence_parallel=True,
              zero=1, cp=2, pipeline_split=SPLIT)


def test_405b_over_pp8_vp8_by_hand() -> None:
    """126 + 2 = 128 slots over 64 virtual stages, 2 each: the first holds the embedding and
    layer 0, the last layer 125 and the loss, stage s >= 1 layers 2s - 1 and 2s; ranks 0 and 7
    hold 1 + 7 x 2 = 15 layers, the six others 16."""
    spans = L405.stage_layers(126)
    assert len(spans) == 64 and slots_per_stage(126, 8, 8, SPLIT) == 2
    assert spans[0] == range(0, 1) and spans[-1] == range(125, 126)
    assert all(spans[s] == range(2 * s - 1, 2 * s + 1) for s in range(1, 63))
    assert [L405.rank_layers(126, r) for r in range(8)] == [15, 16, 16, 16, 16, 16, 16, 15]
    assert feasible_splits(126, 8, 8) == (SPLIT,)


@pytest.mark.parametrize(("layers", "pp", "chunks", "split", "counts"), [
    (6, 2, 2, "account-embedding-loss", (1, 2, 2, 1)),  # 8 slots, 2 per stage
    (7, 2, 2, "account-embedding", (1, 2, 2, 2)),
    (7, 2, 2, "account-loss", (2, 2, 2, 1)),
    (8, 2, 2, "even", (2, 2, 2, 2)),
    (3, 4, 1, "account-embedding", (0, 1, 1, 1)),  # the first stage the embedding alone
    (5, 1, 1, "account-embedding-loss", (5,)),  # one stage holds everything
])
def test_small_splits_by_hand(layers: int, pp: int, chunks: int, split: str,
                              counts: tuple[int, ...]) -> None:
    spans = stage_layers(layers, pp, chunks, split)
    assert tuple(len(span) for span in spans) == counts
    assert [i for span in spans for i in span] == list(range(layers))  # in order, each once


def test_feasible_splits_keep_distinct_assignments() -> None:
    """8 layers over 2 stages: the accounted split places them as the even one (4 + 4), so
    only ``even`` is offered; 7 over 4 takes either accounted layer, not both."""
    assert feasible_splits(8, 2, 1) == ("even",)
    assert feasible_splits(7, 2, 2) == ("account-embedding", "account-loss")
    assert feasible_splits(9, 2, 2) == ()


def test_impossible_splits_name_the_field_and_what_works() -> None:
    with pytest.raises(ConfigError, match=r"^pp: 126 layers do not split into PP x chunks "
                                          r"= 64 .*; accepted: --pipeline-split "
                                          r"account-embedding-loss for these degrees"):
        stage_layers(126, 8, 8, "even")
    with pytest.raises(ConfigError, match=r"^pp: 126 layers \+ the embedding .*; accepted: "
                                          r"--pipeline-split account-embedding-loss"):
        stage_layers(126, 8, 8, "account-embedding")
    with pytest.raises(ConfigError, match=r"^pipeline_split: 'uneven' is not accepted; "
                                          r"accepted: even, account-embedding"):
        replace(L405, pipeline_split="uneven")
    with pytest.raises(ConfigError, match=r"^pipeline_split: "):
        Execution.searching(global_batch=64, pipeline_split="first-last")
    job = Job(bundled_specs()["llama3-405b"], load_cluster("dgx-h100", 512, None))
    with pytest.raises(ConfigError, match=r"^pp: 126 layers"):
        evaluate(job, replace(L405, pipeline_split="even"))


GPT = bundled_specs()["gpt-1.7b"]  # 24 layers


FP16 = RunSettings("fp16")


def _job(spec: Model, gpus: int = 8) -> Job:
    return Job(spec, load_cluster("dgx-a100", gpus, None))


def test_stage_time_is_the_sum_of_its_layers() -> None:
    """22 layers + 2 over PP 4 x 3 chunks = 2 per stage, beside the even split of the same
    layer shape with 24 layers (2 per stage): the same block costs, the first and last stage
    one layer's time shorter, the others equal, every stage its layers' count x the layer."""
    uneven = Execution(2, 4, 1, 1, 8, chunks=3, schedule="interleaved", pipeline_split=SPLIT,
                       run=FP16)
    even = replace(uneven, pipeline_split="even")
    times_u, costs_u, _ = pipeline_times(_job(GPT.replace(layers=22)), uneven)
    times_e, costs_e, _ = pipeline_times(_job(GPT), even)
    assert costs_u == costs_e
    for name, layer in (("forward", costs_u.layer_f), ("backward", costs_u.layer_b)):
        got, ref = getattr(times_u, name), getattr(times_e, name)
        assert got[0] == pytest.approx(ref[0] - layer, rel=1e-12)
        assert got[-1] == pytest.approx(ref[-1] - layer, rel=1e-12)
        assert got[1:-1] == ref[1:-1]
        assert got[5] == pytest.approx(2 * layer, rel=1e-12)
    embed = costs_u.embed_f + costs_u.layer_f  # one layer beside the embedding
    assert times_u.forward[0] == pytest.approx(embed, rel=1e-12)


def test_simulator_against_the_closed_form_on_an_uneven_split() -> None:
    """5 layers + the embedding over 2 stages of 1F1B, 2 microbatches: 2 layers and the
    embedding, then 3 layers and the head. Without transfers, stage 1 longer than stage 0's
    forward and backward: F0 on rank 0, F and B on rank 1, rank 1's second F and B right after
    (rank 0's second F ends first), rank 0's last B after them: T = f0 + 2 (f1 + b1) + b0.
    The embedding's backward includes creating its zeroed weight gradients (embedding_fill_s)."""
    layout = Execution(1, 2, 4, 1, 8, pipeline_split="account-embedding", run=FP16)
    job = _job(GPT.replace(layers=5))
    times, costs, _ = pipeline_times(job, layout)
    embed_b = costs.embed_b + embedding_fill_s(job, layout)
    f0, b0 = 2 * costs.layer_f + costs.embed_f, 2 * costs.layer_b + embed_b
    f1, b1 = 3 * costs.layer_f + costs.head_f, 3 * costs.layer_b + costs.head_b
    assert times.forward == pytest.approx((f0, f1)) and times.backward == pytest.approx((b0, b1))
    quiet = replace(times, send=(0.0,))
    closed = f0 + 2 * (f1 + b1) + b0
    assert event_pipeline(quiet).end == pytest.approx(closed, rel=1e-9)
    assert fast_pipeline(quiet).end == pytest.approx(closed, rel=1e-9)


@pytest.mark.parametrize("layout", [
    Execution(2, 4, 1, 1, 8, chunks=3, schedule="interleaved", pipeline_split=SPLIT, run=FP16),
    Execution(2, 4, 1, 1, 8, schedule="1f1b", pipeline_split=SPLIT, run=FP16)])
def test_simulated_evaluation_agrees_with_the_fast_one(layout: Execution) -> None:
    """The evaluator with the pipeline simulator (``fast=False``) within 1% of its fast walk
    on uneven stages, transfers and the DP step included."""
    job = _job(GPT.replace(layers=22 if layout.chunks == 3 else 6))
    fast, simulated = evaluate(job, layout), evaluate(job, layout, fast=False)
    assert simulated.iteration_s == pytest.approx(fast.iteration_s, rel=0.01)
    assert fast.iteration_s >= fast.bound_s


# h = 64, a = 4, s = 32, V = 256, tied (tests/job/test_memory.py's model, its hand numbers)
SMALL = Model("small", layers=6, hidden=64, heads=4, seq=32, vocab=256)
LAYER_TP2 = (12 * 64 * 64 + 13 * 64 - 6 * 64) / 2 + 6 * 64  # 25,184 parameters per TP rank
EMBED_TP2 = 256 * 64 / 2 + 32 * 64  # 10,240
LAYER_STASH = 55_296  # bytes a layer keeps per microbatch (TP 2, no SP, unfused attention)
EMBED_STASH = 2_304


def test_heaviest_stage_is_a_middle_one_by_hand() -> None:
    """6 layers + 2 over PP 4 (1F1B, 4 microbatches): 1, 2, 2, 1 layers. Rank 0 keeps 4
    microbatches of one layer and the embedding, rank 1 3 of two layers: 331,776 B of
    activations against 230,400, and 2 layers' state (18 B per parameter: bf16 weights, FP32
    gradients, Adam) against a layer's and the embedding's: rank 1 is the peak."""
    layout = Execution(2, 4, 4, 1, 16, pipeline_split=SPLIT)
    first, second = (memory_per_gpu(SMALL, layout, "bf16", s, attention="unfused")
                     for s in (0, 1))
    assert sum(stage_units(SMALL, layout, 0)) == LAYER_TP2 + EMBED_TP2
    assert sum(stage_units(SMALL, layout, 1)) == 2 * LAYER_TP2
    assert first.activations == 4 * (LAYER_STASH + EMBED_STASH) == 230_400
    assert second.activations == 3 * 2 * LAYER_STASH == 331_776
    assert second.total == 2 * LAYER_TP2 * 18 + 331_776 + CONTEXT_BYTES
    peak = peak_memory(SMALL, layout, "bf16", attention="unfused")
    assert peak.stage == 1 and peak.total == second.total
    assert peak.total == max(memory_per_gpu(SMALL, layout, "bf16", s, attention="unfused").total
                             for s in range(4))


def _options(text: str) -> dict[str, list[str]]:
    options: dict[str, list[str]] = {}
    for token in shlex.split(text, comments=True):
        if token.startswith("--"):
            options[token], last = [], token
        else:
            options[last].append(token)
    return options


def test_exports_carry_the_split() -> None:
    """Megatron-LM: both accounting flags and 2 layers per virtual stage ((126 + 2) / 8 / 2:
    arguments.py derives VP 8 from it); TorchTitan: 2 layers per stage, one fewer on the first
    and the last (its first/last_stage_less_layers)."""
    spec = bundled_specs()["llama3-405b"]
    options = _options(megatron_args(spec, L405))
    assert options["--num-layers-per-virtual-pipeline-stage"] == ["2"]
    assert options["--account-for-embedding-in-pipeline-split"] == []
    assert options["--account-for-loss-in-pipeline-split"] == []
    even = _options(megatron_args(spec.replace(layers=128), replace(L405, pipeline_split="even")))
    assert "--account-for-embedding-in-pipeline-split" not in even
    titan = tomllib.loads(torchtitan_toml(spec, L405))["parallelism"]
    assert (titan["pipeline_parallel_layers_per_stage"],
            titan["pipeline_parallel_first_stage_less_layers"],
            titan["pipeline_parallel_last_stage_less_layers"]) == (2, 1, 1)


def test_search_takes_the_accounted_split_where_layers_do_not_divide() -> None:
    """GPT 3.6B's 30 layers over PP 8: only 30 + 2 = 32 divides, so dlsched's search plans the
    accounted split; the Megatron-LM baseline (equal stages) has no layout there."""
    spec = bundled_specs()["gpt-3.6b"]
    assert spec.layers == 30
    job = _job(spec, 64)
    choice = Execution.searching(global_batch=64, tp=8, pp=8, microbatch_size=1, schedule="1f1b",
                                 recompute="selective", sequence_parallel=True, run=FP16)
    found = search(job, choice, SPACES["dlsched"])
    assert found.best.layout.pipeline_split == SPLIT
    with pytest.raises(ConfigError, match="no layout"):
        search(job, choice, SPACES["megatron-sp"])


def test_plan_option_reaches_the_megatron_arguments() -> None:
    """``dlsched plan --pipeline-split``: the given layout is priced and its arguments carry
    the accounting flags."""
    done = subprocess.run(
        [sys.executable, "-m", "dlsched", "plan", "--model", "llama3-405b", "--cluster",
         "dgx-h100", "--gpus", "512", "--tp", "8", "--cp", "2", "--pp", "8", "--chunks", "8",
         "--schedule", "interleaved", "--microbatch-size", "1", "--global-batch", "256",
         "--recompute", "none", "--sequence-parallel", "--zero", "1", "--pipeline-split",
         SPLIT, "--megatron-args"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "account-embedding-loss" in done.stdout  # the layout's label
    assert "--account-for-loss-in-pipeline-split" in done.stdout
