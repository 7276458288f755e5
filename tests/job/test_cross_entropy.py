"""The head's loss by implementation (job.compute.cross_entropy): Megatron-LM's unfused
vocab-parallel cross-entropy, Megatron-Core's torch.compile'd fusion and Transformer Engine's
Triton kernels, priced by hand from the bytes each moves per logit."""

from __future__ import annotations

import pytest

from dlsched.errors import ConfigError
from dlsched.hardware.gpu import get_gpu
from dlsched.job.cluster import load_cluster
from dlsched.job.compute.cross_entropy import LOSS_LABEL, loss_op, with_cross_entropy
from dlsched.job.compute.layer_costs import block_costs, decoder_model, gpu_compute
from dlsched.job.model_spec import bundled_specs
from dlsched.job.run_settings import RunSettings

SPEC = bundled_specs()["llama3-8b"]
TOKENS, VOCAB = 4096, 128256  # one GPU's 8192 / CP 2 tokens, the Llama 3 vocabulary
LOGITS = TOKENS * VOCAB
RATE = 0.6832 * 3.35e12  # the h100 preset's achieved memory bandwidth, B/s


def test_fused_losses_move_their_bytes_by_hand() -> None:
    """Per logit: native 22 B forward (read 2 write 4; read 4 write 4; read 4 write 4) and
    10 B backward (read 4, write 4 + 2); te 6 B forward (read 2 twice, write 2) and 4 B
    backward (read 2, write 2); Megatron-LM's unfused op 52 B over both (13 FP32 passes)."""
    compute = gpu_compute("h100", "bf16")
    for kind, forward, backward in (("native", 22, 10), ("te", 6, 4)):
        op = loss_op(kind, LOGITS)
        assert compute.work(op, 1).gpu_s == pytest.approx(forward * LOGITS / RATE)
        assert compute.work(op, 1, True).gpu_s == pytest.approx(backward * LOGITS / RATE)
    assert get_gpu("h100").memory_rate == pytest.approx(RATE)
    unfused = next(op for layer in decoder_model(SPEC, 1, 2, "ring", "fused").layers
                   for op in layer.ops if op.label == LOSS_LABEL)
    both = compute.work(unfused, 1).gpu_s + compute.work(unfused, 1, True).gpu_s
    assert both == pytest.approx(52 * LOGITS / RATE)


def test_only_the_loss_is_replaced() -> None:
    model = decoder_model(SPEC, 1, 2, "ring", "fused")
    assert with_cross_entropy(model, "unfused") is model
    fused = with_cross_entropy(model, "te")
    changed = [(a, b) for a, b in zip(model.layers, fused.layers, strict=True) if a != b]
    assert [a.block for a, _ in changed] == ["ln_f"]
    (old, new), = changed
    assert [op.label for op in old.ops] == [op.label for op in new.ops]
    assert [op for op in new.ops if op.label == LOSS_LABEL] == [loss_op("te", LOGITS)]


def test_head_of_the_8b_row_by_hand() -> None:
    """Llama 3 8B on one H100 of TP 1, CP 2: the native fusion saves (52 - 32) B per logit of
    the head's forward and backward, 20 x 4096 x 128,256 B at 2.289 TB/s = 4.590 ms per
    microbatch; at TP 4 each GPU streams a quarter of the vocabulary."""
    group = load_cluster("dgx-h100", 8, None).group_topology(1, 1)
    costs = {kind: block_costs(SPEC, 1, "h100", "bf16", 1, False, "none", group, "baseline",
                               2, "ring", "fused", cross_entropy=kind)
             for kind in ("unfused", "native")}
    saved = sum(costs["unfused"].__dict__[k] - costs["native"].__dict__[k]
                for k in ("head_f", "head_b"))
    assert saved == pytest.approx(20 * LOGITS / RATE) == pytest.approx(4.590e-3, rel=1e-3)
    assert costs["unfused"].layer_f == costs["native"].layer_f
    group4 = load_cluster("dgx-h100", 8, None).group_topology(4, 1)
    quarter = {kind: block_costs(SPEC, 1, "h100", "bf16", 4, True, "none", group4,
                                 "baseline", 2, "ring", "fused", cross_entropy=kind)
               for kind in ("unfused", "native")}
    assert sum(quarter["unfused"].__dict__[k] - quarter["native"].__dict__[k]
               for k in ("head_f", "head_b")) == pytest.approx(saved / 4)


def test_unknown_loss_is_refused_naming_the_field() -> None:
    with pytest.raises(ConfigError, match=r"^cross_entropy: 'fast' is not accepted; "
                                          r"accepted: unfused, native, te") as refused:
        RunSettings(cross_entropy="fast")
    assert refused.value.field == "cross_entropy"
    with pytest.raises(ConfigError, match=r"^cross_entropy: 'unfused' is not a fused loss"):
        loss_op("unfused", LOGITS)
