"""Sequence parallelism's re-layout copies under PyTorch's functional collectives
(``job.communication.sp_relayout``), by hand on Llama 3 8B at TP 8, local batch 12."""

from __future__ import annotations

import pytest
from llama3_8b import L8

from dlsched.job.cluster import load_cluster
from dlsched.job.communication.collective_costs import curve
from dlsched.job.communication.sp_relayout import relayout_bytes, relayout_seconds
from dlsched.job.compute import layer_costs
from dlsched.job.compute.block_pricing import KernelOptions
from dlsched.job.compute.eager_ops import separate_linears, summed_gradient_bytes
from dlsched.job.compute.layer_costs import (
    block_costs,
    decoder_model,
    gpu_compute,
    separate_linears_seconds,
)
from dlsched.job.compute.op_checkpoint import recomputed_ops

MESSAGE = 12 * 8192 * 4096 * 2  # 805,306,368 bytes: the gathered bf16 activation


def test_vanilla_per_op_checkpointing_by_hand() -> None:
    """Vanilla TP, bf16, per-op SAC: forward 2 gathers + 2 scatters, backward 4 + the 2 reruns
    of the gathers: 4 and 6 copies of 805 MB, each read and written (6.44 and 9.66 GB); at
    2.208 TB/s (torchao's 0.92 of 2.4 TB/s) 2.92 + 4.38 = 7.30 ms per layer."""
    forward, backward = relayout_bytes(MESSAGE, MESSAGE, 12, "selective-op")
    assert forward == 8 * MESSAGE == 6_442_450_944
    assert backward == 12 * MESSAGE == 9_663_676_416
    f_s, b_s = relayout_seconds(MESSAGE, MESSAGE, 12, "selective-op", 2.208e12)
    assert f_s + b_s == pytest.approx(7.295e-3, rel=1e-3)


def test_local_batch_one_gathers_a_view() -> None:
    """``_maybe_view_chunk_cat`` returns a view when the batch dimension is 1: the all-gathers
    copy nothing, the reduce-scatters' ``torch.cat`` still does: forward 2, backward 2 + the
    attention's reduce-scatter rerun under compiled full AC (3), of one sequence's buffer."""
    one = MESSAGE / 12
    assert relayout_bytes(one, one, 1, "full") == (4 * one, 6 * one)
    assert relayout_bytes(one, one, 1, "selective-op") == (4 * one, 4 * one)
    with pytest.raises(ValueError, match="microbatch_size"):
        relayout_bytes(one, one, 0, "none")


def test_the_counts_read_off_inductor_by_hand() -> None:
    """Per Llama layer (M = 805 MB): vanilla full AC compiled, tensorwise gathers of M / 2
    (inputs forward, output gradients backward): forward 2 x 0.5 + 2 = 3 M, backward
    2 x 0.5 + 2 + rerun (2 x 0.5 + 1) = 5 M; eager full AC reruns
    the whole forward (4 + 4 = 8 M, bf16). Async with fused gathers: forward nothing under
    checkpointing (2 M re-laid to save the gathered inputs without it), backward 4 M + the
    recomputed inputs re-laid for the weight gradients (2 M). Rowwise async (gathers plain):
    forward 2 M, backward 4 + 2 M. Every copy read and written (x 2)."""
    half = MESSAGE / 2
    assert relayout_bytes(MESSAGE, half, 12, "full") == (6 * MESSAGE, 10 * MESSAGE)
    assert relayout_bytes(MESSAGE, MESSAGE, 12, "full", compiled=False) == (
        8 * MESSAGE, 16 * MESSAGE)
    assert relayout_bytes(MESSAGE, MESSAGE, 12, "full", async_tp=True) == (0.0, 12 * MESSAGE)
    assert relayout_bytes(MESSAGE, MESSAGE, 12, "none", async_tp=True) == (
        4 * MESSAGE, 8 * MESSAGE)
    assert relayout_bytes(MESSAGE, MESSAGE, 12, "selective-op", async_tp=True,
                          gathers_fused=False) == (4 * MESSAGE, 12 * MESSAGE)
    with pytest.raises(ValueError, match="memory_rate"):
        relayout_seconds(MESSAGE, MESSAGE, 12, "none", 0.0)


