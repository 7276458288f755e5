"""TorchTitan's separate linears (wq, wk, wv; w1, w3) priced wherever the layer is
TorchTitan's (``layer_costs.torch_linears``: compiled, or its modules priced eager),
checked by hand on Llama 3 8B at TP 8 with sequence parallelism, compiled."""

from __future__ import annotations

import pytest
from llama3_8b import L8

from dlsched.job.cluster import load_cluster
from dlsched.job.compute import layer_costs
from dlsched.job.compute.block_pricing import KernelOptions
from dlsched.job.compute.layer_costs import (
    block_costs,
    gpu_compute,
    rank_decoder,
    separate_linears_seconds,
    torch_linears,
)

TP, MB = 8, 2


def test_which_layers_are_torchtitans() -> None:
    """Compiled (torch.compile: TorchTitan) or TorchTitan's modules eager: yes; the zoo's
    fused ops uncompiled (Megatron-style): no."""
    assert torch_linears(L8, KernelOptions(compiled=True))
    assert torch_linears(L8, KernelOptions(fp8_recipe="tensorwise", compiled=True))
    assert torch_linears(L8, KernelOptions(ops="eager"))
    assert not torch_linears(L8, KernelOptions())
    assert not torch_linears(L8, KernelOptions(fp8_recipe="delayed"))


def _costs(kernels: KernelOptions, precision: str) -> object:
    group = load_cluster("dgx-h100", 8, None).group_topology(1, 8)
    block_costs.cache_clear()
    return block_costs(L8, MB, "h100", precision, TP, True, "none", group, "baseline",
                       attention="flash", kernels=kernels)


def test_summed_input_gradients_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tensorwise FP8: the layer's backward grows by Inductor's two sums of the input
    gradients, wq + wk + wv (read 3, write 1) and w1 + w3 (read 2, write 1) 16-bit tensors of
    MB x 8192 x 4096 elements, 14 bytes per element at the memory rate, besides the separate
    FP8 GEMMs' own extra (``separate_linears_seconds`` with the recipe); its forward by that
    extra alone."""
    kernels = KernelOptions(fp8_recipe="tensorwise", compiled=True)
    compute = gpu_compute("h100", "fp8", TP, True)
    rate = compute.gpu.memory_rate
    model = rank_decoder(L8, 1, "ring", "flash", TP, "local")
    extra_f, extra_b = separate_linears_seconds(model, L8, MB, compute, kernels)
    torch = _costs(kernels, "fp8")
    monkeypatch.setattr(layer_costs, "torch_linears", lambda *a, **k: False)
    fused = _costs(kernels, "fp8")
    block_costs.cache_clear()
    assert torch.layer_f - fused.layer_f == pytest.approx(extra_f, rel=1e-9)
    assert torch.layer_b - fused.layer_b == pytest.approx(
        14 * MB * 8192 * 4096 / rate + extra_b, rel=1e-9)


def test_fp8_wk_is_its_operands_bytes_by_hand() -> None:
    """wk in FP8 at TP 8 (4096 -> 1024 / 8 = 128 columns on a rank, MB x 8192 tokens) is
    memory-bound: forward X read in FP8 (1 byte per element of the whole gathered input),
    W (1 byte) and Y written in bf16 (2 bytes); backward 3 bytes per input element (dX
    written, X read again for dW), 2 per output element (G read twice), 3 per weight
    element. Its FP8 GEMMs cost less than its bf16 ones (half the input bytes)."""
    from dlsched.job.compute.block_pricing import gemm_seconds
    from dlsched.job.compute.eager_ops import separate_linears
    from dlsched.models.pricing import fp8_gemm_bytes

    kernels = KernelOptions(fp8_recipe="rowwise", compiled=True)
    compute = gpu_compute("h100", "fp8", TP, True)
    model = rank_decoder(L8, 1, "ring", "flash", TP, "local")
    qkv = next(op for item in model.layers for op in item.ops if op.label.endswith("c_attn"))
    wk = separate_linears(qkv, L8)[1]
    tokens = MB * 8192
    x, y, w = tokens * 4096, tokens * 128, 4096 * 128
    assert fp8_gemm_bytes(wk, MB, 1 / TP, TP, w, False) == x + 2 * y + w
    assert fp8_gemm_bytes(wk, MB, 1 / TP, TP, w, True) == 3 * x + 2 * y + 3 * w
    rate = compute.gpu.memory_rate
    assert gemm_seconds(wk, MB, compute, kernels, False) == pytest.approx(
        (x + 2 * y + w) / rate, rel=1e-9)
    assert gemm_seconds(wk, MB, compute, kernels, True) == pytest.approx(
        (3 * x + 2 * y + 3 * w) / rate, rel=1e-9)
    bf16 = gpu_compute("h100", "bf16", TP, True)
    assert gemm_seconds(wk, MB, compute, kernels, False) < bf16.work(wk, MB, False).gpu_s


def test_16_bit_linears_at_their_own_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    """bf16: the forward grows by exactly the separate GEMMs' extra seconds over the fused
    QKV and FC1 ones (``separate_linears_seconds``), which are positive: wk and wv are 1024 / 8
    = 128 columns wide on a rank, memory-bound, each reading the whole gathered input (at
    least 2 x MB x 8192 x 4096 x 2 bytes at the memory rate for the two)."""
    kernels = KernelOptions(compiled=True)
    compute = gpu_compute("h100", "bf16", TP, True)
    model = rank_decoder(L8, 1, "ring", "flash", TP, "local")
    extra_f, extra_b = separate_linears_seconds(model, L8, MB, compute)
    torch = _costs(kernels, "bf16")
    monkeypatch.setattr(layer_costs, "torch_linears", lambda *a, **k: False)
    fused = _costs(kernels, "bf16")
    block_costs.cache_clear()
    assert torch.layer_f - fused.layer_f == pytest.approx(extra_f, rel=1e-9)
    assert extra_f > 0 and extra_b > 0
    wk_wv_reads = 2 * MB * 8192 * 4096 * 2 / compute.gpu.memory_rate
    qkv = next(op for item in model.layers for op in item.ops if op.label.endswith("c_attn"))
    assert extra_f + compute.work(qkv, MB, False).gpu_s > wk_wv_reads


def test_per_op_rerun_takes_the_fp8_separate_linears(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under TorchTitan's per-op policy torchao's ``_scaled_mm`` is not saved, so wq, wk, wv,
    w1 and w3 all rerun in the backward: their forward extra over the fused GEMMs (stood in
    here by 1 ms) is paid once more there; without recomputation only in the forward."""
    group = load_cluster("dgx-h100", 8, None).group_topology(1, 8)
    kernels = KernelOptions(fp8_recipe="tensorwise", compiled=True)

    def costs(extra: float, recompute: str) -> object:
        monkeypatch.setattr(layer_costs, "separate_linears_seconds",
                            lambda *a, **k: (extra, 0.0))
        block_costs.cache_clear()
        return block_costs(L8, MB, "h100", "fp8", TP, True, recompute, group, "baseline",
                           attention="flash", kernels=kernels)
    for recompute, rerun in (("selective-op", 1e-3), ("none", 0.0)):
        base, more = costs(0.0, recompute), costs(1e-3, recompute)
        assert more.layer_f - base.layer_f == pytest.approx(1e-3, rel=1e-9)
        assert more.layer_b - base.layer_b == pytest.approx(rerun, abs=1e-12)
    block_costs.cache_clear()
