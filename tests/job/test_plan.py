"""``dlsched plan`` and the job evaluator: one row per layout, searched plans no slower than a
given layout, collective policies ordered, and refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from dlsched.collectives import run_collective
from dlsched.errors import ConfigError
from dlsched.job.cluster import load_cluster
from dlsched.job.communication.collective_costs import curve
from dlsched.job.evaluation.evaluate import Job, evaluate
from dlsched.job.execution import Execution
from dlsched.job.model_spec import bundled_specs
from dlsched.job.run_settings import RunSettings
from dlsched.job.search import SPACES, search


def _plan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dlsched", "plan", *args],
                          capture_output=True, text=True, timeout=120)


def test_a_given_layout_prints_one_row_with_its_parts() -> None:
    """Korthikanti et al.'s 175B configuration written as options: one row; its memory parts
    add up to the total, its time is at least its bound, and the MFU note rides along."""
    done = _plan("--model", "gpt3-175b", "--cluster", "dgx-a100", "--gpus", "64", "--tp", "8",
                 "--pp", "8", "--chunks", "3", "--schedule", "interleaved",
                 "--microbatch-size", "1", "--global-batch", "64", "--recompute", "selective",
                 "--sequence-parallel", "--zero", "0", "--precision", "fp16", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    (row,) = out["rows"]
    assert (row["tp"], row["pp"], row["dp"], row["chunks"]) == (8, 8, 1, 3)
    parts = sum(value for key, value in row.items()
                if key.startswith("memory_") and key.endswith("_gib") and key != "memory_gib")
    assert parts == pytest.approx(row["memory_gib"])
    assert row["iteration_s"] >= row["bound_s"]
    assert set(row["notes"]) <= set(out["notes"])  # the report adds its own (the envelope)


def test_searched_plan_is_no_slower_than_a_given_layout() -> None:
    """dlsched's search on 64 GPUs beats or equals Megatron-style TP8 x PP1 x DP8 and every
    baseline's best, all priced by the same evaluator."""
    spec = bundled_specs()["gpt-18.4b"]
    job = Job(spec, load_cluster("dgx-a100", 64, None))
    run = RunSettings("fp16", "baseline", "ddp")
    choice = Execution.searching(global_batch=256, run=run)
    ours = search(job, choice, SPACES["dlsched"]).best
    given = evaluate(job, Execution(8, 1, 8, 4, 256, recompute="full", run=run))
    assert ours.iteration_s <= given.iteration_s
    for name in ("megatron", "megatron-sp", "megatron-core", "fsdp"):
        assert ours.iteration_s <= search(job, choice, SPACES[name]).best.iteration_s * 1.0001


def test_megatron_core_practice_is_at_least_korthikantis() -> None:
    """Megatron-Core's space holds every layout of Korthikanti et al.'s (selective or full
    recomputation, SP, ZeRO 1, even stages) and reduces the gradients in buckets beside the
    backward, which never lengthens an iteration: its best is at least as fast, and it runs
    DDP's buckets whatever the job's policy."""
    spec = bundled_specs()["gpt-18.4b"]
    job = Job(spec, load_cluster("dgx-a100", 64, None))
    choice = Execution.searching(global_batch=256, run=RunSettings("bf16"))
    core = search(job, choice, SPACES["megatron-core"]).best
    assert core.layout.run.dp_policy == "ddp" and core.layout.zero == 1
    sp = search(job, choice, SPACES["megatron-sp"]).best
    assert core.iteration_s <= sp.iteration_s * 1.0001
    same = evaluate(job, sp.layout.with_run(dp_policy="ddp"))
    assert same.iteration_s <= sp.iteration_s * 1.0001


def test_zero_stages_lower_memory_and_keep_the_layout_valid() -> None:
    """On 64 GPUs with DP 8, ZeRO 1, 2, 3 each need less memory per GPU than the stage
    before."""
    spec = bundled_specs()["gpt-18.4b"]
    job = Job(spec, load_cluster("dgx-a100", 64, None))
    memory = [evaluate(job, Execution(8, 1, 8, 4, 256, zero=z, run=RunSettings("bf16"))
                       ).memory_bytes for z in range(4)]
    assert memory[0] > memory[1] > memory[2] > memory[3]


