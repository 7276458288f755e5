"""Gradients accumulated outside the GEMMs (``Job.grad_accumulation="separate"``): each
microbatch's backward adds every parameter's fresh gradient into its accumulator at the GPU's
memory rate; checked by hand on one pipeline-less GPU, stage by stage on a pipeline, and
against what fused accumulation costs (nothing)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dlsched.errors import ConfigError
from dlsched.job.cluster import node_cluster
from dlsched.job.compute.grad_accumulation import accumulation_bytes
from dlsched.job.compute.layer_costs import gpu_compute
from dlsched.job.evaluation.evaluate import Job, evaluate, pipeline_times
from dlsched.job.execution import Execution
from dlsched.job.memory.parameters import stage_parameters
from dlsched.job.model_spec import bundled_specs
from dlsched.job.run_settings import RunSettings

SPEC = bundled_specs()["gpt-1.7b"]
JOB = Job(SPEC, node_cluster("dgx-a100", 8))
FUSED = RunSettings("fp16", grad_reduce="fp16")
SEPARATE = replace(FUSED, grad_accumulation="separate")
RATE = gpu_compute("a100", "fp16").gpu.memory_rate  # bytes/s


def test_one_gpu_adds_six_bytes_per_parameter_per_microbatch_by_hand() -> None:
    """TP 1, PP 1, 8 microbatches of 1 on each of 8 GPUs: the iteration grows by 8 passes over
    the GPU's parameters, each reading the 16-bit gradient (2 B) and reading and writing the
    16-bit accumulator (2 + 2 B), and, the model on one stage, by 8 sums of the tied word
    embedding's two 16-bit gradients before it (51,200 x 2,304: read 2 + 2 B, write 2 B;
    ``job.compute.embedding_grads``)."""
    layout = Execution(1, 1, 8, 1, 64, recompute="full")
    fused, separate = (evaluate(JOB, replace(layout, run=run)) for run in (FUSED, SEPARATE))
    assert (SPEC.vocab, SPEC.hidden) == (51200, 2304)
    expected = 8 * (SPEC.parameters() * 6 + 3 * 2 * 51200 * 2304) / RATE
    assert separate.exposed["grad_accumulation_s"] == pytest.approx(expected)
    assert fused.exposed["grad_accumulation_s"] == 0.0
    assert separate.iteration_s - fused.iteration_s == pytest.approx(expected, rel=1e-9)


def test_fp32_accumulators_move_ten_bytes() -> None:
    assert accumulation_bytes("separate", "fp16", 4) == 10
    assert accumulation_bytes("separate", "bf16", 2) == 6
    assert accumulation_bytes("separate", "autocast", 4) == 12  # FP32 gradients into FP32
    assert accumulation_bytes("fused", "fp16", 4) == 0


def test_each_stage_pays_for_its_own_parameters() -> None:
    """PP 4: every virtual stage's backward grows by its parameters' pass; over the stages a
    GPU of each holds half the split weights (TP 2), the norms, row-parallel biases and
    learned positions whole, and half the padded vocabulary twice (the tied output
    embedding's copy on the last), as the memory model counts them."""
    layout = Execution(2, 4, 1, 1, 16, recompute="full")
    plain, _, _ = pipeline_times(JOB, replace(layout, run=FUSED))
    added, _, _ = pipeline_times(JOB, replace(layout, run=SEPARATE))
    params = stage_parameters(SPEC, layout)
    for stage, count in enumerate(params):
        assert added.backward[stage] - plain.backward[stage] == pytest.approx(
            count * 6 / RATE)
        assert added.forward[stage] == plain.forward[stage]
    assert params[0] > params[1] and params[-1] > params[1]  # the embedding, the tied copy
    h, vocab = SPEC.hidden, 51200  # GPT's 50,257 padded to a multiple of 128 x TP 2
    layer = (SPEC.layer_parameters() - 6 * h) / 2 + 6 * h  # 2 norms, 2 row-parallel biases
    by_hand = SPEC.layers * layer + vocab * h / 2 + SPEC.seq * h + 2 * h + vocab * h / 2
    assert sum(params) == pytest.approx(by_hand, rel=1e-12)


def test_a_mode_that_does_not_exist_names_the_field() -> None:
    """RunSettings names its field (plan's edge says --grad-accumulation)."""
    with pytest.raises(ConfigError, match=r"^grad_accumulation: 'sometimes' is not accepted; "
                                          r"accepted: fused, separate") as error:
        replace(FUSED, grad_accumulation="sometimes")
    assert error.value.field == "grad_accumulation"


def test_the_export_turns_the_fusion_off() -> None:
    from dlsched.job.scenario import PlanScenario

    given = PlanScenario(model="gpt-1.7b", gpus=8, global_batch=64, precision="fp16",
                         grad_reduce="fp16", tp=1, pp=1, dp=8, chunks=1, microbatch_size=1,
                         schedule="1f1b", recompute="full", sequence_parallel=False, zero=0)
    assert "--no-gradient-accumulation-fusion" not in given.run().megatron_args()
    separate = given.model_copy(update={"grad_accumulation": "separate"}).run()
    assert "--no-gradient-accumulation-fusion" in separate.megatron_args()
    assert "--accumulate-allreduce-grads-in-fp32" not in separate.megatron_args()
