"""``plan``'s note when memory is why a plan recomputes (``job.recompute_note``)."""

from __future__ import annotations

from dataclasses import replace

from dlsched.job.cluster import node_cluster
from dlsched.job.evaluation.evaluate import Job, evaluate
from dlsched.job.execution import Execution
from dlsched.job.memory.allocator import fragmentation_margin
from dlsched.job.model_spec import load_spec
from dlsched.job.recompute_note import recompute_note
from dlsched.pipeline.chains.memory_model import usable_bytes

META = Execution(tp=8, pp=16, dp=128, microbatch_size=1, global_batch=2048, chunks=1,
                 schedule="zb-h1", recompute="block:1", sequence_parallel=True, zero=2,
                 pipeline_split="account-embedding-loss")
"""Meta's Llama 3 405B layout (Llama 3 paper, Table 4: TP 8, PP 16, DP 128, 16M tokens of
8,192), as dlsched's search completes it at the memory check's limit: one layer of each stage
recomputed."""


def _job(model: str, gpus: int) -> Job:
    return Job(load_spec(model), node_cluster("dgx-h100", gpus))


def test_meta_layout_recomputes_for_memory_and_says_so() -> None:
    """Without recomputation the layout is faster and fails the check's margin but not the
    GPU: the note gives both times and the bytes against what the check admits."""
    job = _job("llama3-405b", 16384)
    chosen = evaluate(job, META)
    plain = evaluate(job, replace(META, recompute="none"))
    assert chosen.fits and not plain.fits and plain.iteration_s < chosen.iteration_s
    note = recompute_note(job, chosen)
    assert note is not None and "memory margin's price" in note
    assert f"{plain.iteration_s:.3f} s" in note
    assert f"{1 - plain.iteration_s / chosen.iteration_s:.1%} less" in note
    admitted = usable_bytes(job.cluster.memory, plain.memory["reserve"],
                            fragmentation_margin(False))
    assert plain.memory_bytes - plain.memory["reserve"] > admitted
    assert plain.memory_bytes - plain.memory["reserve"] < job.cluster.memory - plain.memory[
        "reserve"]


def test_no_note_when_the_layout_is_over_the_gpu_itself() -> None:
    """DeepSeek-V3 without recomputation at this layout would keep about twice an H100: no
    framework's margin closes that, so no note."""
    job = Job(load_spec("deepseek-v3"), node_cluster("dgx-h100", 1024))
    layout = Execution(tp=1, pp=8, dp=128, ep=4, microbatch_size=1, global_batch=4096,
                       chunks=4, schedule="interleaved", recompute="full", zero=2,
                       pipeline_split="account-embedding-loss")
    full = evaluate(job, layout)
    plain = evaluate(job, replace(layout, recompute="none"))
    assert plain.iteration_s < full.iteration_s and plain.memory_bytes > job.cluster.memory
    assert recompute_note(job, full) is None


def test_no_note_without_recomputation_or_when_the_plain_layout_fits() -> None:
    job = _job("llama3-405b", 16384)
    assert recompute_note(job, evaluate(job, replace(META, recompute="none"))) is None
    small = _job("gpt-1.7b", 8)
    layout = Execution(tp=1, pp=1, dp=8, microbatch_size=1, global_batch=64,
                       recompute="full", zero=1)
    plain = evaluate(small, replace(layout, recompute="none"))
    assert plain.fits  # the search weighed it: nothing to say
    assert recompute_note(small, evaluate(small, layout)) is None


def test_plan_prints_the_note() -> None:
    from dlsched.job.api import plan
    from dlsched.job.scenario import PlanScenario

    report = plan(PlanScenario(model="llama3-405b", cluster="dgx-h100", gpus=16384,
                               global_batch=2048, tp=8, pp=16, dp=128, objective="expected",
                               baselines=False))
    assert any("memory margin's price" in note for note in report.notes)