def test_one_dimension_curves_equal_direct_simulation() -> None:
    """On one dimension the curve through two simulated sizes is the simulator's time at any
    other size (0.3 GB, between them, and 5 GB, beyond). (The Themis policy: on a node
    preset's cluster the baseline is NCCL's model, tests/job/test_nccl_costs.py.)"""
    group = load_cluster("dgx-a100", 64, None).group_topology(8, 8)
    line = curve(group, "all-reduce", "themis")
    for size in (3 * 10**8, 5 * 10**9):
        direct = run_collective(group, "all-reduce", size, 1, "themis", "scf").time_s
        assert line.seconds(size) == pytest.approx(direct, rel=1e-9)


def test_collective_policies_order_the_exposed_data_parallel_time() -> None:
    """On 3D-FC_Ring_SW with a DP group across its ring and switch dimensions, dlsched's
    collectives leave at most Themis's exposed DP time, and Themis at most the baseline's."""
    spec = bundled_specs()["gpt-1.7b"]
    cluster = load_cluster("3D-FC_Ring_SW", None, None)
    layout = Execution(8, 1, 128, 1, 512, recompute="full")
    exposed = {policy: evaluate(Job(spec, cluster), replace(
                   layout, run=RunSettings("fp16", policy))).exposed["dp_s"]
               for policy in ("baseline", "themis", "dlsched")}
    assert exposed["dlsched"] <= exposed["themis"] * (1 + 1e-9)
    assert exposed["themis"] <= exposed["baseline"] * (1 + 1e-9)


@pytest.mark.parametrize(("args", "field"), [
    (["--tp", "3", "--pp", "1", "--microbatch-size", "1", "--schedule", "1f1b",
      "--recompute", "full", "--no-sequence-parallel", "--zero", "0"], "--tp"),
    (["--schedule", "round-robin"], "--schedule"),
    (["--collective-policy", "nccl"], "collective-policy"),
    (["--cluster", "no-such-cluster"], "--cluster"),
])
def test_bad_input_exits_2_with_one_line(args: list[str], field: str) -> None:
    """Refusals name the field."""
    done = _plan("--gpus", "64", "--global-batch", "64", *args)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert field in done.stderr


def test_a_layout_on_more_gpus_than_the_cluster_is_refused() -> None:
    """TP x PP x DP must equal the cluster's GPUs."""
    job = Job(bundled_specs()["gpt-1.7b"], load_cluster("dgx-a100", 32, None))
    with pytest.raises(ConfigError, match="differs from the cluster"):
        evaluate(job, Execution(8, 1, 8, 1, 64))


def test_llama3_shapes_count_their_model_cards_parameters() -> None:
    """Grouped-query attention, SwiGLU, RMSNorm, no biases, untied output: Llama 3 8B and 70B
    have 8,030,261,248 and 70,553,706,496 parameters (their model cards' 8.03B and 70.6B), in
    the spec and in the zoo decoder it prices."""
    from dlsched.job.compute.layer_costs import decoder_model

    specs = bundled_specs()
    for name, count in (("llama3-8b", 8_030_261_248), ("llama3-70b", 70_553_706_496)):
        spec = specs[name]
        assert spec.parameters() == count
        model = decoder_model(spec, spec.layers)
        assert sum(layer.params for layer in model.layers) == count


def test_a_gated_ffn_costs_a_third_more_ffn_flop() -> None:
    """Model FLOP per token of a layer, by hand: 2 x (h q + h^2 + 3 h f) + 4 s h with SwiGLU,
    2 x (h q + h^2 + 2 h f) + 4 s h without (one layer, h 64, f 256, 4 heads, 2 KV heads, s 16,
    q = 64 + 2 x 2 x 16 = 128), plus 6 V h for the logits (V 100)."""
    from dlsched.job.model_spec import Model

    plain = Model("t", 1, 64, 4, 16, 100, ffn_hidden=256, kv_heads=2)
    gated = Model("t", 1, 64, 4, 16, 100, ffn_hidden=256, kv_heads=2,
                  gated_ffn=True)
    logits = 6 * 100 * 64
    assert plain.model_flops_per_token() == 3 * (2 * (64 * 128 + 64**2 + 2 * 64 * 256)
                                                 + 4 * 16 * 64) + logits
    assert gated.model_flops_per_token() == 3 * (2 * (64 * 128 + 64**2 + 3 * 64 * 256)
                                                 + 4 * 16 * 64) + logits
