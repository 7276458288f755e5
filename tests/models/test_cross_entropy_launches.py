"""Megatron's vocab-parallel cross-entropy launches one kernel per eager tensor op
(``models.megatron_loss.megatron_cross_entropy``): 18 forward, 8 backward; where the head is
launch-bound (a small vocabulary shard per GPU) they set its price."""

from __future__ import annotations

import pytest

from dlsched.experiments.vtrain import VTrainRow, job
from dlsched.job.communication.collective_costs import curve
from dlsched.job.evaluation.replica import block_costs_of
from dlsched.models.compute import calibrated
from dlsched.models.megatron_loss import CROSS_ENTROPY_KERNELS
from dlsched.models.zoo import gpt_model

KERNEL_OVERHEAD = 77.44e-6  # the a100 preset's forward and backward seconds per launch
BACKWARD_OVERHEAD = 23.81e-6


def _loss(megatron: bool):
    model = gpt_model("g", 64, 1, 4, 128, 1000, dtype_bytes=2, megatron=megatron)
    return next(op for layer in model.layers for op in layer.ops if op.label == "cross-entropy")


def test_megatron_loss_launches_one_kernel_per_eager_op() -> None:
    """Forward: the cast, max, subtract, exp, sum and divide over the logits and twelve ops over
    the targets (3 for the range mask, clone and offset, the masked fill, arange, the gather and
    its clone, the second masked fill, log and subtract); backward: arange, the mask's cast and
    1 - mask, gather / subtract / scatter at the targets, the scaling and the cast back. Hugging
    Face's loss op keeps its own 4 and 4."""
    assert CROSS_ENTROPY_KERNELS == (6 + 12, 2 + 6)
    compute = calibrated("a100", "fp16", autocast=False)
    assert [compute.work(_loss(True), 1, back).launches for back in (False, True)] == [18, 8]
    assert [compute.work(_loss(False), 1, back).launches for back in (False, True)] == [4, 4]


def test_launch_bound_head_is_priced_by_its_launches() -> None:
    """GPT h1024 (16 heads, seq 1024) at TP 8 on a DGX A100, microbatch 1, fp16: 6,400 vocabulary
    rows per GPU (51,200 padded). The head's forward is ln_f (1 kernel), the LM head GEMM (1) and
    the loss (18): 20 x 77.44 us = 1.5488 ms of launches, against GPU work far below it (the
    loss's 13/3 FP32 passes over 1024 x 6,400 logits: 6,553,600 x 52/3 B / (2.039 TB/s x 0.7523)
    = 74.05 us). The backward: ln_f 2, GEMM 2, loss 8 = 12 x 23.81 us = 285.72 us, then the
    head's input-gradient all-reduce (2 MiB)."""
    row = VTrainRow(8, 8, 1, 1024, 16, 12, 1024, 8, 1, 1, 1.0)
    assert row.spec().vocab == 51200
    costs = block_costs_of(job(row), row.layout())
    assert costs.head_f == pytest.approx(20 * KERNEL_OVERHEAD)
    loss_gpu = 1024 * 6400 * 52 / 3 / (2.039e12 * 0.7523)
    assert loss_gpu == pytest.approx(74.05e-6, rel=1e-3)
    layout = row.layout()
    exchange = curve(layout.group("tp", job(row).cluster), "all-reduce",
                     layout.run.collective_policy).seconds(1024 * 1024 * 2)
    assert costs.head_b - exchange == pytest.approx(12 * BACKWARD_OVERHEAD)
