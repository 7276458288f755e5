"""Megatron-Core's bias-dropout-add unfused (GPT-OSS's ``bias_dropout_fusion`` False):
job.compute.bias_dropout, kernels and passes counted by hand from the module docstring."""

from __future__ import annotations

import pytest

from dlsched.job.compute.bias_dropout import unfused_ops
from dlsched.job.compute.layer_costs import decoder_model
from dlsched.job.model_spec import bundled_specs

GPT_OSS = bundled_specs()["gpt-oss-120b"]
SH = GPT_OSS.seq * GPT_OSS.hidden  # one join's s x h elements per sample (4096 x 2880)


def _joins(spec) -> dict[str, list]:
    model = decoder_model(spec, 1, 1, "ring", "fused")
    out: dict[str, list] = {"attn": [], "mlp": []}
    for layer in model.layers:
        if layer.block != "h.0":
            continue
        side = "mlp" if ".mlp." in layer.name else "attn"
        out[side] += [op for op in layer.ops
                      if op.label in ("bias-dropout-add", "bias-add", "residual-add")]
    return out


def test_fused_by_default() -> None:
    joins = _joins(GPT_OSS)
    assert GPT_OSS.bias_dropout_fusion
    assert [[op.label for op in ops] for ops in joins.values()] == [["bias-dropout-add"]] * 2


def test_unfused_gpt_oss_by_hand() -> None:
    """Attention: the bias add (2 passes, its gradient's reduction 1 pass) and the residual
    add (3 passes, the fork's sum 3): 2 kernels and 5 s x h passes forward, 2 and 4 backward.
    The MoE layer returns no bias: the residual add alone, 1 kernel and 3 passes each way."""
    joins = _joins(GPT_OSS.model_copy(update={"bias_dropout_fusion": False}))
    attn, mlp = joins["attn"], joins["mlp"]
    assert [op.label for op in attn] == ["bias-add", "residual-add"]
    assert [op.label for op in mlp] == ["residual-add"]
    assert sum(op.kernels for op in attn) == 2 and sum(op.launches_backward for op in attn) == 2
    assert sum(op.elements for op in attn) == pytest.approx(5 * SH)
    assert sum(op.backward_elements for op in attn) == pytest.approx(4 * SH)
    assert (mlp[0].elements, mlp[0].backward_elements) == (3 * SH, 3 * SH)
    assert not any(op.split for op in attn + mlp)  # whole on every GPU of a TP group


def test_dense_model_keeps_the_ffn_bias() -> None:
    """Without experts the FFN's row-parallel linear returns its bias too: both joins get the
    bias add; without biases neither does."""
    ops = unfused_ops(100.0, bias=True)
    assert [op.label for op in ops] == ["bias-add", "residual-add"]
    assert [op.label for op in unfused_ops(100.0, bias=False)] == ["residual-add"]
    assert sum(op.elements for op in ops) == 500.0
    assert sum(op.backward_elements for op in ops) == 400.0  # not the default 2 x forward
