"""GPT-OSS's attention sinks under Transformer Engine's cuDNN attention
(``job.compute.attention_sinks``): one cast of the ``heads`` sink offsets right before each
layer's fused core, one kernel forward and one backward, only under ``attention: fused`` and
only for a model with sinks; the core itself is unchanged."""

from __future__ import annotations

import pytest

from dlsched.job.compute.attention_sinks import SINK_CAST_LABEL, sink_cast_op
from dlsched.job.compute.layer_costs import decoder_model, gpu_compute
from dlsched.job.model_spec import bundled_specs
from dlsched.models.ops import ATTENTION_KINDS

GPT_OSS = bundled_specs()["gpt-oss-120b"]


def _ops(spec, attention: str):
    return [op for layer in decoder_model(spec, depth=2, attention=attention).layers
            for op in layer.ops]


def test_one_cast_before_each_fused_core() -> None:
    ops = _ops(GPT_OSS, "fused")
    casts = [i for i, op in enumerate(ops) if op.label == SINK_CAST_LABEL]
    cores = [i for i, op in enumerate(ops) if op.kind in ATTENTION_KINDS]
    assert len(casts) == len(cores) == 2
    assert [i + 1 for i in casts] == cores
    plain = _ops(GPT_OSS.model_copy(update={"attention_sinks": False}), "fused")
    assert len(ops) - len(plain) == 2
    assert [op for op in ops if op.label != SINK_CAST_LABEL] == plain


@pytest.mark.parametrize("attention", ["flash", "unfused"])
def test_no_cast_outside_cudnns_kernel(attention) -> None:
    assert not [op for op in _ops(GPT_OSS, attention) if op.label == SINK_CAST_LABEL]


def test_cast_is_one_kernel_each_way_over_the_heads() -> None:
    op = sink_cast_op(GPT_OSS.heads)
    assert (op.kernels, op.backward_kernels, op.elements) == (1.0, 1.0, 2.0 * 64)
    compute = gpu_compute("h100", "bf16")
    assert compute.work(op, 1).launches == 1.0
    assert compute.work(op, 1, backward=True).launches == 1.0
    with pytest.raises(ValueError, match="heads"):
        sink_cast_op(0)
