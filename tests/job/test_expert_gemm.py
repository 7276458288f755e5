"""Grouped-GEMM efficiency at the tokens each expert gets (``job.compute.expert_gemm``)."""

from __future__ import annotations

import pytest

from dlsched.job.compute.expert_gemm import expert_gemm
from dlsched.job.compute.layer_costs import gpu_compute
from dlsched.job.execution import Execution
from dlsched.job.model_spec import Model, bundled_specs

FINE = Model(name="fine", layers=2, hidden=2048, heads=16, seq=256, vocab=1000,
             experts=64, top_k=2, expert_ffn_hidden=1024, gated_ffn=True, bias=False,
             rms_norm=True, learned_positions=False)


def _layout(microbatch: int, ep: int = 1) -> Execution:
    return Execution(tp=1, pp=1, dp=ep, microbatch_size=microbatch,
                     global_batch=microbatch * ep, ep=ep)


def test_few_tokens_per_expert_waste_tiles_and_read_weights() -> None:
    few = expert_gemm(FINE, _layout(1), "h100")
    assert few.tokens_per_expert == 256 * 2 // 64 == 8 and few.local_experts == 64
    # 8 rows of the smallest (64-row) tile are useful, and a 64-wide tile runs at half rate
    assert max(few.utilization) <= 8 / 64
    assert few.achieved < 0.05 < few.dense
    many = expert_gemm(FINE, _layout(64), "h100")
    assert many.tokens_per_expert == 512
    assert many.achieved == pytest.approx(many.dense, rel=1e-9)  # batched enough
    assert few.achieved < expert_gemm(FINE, _layout(4), "h100").achieved < many.achieved


def test_memory_bound_grouped_gemm_by_hand() -> None:
    # 128 tokens per expert: every tile full, but each expert's weights read for 128 rows
    result = expert_gemm(FINE, _layout(16), "h100")
    gpu = gpu_compute("h100", "bf16").gpu
    h, f, m, n = 2048, 1024, 128, 64
    flops = 2 * m * n * h * 2 * f + 2 * m * n * f * h  # fc1 (gate and up) and fc2
    moved = 2 * (m * n * (h + 2 * f) + n * h * 2 * f      # fc1 activations and weights
                 + m * n * (f + h) + n * f * h)          # fc2
    memory_s = moved / gpu.memory_rate
    assert memory_s > flops / gpu.kind_rate("gemm", "bf16")  # memory-bound
    assert result.achieved == pytest.approx(flops / (memory_s * gpu.peak_flops("bf16")),
                                            rel=1e-6)


def test_bundled_models_at_training_shapes_batch_their_experts() -> None:
    specs = bundled_specs()
    # 4,096 tokens per rank: DeepSeek-V3 on EP 64 gives each expert 4096 x 8 x 64 / 256 tokens
    deepseek = expert_gemm(specs["deepseek-v3"], _layout(1, 64), "h100")
    assert deepseek.tokens_per_expert == 8192 and deepseek.local_experts == 4
    oss = expert_gemm(specs["gpt-oss-120b"], _layout(1, 8), "h100")
    assert oss.tokens_per_expert == 4096 * 4 * 8 // 128
    # GPT-OSS's hidden 2880 = 22.5 tiles of 128: fc2's output width wastes half a tile
    assert oss.utilization[1] < 0.99 < oss.utilization[0]
