"""Megatron-Core's block recomputation (``block:N``, ``job.compute.block_recompute``): the first
N layers of each model chunk recomputed in full, the rest kept."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import pytest

from dlsched.errors import ConfigError
from dlsched.job.cluster import node_cluster
from dlsched.job.compute.block_recompute import block_layers, recomputed_layers
from dlsched.job.evaluation.evaluate import Job, _flops, evaluate, layout_memory, pipeline_times
from dlsched.job.execution import Execution
from dlsched.job.exports.writers import megatron_args, torchtitan_toml
from dlsched.job.model_spec import load_spec
from dlsched.job.scenario import PlanScenario
from dlsched.job.search import SPACES, search

# GPT 7.5B (36 layers) on 16 A100s, PP 4: 9 layers per stage, one chunk each (1F1B).
JOB = Job(load_spec("gpt-7.5b"), node_cluster("dgx-a100", 16))
LAYOUT = Execution(tp=4, pp=4, dp=1, microbatch_size=1, global_batch=16, recompute="none",
                   sequence_parallel=True, zero=0)


def _at(recompute: str) -> Execution:
    return replace(LAYOUT, recompute=recompute)


def test_the_setting_is_parsed_and_refused_with_its_field() -> None:
    assert block_layers("block:3") == 3
    assert block_layers("full") is None and block_layers("modules:core_attn") is None
    for bad in ("block:0", "block:x", "block:"):
        with pytest.raises(ConfigError, match="recompute"):
            Execution(recompute=bad)
    assert Execution(recompute="block:2").recompute == "block:2"


def test_the_first_n_layers_of_a_chunk_are_recomputed() -> None:
    span = range(10, 18)
    assert recomputed_layers("block:3", span) == (range(10, 13), range(13, 18))
    assert recomputed_layers("block:20", span) == (span, range(18, 18))
    assert recomputed_layers("full", span) == (span, range(18, 18))
    assert recomputed_layers("none", span) == (range(10, 10), span)


def test_each_stage_pays_n_layers_reruns() -> None:
    """A dense model's layers cost alike, so a stage's backward under ``block:N`` is its
    backward without recomputation plus N / 9 of what recomputing all 9 layers adds; the
    forward does not change."""
    none, full = pipeline_times(JOB, _at("none"))[0], pipeline_times(JOB, _at("full"))[0]
    for n in (1, 4, 8):
        block = pipeline_times(JOB, _at(f"block:{n}"))[0]
        for stage in range(4):
            assert block.forward[stage] == pytest.approx(none.forward[stage], rel=1e-12)
            rerun = full.backward[stage] - none.backward[stage]
            assert rerun > 0
            assert block.backward[stage] == pytest.approx(
                none.backward[stage] + n / 9 * rerun, rel=1e-9)


def test_a_whole_chunk_is_full_recomputation() -> None:
    full = evaluate(JOB, _at("full"))
    for n in (9, 12):
        block = evaluate(JOB, _at(f"block:{n}"))
        assert block.iteration_s == pytest.approx(full.iteration_s, rel=1e-12)
        assert block.memory_bytes == pytest.approx(full.memory_bytes, rel=1e-12)
        assert block.hfu == pytest.approx(full.hfu, rel=1e-12)


def test_memory_falls_one_layer_at_a_time() -> None:
    """Each layer recomputed keeps its input instead of its activations: the same saving per
    layer (1F1B's in-flight microbatches times one layer's difference)."""
    acts = [layout_memory(JOB, _at(f"block:{n}")).activations for n in range(1, 10)]
    steps = [a - b for a, b in pairwise(acts)]
    assert all(step > 0 for step in steps)
    assert max(steps) == pytest.approx(min(steps), rel=1e-9)
    assert acts[-1] == pytest.approx(layout_memory(JOB, _at("full")).activations, rel=1e-12)
    assert layout_memory(JOB, _at("none")).activations > acts[0]


def test_executed_flop_count_the_recomputed_layers_forward() -> None:
    """Hardware FLOP = model FLOP + each recomputed layer's forward once more: 4 stages x 3
    layers of GPT 7.5B (its matmuls 2 x 12 h^2 and its attention core per token)."""
    spec = JOB.spec
    flops = _flops(spec, _at("block:3"))
    per_layer = 2 * spec.layer_matmul_elements() + spec.attention_core_flops()
    tokens = LAYOUT.global_batch * spec.seq
    assert flops["hardware"] - flops["model"] == pytest.approx(12 * per_layer * tokens,
                                                               rel=1e-12)


def test_megatron_arguments_and_torchtitan_refusal() -> None:
    args = megatron_args(JOB.spec, _at("block:2"))
    assert "--recompute-granularity full --recompute-method block --recompute-num-layers 2" \
        in args
    llama = load_spec("llama3-8b")
    with pytest.raises(ConfigError, match="recompute"):
        torchtitan_toml(llama, replace(_at("block:2"), tp=2, pp=2, dp=4, global_batch=8))


def test_refused_where_not_priced() -> None:
    deepseek = Job(load_spec("deepseek-v3"), node_cluster("dgx-h100", 256))
    layout = Execution(tp=1, pp=8, dp=32, ep=32, microbatch_size=1, global_batch=256,
                       recompute="block:1", zero=1)
    with pytest.raises(ConfigError, match="MTP"):
        evaluate(deepseek, layout)
    with pytest.raises(ConfigError, match="PyTorch runtime"):
        evaluate(JOB, _at("block:1").with_run(compile=True))


def test_the_search_recomputes_the_fewest_layers_that_fit() -> None:
    """Llama 3 405B at Meta's TP 8, PP 16, DP 128: without recomputation no layout fits; the
    search finds block recomputation faster than recomputing every layer, and fixing
    ``--recompute full`` gives the slower plan."""
    job = Job(load_spec("llama3-405b"), node_cluster("dgx-h100", 16384))
    choice = PlanScenario(model="llama3-405b", cluster="dgx-h100", gpus=16384,
                          global_batch=2048, tp=8, pp=16, dp=128).searched_execution()
    found = search(job, choice, SPACES["megatron-core"]).best
    assert found.layout.recompute.startswith("block:") and found.fits
    n = block_layers(found.layout.recompute)
    assert not evaluate(job, replace(found.layout, recompute=f"block:{n - 1}")
                        if n > 1 else replace(found.layout, recompute="none")).fits
    full = search(job, replace(choice, recompute="full"), SPACES["megatron-core"]).best
    assert found.iteration_s < full.iteration_s


def test_a_measured_run_states_it_as_megatron_does(tmp_path: Path) -> None:
    """The ledger schema (and a user's runs file): ``recompute: block`` with
    ``recompute_num_layers``, the layout's ``block:N``; one without the other is refused."""
    import yaml

    from dlsched.ledger.user_runs import load_runs

    example = Path(__file__).parents[2] / "docs" / "examples" / "my-runs.yaml"
    template = yaml.safe_load(example.read_text())[0]
    run = {**template, "parallel": {**template["parallel"], "recompute": "block",
                                    "recompute_num_layers": 4}}
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump([run]))
    assert load_runs(path)[0].execution.recompute == "block:4"
    run["parallel"].pop("recompute_num_layers")
    path.write_text(yaml.safe_dump([run]))
    with pytest.raises(ConfigError, match="recompute_num_layers"):
        load_runs(path)