def test_compiled_full_recomputation_reruns_no_ffn_reduce_scatter() -> None:
    """TP 8 with SP, full AC: eager checkpointing reruns the forward's exchanges (2 all-gathers
    + 2 reduce-scatters); compiled, AOTAutograd's partitioner reruns the 2 all-gathers and the
    attention's reduce-scatter only (the FFN's output is not needed by the backward)."""
    group = load_cluster("dgx-h100", 8, None).group_topology(1, 8)
    args = (L8, 12, "h100", "bf16", 8, True, "full", group, "baseline")
    gather = curve(group, "all-gather", "baseline").seconds(MESSAGE)
    scatter = curve(group, "reduce-scatter", "baseline").seconds(MESSAGE)
    eager = block_costs(*args, kernels=KernelOptions())
    compiled = block_costs(*args, kernels=KernelOptions(compiled=True))
    assert eager.tp_backward_s == pytest.approx(4 * (gather + scatter))
    assert compiled.tp_backward_s == pytest.approx(4 * gather + 3 * scatter)
    assert compiled.tp_forward_s == pytest.approx(eager.tp_forward_s)
    no_sp = (L8, 12, "h100", "bf16", 8, False, "full", group, "baseline")
    reduce = curve(group, "all-reduce", "baseline").seconds(MESSAGE)
    assert block_costs(*no_sp, kernels=KernelOptions()).tp_backward_s == pytest.approx(
        4 * reduce)
    assert block_costs(*no_sp, kernels=KernelOptions(compiled=True)).tp_backward_s == \
        pytest.approx(3 * reduce)  # without SP: the attention's all-reduce again, not the FFN's
    fused = KernelOptions(compiled=True)
    plain = block_costs(L8, 12, "h100", "bf16", 8, True, "none", group, "baseline",
                        kernels=fused, async_tp=True)
    full = block_costs(*args, kernels=fused, async_tp=True)
    rerun = full.tp_backward_s - plain.tp_backward_s  # the three decomposed pairs again
    assert 0.0 < rerun < full.tp_forward_s


def test_block_costs_add_the_copies_to_eager_ops_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """TorchTitan's modules (``ops`` eager) under SP: the layer's forward and backward grow by
    exactly ``relayout_seconds`` at the GPU's memory rate (the layer priced again with the
    copies taken out); Megatron's fused ops (its collectives need no re-layout) unchanged."""
    group = load_cluster("dgx-h100", 8, None).group_topology(1, 8)
    args = (L8, 12, "h100", "bf16", 8, True, "selective-op", group, "baseline")
    rate = gpu_compute("h100", "bf16", 8, True).gpu.memory_rate
    copy_f, copy_b = relayout_seconds(MESSAGE, MESSAGE, 12, "selective-op", rate)
    eager, fused = KernelOptions(compiled=True, ops="eager"), KernelOptions(compiled=True)
    block_costs.cache_clear()
    with_copies, fused_before = block_costs(*args, kernels=eager), block_costs(*args, kernels=fused)
    monkeypatch.setattr(layer_costs, "relayout_seconds", lambda *a, **k: (0.0, 0.0))
    block_costs.cache_clear()
    without, fused_after = block_costs(*args, kernels=eager), block_costs(*args, kernels=fused)
    block_costs.cache_clear()
    assert with_copies.layer_f - without.layer_f == pytest.approx(copy_f, rel=1e-9)
    assert with_copies.layer_b - without.layer_b == pytest.approx(copy_b, rel=1e-9)
    assert copy_f == pytest.approx(8 * MESSAGE / rate)
    assert fused_before == fused_after


