"""The attention probabilities' dropout at rate 0 (NeMo 2.0's DeepSeek-V3, attention_dropout
0.0): job.compute.attention_dropout, the unfused core's op counted by hand."""

from __future__ import annotations

import pytest

from dlsched.errors import ConfigError
from dlsched.job.cluster import load_cluster
from dlsched.job.compute.attention_dropout import DROPOUT_LABEL, with_attention_dropout
from dlsched.job.compute.layer_costs import block_costs, decoder_model
from dlsched.job.model_spec import Model, bundled_specs

GPT = Model("gpt", 2, 1024, 16, 2048, 51200)  # 2 layers, hidden 1024, 16 heads, seq 2048
DSV3 = bundled_specs()["deepseek-v3"]


def _labels(spec: Model, attention: str) -> list[str]:
    model = decoder_model(spec, 2, 1, "ring", attention)
    return [op.label for layer in model.layers for op in layer.ops]


def test_torch_dropout_at_rate_zero_is_its_input() -> None:
    """What the module rests on: ``F.dropout(x, 0.0, training=True)`` returns ``x`` itself
    (no mask, no autograd node), at 0.1 a new tensor (torch: the runtime extra)."""
    torch = pytest.importorskip("torch")
    x = torch.randn(4, 8, requires_grad=True) * 1.0
    assert torch.nn.functional.dropout(x, 0.0, True) is x
    assert torch.nn.functional.dropout(x, 0.1, True) is not x


def test_default_rate_keeps_the_op_and_zero_removes_exactly_it() -> None:
    """Megatron's default 0.1: one ``attention-dropout`` op per unfused layer, over heads x
    queries x keys = 16 x 2048 x 2048 probabilities at 2.5 passes (83,886,080 element
    touches a sample); at 0 the same ops without it. MLA's unfused core the same (61 layers
    of DeepSeek-V3 built 2 deep: 2 ops)."""
    assert GPT.attention_dropout == 0.1
    kept = _labels(GPT, "unfused")
    dropped = _labels(GPT.model_copy(update={"attention_dropout": 0.0}), "unfused")
    assert kept.count(DROPOUT_LABEL) == 2 and DROPOUT_LABEL not in dropped
    assert [label for label in kept if label != DROPOUT_LABEL] == dropped
    op = next(op for layer in decoder_model(GPT, 2, 1, "ring", "unfused").layers
              for op in layer.ops if op.label == DROPOUT_LABEL)
    assert op.elements == pytest.approx(16 * 2048 * 2048 * 2.5)
    assert DSV3.attention_dropout == 0.0  # bundled as its config.json sets it
    assert _labels(DSV3.model_copy(update={"attention_dropout": 0.1}),
                   "unfused").count(DROPOUT_LABEL) == 2
    assert DROPOUT_LABEL not in _labels(DSV3, "unfused")


def test_fused_cores_have_no_op_to_remove_and_rates_above_zero_change_nothing() -> None:
    model = decoder_model(GPT, 2, 1, "ring", "fused")
    assert with_attention_dropout(model, 0.0) == model
    assert with_attention_dropout(model, 0.3) is model
    assert _labels(GPT.model_copy(update={"attention_dropout": 0.0}), "fused") == \
        _labels(GPT, "fused")


def test_rate_zero_makes_the_unfused_block_faster_by_the_op_alone() -> None:
    """On an H100 at TP 1 the unfused layer at rate 0 is faster, the fused one unchanged."""
    group = load_cluster("dgx-h100", 8, None).group_topology(1, 1)
    args = (1, "h100", "bf16", 1, False, "none", group, "baseline")
    zero = GPT.model_copy(update={"attention_dropout": 0.0})
    unfused = block_costs(GPT, *args, attention="unfused")
    assert block_costs(zero, *args, attention="unfused").layer_f < unfused.layer_f
    assert block_costs(zero, *args, attention="fused").layer_f == \
        block_costs(GPT, *args, attention="fused").layer_f


@pytest.mark.parametrize("rate", [-0.1, 1.0])
def test_rate_outside_zero_to_one_is_refused_naming_the_field(rate: float) -> None:
    with pytest.raises(ConfigError, match="attention_dropout"):
        Model("gpt", 2, 1024, 16, 2048, 51200, attention_dropout=rate)