def test_interleaved_chunks_count_their_own_layers() -> None:
    """Interleaved over 3 chunks of 3 layers: N counts per chunk (Megatron-Core's
    TransformerBlock is one chunk), so block:1 recomputes a third of the layers and block:3 is
    full recomputation; time and memory fall between none and full in that order."""
    layout = replace(LAYOUT, chunks=3, schedule="interleaved")
    runs = {mode: evaluate(JOB, replace(layout, recompute=mode))
            for mode in ("none", "block:1", "block:2", "block:3", "full")}
    times = [runs[m].iteration_s for m in ("none", "block:1", "block:2", "full")]
    memory = [runs[m].memory_bytes for m in ("none", "block:1", "block:2", "full")]
    assert times == sorted(times) and memory == sorted(memory, reverse=True)
    assert runs["block:3"].iteration_s == pytest.approx(runs["full"].iteration_s, rel=1e-12)
    flops = _flops(JOB.spec, replace(layout, recompute="block:1"))
    per_layer = 2 * JOB.spec.layer_matmul_elements() + JOB.spec.attention_core_flops()
    assert flops["hardware"] - flops["model"] == pytest.approx(
        12 * per_layer * LAYOUT.global_batch * JOB.spec.seq, rel=1e-12)  # 4 ranks x 3 chunks
