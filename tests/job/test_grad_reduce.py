"""Gradients reduced in BF16 (``Job.grad_reduce``, Megatron-LM's ``--grad-reduce-in-bf16``):
half the bytes on the DP group's links and in the gradient buffer, checked by hand; refused
outside BF16 training; carried to the exports."""

from __future__ import annotations

import pytest

from dlsched.errors import ConfigError
from dlsched.job.cluster import node_cluster
from dlsched.job.communication.collective_costs import curve
from dlsched.job.evaluation.evaluate import Job, dp_group, evaluate
from dlsched.job.execution import Execution
from dlsched.job.memory.per_gpu import memory_per_gpu
from dlsched.job.model_spec import bundled_specs
from dlsched.job.run_settings import RunSettings
from dlsched.job.scenario import PlanScenario

SPEC = bundled_specs()["llama3-8b"]
# DP 8 on one node, ZeRO 0: the gradients all-reduced at the end
LAYOUT = Execution(1, 1, 8, 1, 8, run=RunSettings("bf16", dp_policy="none"))
JOB = Job(SPEC, node_cluster("dgx-h100", 8))
BF16 = LAYOUT.with_run(grad_reduce="bf16")


def test_the_reduction_moves_two_bytes_per_gradient_by_hand() -> None:
    """With gradients reduced after the backward, the exposed DP time is the all-reduce of
    every parameter: 4 bytes each by default, 2 in BF16."""
    reduce = curve(dp_group(JOB, LAYOUT), "all-reduce", "baseline")
    params = SPEC.parameters()
    assert evaluate(JOB, LAYOUT).exposed["dp_s"] == pytest.approx(reduce.seconds(4 * params))
    assert evaluate(JOB, BF16).exposed["dp_s"] == pytest.approx(reduce.seconds(2 * params))
    assert evaluate(JOB, BF16).iteration_s < evaluate(JOB, LAYOUT).iteration_s


def test_the_gradient_buffer_halves() -> None:
    fp32, bf16 = (evaluate(JOB, layout).memory for layout in (LAYOUT, BF16))
    held = memory_per_gpu(SPEC, LAYOUT, "bf16").parameters  # the padded vocabulary's too
    assert fp32["gradients"] == pytest.approx(4 * held)
    assert bf16["gradients"] == pytest.approx(fp32["gradients"] / 2)
    assert bf16["weights"] == fp32["weights"] and bf16["optimizer"] == fp32["optimizer"]


@pytest.mark.parametrize(("precision", "grad_reduce"), [("fp16", "bf16"), ("autocast", "bf16"),
                                                        ("bf16", "fp8"), ("bf16", "fp16"),
                                                        ("autocast", "fp16")])
def test_a_format_the_training_cannot_reduce_in_names_the_field(precision: str,
                                                                grad_reduce: str) -> None:
    with pytest.raises(ConfigError, match=r"^grad_reduce: "):
        RunSettings(precision, grad_reduce=grad_reduce)


def test_the_plan_exports_the_bf16_reduction() -> None:
    scenario = PlanScenario(model="llama3-8b", cluster="dgx-h100", gpus=8, global_batch=8,
                            tp=1, pp=1, dp=8, chunks=1, microbatch_size=1, schedule="1f1b",
                            recompute="full", sequence_parallel=False, zero=1)
    report = scenario.model_copy(update={"grad_reduce": "bf16"}).run()
    assert "--grad-reduce-in-bf16" in report.megatron_args()
    assert 'mixed_precision_reduce = "bfloat16"' in report.torchtitan_toml()
    default = scenario.run()
    assert "--grad-reduce-in-bf16" not in default.megatron_args()
    assert 'mixed_precision_reduce = "float32"' in default.torchtitan_toml()
