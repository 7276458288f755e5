"""The causal mask Transformer Engine's unfused attention builds on every call
(``job.compute.te_unfused_mask``), checked by hand: its bytes, its seconds at the preset's
memory rate, and where the MoE and dense layers add it (forward; again in a recomputed core)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import dlsched.job.compute.layer_costs as layer_costs
import dlsched.job.compute.moe_costs as moe_costs
from dlsched.job.compute.layer_costs import block_costs, gpu_compute
from dlsched.job.compute.moe_costs import moe_layer_costs
from dlsched.job.compute.te_unfused_mask import (
    MASK_BYTES_PER_SCORE,
    mask_bytes,
    mask_seconds,
    te_builds_mask,
)
from dlsched.job.execution import Execution
from dlsched.job.model_spec import Model

# a small MoE shape (Qwen3-30B-A3B's experts) at a short sequence
MOE = Model(name="moe-mask", layers=2, hidden=2048, heads=32, seq=256, vocab=1000,
            experts=128, top_k=8, expert_ffn_hidden=768, gated_ffn=True, bias=False,
            rms_norm=True, learned_positions=False, router_balance="forced")
DENSE = Model(name="dense-mask", layers=2, hidden=1024, heads=16, seq=512, vocab=1000,
              bias=False, rms_norm=True, learned_positions=False)


def test_bytes_by_hand() -> None:
    """int32 difference 4; the two shifts 4 + 4 each; two compares 4 + 1; two int64 wheres
    1 + 8; the int64 difference 8 + 8 + 8; logical_not 8 + 1: 81 bytes per element."""
    assert MASK_BYTES_PER_SCORE == 81
    assert mask_bytes(4096, 4096) == 81 * 4096 * 4096  # 1.36 GB: DeepSeek-V3 at 4,096
    with pytest.raises(ValueError, match="queries"):
        mask_bytes(0, 4)


def test_only_te_unfused() -> None:
    assert te_builds_mask("unfused", "transformer_engine")
    assert not te_builds_mask("unfused", "local")  # Megatron's own core: a causal kernel
    assert not te_builds_mask("fused", "transformer_engine")
    assert not te_builds_mask("flash", "transformer_engine")


def test_seconds_at_memory_rate() -> None:
    rate = gpu_compute("gb200", "bf16").gpu.memory_rate
    assert mask_seconds(MOE, 1, "unfused", "transformer_engine", rate) == pytest.approx(
        81 * 256 * 256 / rate)
    assert mask_seconds(MOE, 2, "unfused", "transformer_engine", rate) == pytest.approx(
        81 * 128 * 128 / rate)  # a CP rank's own tokens
    assert mask_seconds(MOE, 1, "fused", "transformer_engine", rate) == 0.0


def _clear() -> None:
    """Both modules' priced caches emptied."""
    moe_costs._layer_costs.cache_clear()
    block_costs.cache_clear()


def _mask_added(monkeypatch: pytest.MonkeyPatch,
                costs: Callable[[], Any]) -> tuple[float, float]:
    """What the mask adds to ``costs()``' forward and backward seconds: priced as is, then
    with ``mask_seconds`` zero in both modules (the caches emptied before each and after)."""
    _clear()
    with_mask = costs()
    zero = lambda *args: 0.0  # noqa: E731
    monkeypatch.setattr(moe_costs, "mask_seconds", zero)
    monkeypatch.setattr(layer_costs, "mask_seconds", zero)
    _clear()
    without = costs()
    _clear()
    return with_mask.layer_f - without.layer_f, with_mask.layer_b - without.layer_b


@pytest.mark.parametrize("recompute, again", [("none", 0), ("modules:core_attn", 1),
                                              ("selective", 1), ("full", 1)])
def test_moe_layer_adds_it(monkeypatch: pytest.MonkeyPatch, recompute: str,
                           again: int) -> None:
    """Forward: one mask; backward: one more where the core is recomputed."""
    layout = Execution(2, 1, 4, 1, 64, ep=8, expert_tp=1, recompute=recompute,
                       sequence_parallel=True)  # DeepSeek-V3 on GB200: TP 2, ETP 1
    forward, backward = _mask_added(
        monkeypatch, lambda: moe_layer_costs(MOE, layout, "gb200", "bf16", None, None,
                                             "baseline", attention="unfused",
                                             transformer_impl="transformer_engine"))
    mask = 81 * 256 * 256 / gpu_compute("gb200", "bf16").gpu.memory_rate
    assert forward == pytest.approx(mask)
    assert backward == pytest.approx(again * mask)


@pytest.mark.parametrize("recompute, again", [("none", 0), ("selective", 1)])
def test_dense_layer_adds_it(monkeypatch: pytest.MonkeyPatch, recompute: str,
                             again: int) -> None:
    forward, backward = _mask_added(
        monkeypatch, lambda: block_costs(DENSE, 1, "gb200", "bf16", 2, True, recompute, None,
                                         "baseline", attention="unfused",
                                         transformer_impl="transformer_engine"))
    mask = 81 * 512 * 512 / gpu_compute("gb200", "bf16").gpu.memory_rate
    assert forward == pytest.approx(mask)
    assert backward == pytest.approx(again * mask)