def test_separate_linears_gradient_sums_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    """wq + wk + wv and w1 + w3 input gradients summed per layer, E elements each: compiled
    one kernel each, reading 3 (2) and writing 1: (4 + 3) x 2 B = 14 E; eager 2 (1) in-place
    adds of 6 B: 18 E. 8B TP 8 local batch 12 (E = 402,653,184 gathered elements): 5.64 GB,
    2.55 ms at 2.208 TB/s, added to the layer's backward only, for eager ops only."""
    elements = MESSAGE / 2
    assert summed_gradient_bytes(elements, True) == 14 * elements == 5_637_144_576
    assert summed_gradient_bytes(elements, False) == 18 * elements
    group = load_cluster("dgx-h100", 8, None).group_topology(1, 8)
    args = (L8, 12, "h100", "bf16", 8, True, "none", group, "baseline")
    eager = KernelOptions(compiled=True, ops="eager")
    rate = gpu_compute("h100", "bf16", 8, True).gpu.memory_rate
    block_costs.cache_clear()
    with_sums = block_costs(*args, kernels=eager)
    monkeypatch.setattr(layer_costs, "summed_gradient_bytes", lambda *a, **k: 0.0)
    block_costs.cache_clear()
    without = block_costs(*args, kernels=eager)
    block_costs.cache_clear()
    assert with_sums.layer_f == without.layer_f
    assert with_sums.layer_b - without.layer_b == pytest.approx(14 * elements / rate, rel=1e-9)


def test_compiled_per_op_checkpointing_under_sp_reruns_no_projection() -> None:
    """TorchTitan's per-op policy recomputes wk, wo and w3 eagerly; compiled under SP, wo's
    output feeds only the kept reduce-scatter, so the partitioner drops it: wk and w3 (bf16),
    and of the FP8 linears every one before w2 but the projection."""
    ops = tuple(op for item in decoder_model(L8, 1).layers if item.block == "h.0"
                for op in item.ops)
    eager = [op.label for op in recomputed_ops(L8, ops, 8192) if op.kind == "gemm"]
    compiled = [op.label for op in recomputed_ops(L8, ops, 8192, compiled_sp=True)
                if op.kind == "gemm"]
    assert eager == ["wk", "wo", "w3"] and compiled == ["wk", "w3"]
    fp8 = [op.label.rsplit(".", 2)[-2:] for op in
           recomputed_ops(L8, ops, 8192, fp8=True, compiled_sp=True) if op.kind == "gemm"]
    assert fp8 == [["attn", "c_attn"], ["mlp", "c_fc"]]


def test_separate_linears_at_their_own_shapes_by_hand() -> None:
    """Llama 3 8B: QKV as wq (4096 wide), wk and wv (1024 each), FC1 as w1 and w3 (14336 each),
    labelled as the fused GEMM. At TP 8 with SP, local batch 12, wk is 128 wide per rank and
    memory-bound: (98304 x (4096 + 128) + 4096 x 128) x 2 bytes at the memory rate, and the
    separate linears cost more than the fused ones, forward and backward."""
    layer = [op for item in decoder_model(L8, 1).layers if item.block == "h.0"
             for op in item.ops if op.kind == "gemm"]
    qkv = next(op for op in layer if op.label.endswith("attn.c_attn"))
    parts = separate_linears(qkv, L8)
    assert [op.shape[1] for op in parts] == [4096, 1024, 1024]
    assert {op.label for op in parts} == {qkv.label}
    fc1 = next(op for op in layer if op.label.endswith("mlp.c_fc"))
    assert [op.shape[1] for op in separate_linears(fc1, L8)] == [14336, 14336]
    compute = gpu_compute("h100", "bf16", 8, True)
    wk = compute.work(parts[1], 12, False).gpu_s
    assert wk == pytest.approx((98304 * (4096 + 128) + 4096 * 128) * 2
                               / compute.gpu.memory_rate)
    extra_f, extra_b = separate_linears_seconds(decoder_model(L8, 1), L8, 12, compute)
    assert extra_f > 0 and extra_b > 0
