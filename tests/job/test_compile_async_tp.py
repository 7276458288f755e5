"""torch.compile's fusions (``job.compute.compile_fusion``) and asynchronous TP
(``job.async_tp``) checked by hand: fused traffic and kernels of a Llama layer, the compiled
loss, the pieces-and-copies flow, and bounds against the blocking collectives."""

from __future__ import annotations

import pytest
from llama3_8b import L8

from dlsched.job.cluster import load_cluster
from dlsched.job.communication.async_tp import collective_seconds, flow_end, piece
from dlsched.job.communication.collective_costs import curve
from dlsched.job.compute.block_pricing import KernelOptions, block_ops, ops_seconds
from dlsched.job.compute.compile_fusion import compiled_ops
from dlsched.job.compute.layer_costs import BlockCosts, block_costs, decoder_model, gpu_compute
from dlsched.job.model_spec import Model
from dlsched.models.ops import Op
from dlsched.pipeline.chains.calibrated_chain import block_seconds

SH = 8192 * 4096


def test_eager_block_ops_price_as_the_zoo() -> None:
    """Without compile or FP8, the per-block op lists priced back to back equal the zoo's own
    block pricing (the same model, reached by another path)."""
    model = decoder_model(L8, 1)
    compute = gpu_compute("h100", "bf16")
    forward, backward = block_seconds(model, 2, compute)
    options = KernelOptions()
    ours = [(ops_seconds(ops, 2, compute, options, False),
             ops_seconds(ops, 2, compute, options, True)) for _, ops in block_ops(model, False)]
    assert [f for f, _ in ours] == pytest.approx(list(forward), rel=1e-12)
    assert [b for _, b in ours] == pytest.approx(list(backward), rel=1e-12)


def test_residual_add_and_norm_fuse_by_hand() -> None:
    """A layer compiled: the second residual add joins the next layer's first norm (cyclic),
    the first joins the second norm; each group moves 3.5 + 3 - 2 = 4.5 s h elements (the
    norm's two reads of the sum come from registers); SwiGLU and the GEMMs are untouched."""
    model = decoder_model(L8, 1)
    layer = dict(block_ops(model, True))["h.0"]
    eager = dict(block_ops(model, False))["h.0"]
    fused = [op for op in layer if "+" in op.label]
    assert [op.label for op in fused] == ["bias-dropout-add+h.0.ln_1",
                                          "bias-dropout-add+h.0.ln_2"]
    assert all(op.elements == pytest.approx(4.5 * SH) for op in fused)
    assert all((op.kernels, op.backward_kernels) == (1, 2) for op in fused)
    gemms = [op for op in eager if op.kind != "elementwise"]
    assert [op for op in layer if op.kind != "elementwise"] == gemms
    assert len(layer) == len(eager) - 2


def test_compiled_loss_moves_8_bytes_per_logit() -> None:
    """Megatron's eager FP32 loss: 13 FP32 passes (52 bytes) per logit; compiled: 8 bytes."""
    model = decoder_model(L8, 1)
    head = dict(block_ops(model, True))["ln_f"]
    loss = next(op for op in head if op.label == "cross-entropy")
    logits = 8192 * 128256
    assert 3 * loss.elements * 2 == pytest.approx(8 * logits)  # forward + 2x backward, 2 B
    assert (loss.kernels, loss.backward_kernels, loss.upcast) == (2, 1, False)


def test_compile_makes_a_layer_faster_never_slower() -> None:
    eager = block_costs(L8, 2, "h100", "bf16", 1, False, "none", None, "baseline")
    compiled = block_costs(L8, 2, "h100", "bf16", 1, False, "none", None, "baseline",
                           kernels=KernelOptions(compiled=True))
    assert compiled.layer_f < eager.layer_f and compiled.layer_b < eager.layer_b
    assert compiled.head_f < eager.head_f
    assert compiled_ops((), cyclic=True) == ()


def test_flow_by_hand() -> None:
    """4 pieces of 1 s: copies of 0.5 s hide behind them (4 s); copies of 2 s expose all but
    one piece (all-gather: the local piece, then each piece after its copy: 1 + 3 x 2 = 7;
    reduce-scatter: the last remote copy ends at 1 + 3 x 2 = 7, the local piece inside it)."""
    assert flow_end(1.0, 0.5, 4, gather=True) == pytest.approx(4.0)
    assert flow_end(1.0, 2.0, 4, gather=True) == pytest.approx(7.0)
    assert flow_end(1.0, 0.5, 4, gather=False) == pytest.approx(4.0)
    assert flow_end(1.0, 2.0, 4, gather=False) == pytest.approx(7.0)
    # what it adds beyond the undecomposed 4 s GEMM; the reduce-scatter's sum after it
    assert collective_seconds(4.0, 1.0, 1.5, 0.25, 4, gather=False) == pytest.approx(0.25)
    assert collective_seconds(4.0, 1.0, 6.0, 0.0, 4, gather=True) == pytest.approx(3.0)


def test_piece_is_a_quarter_of_the_rows() -> None:
    op = next(op for layer in decoder_model(L8, 1).layers for op in layer.ops
              if op.label == "h.0.mlp.c_fc")
    part = piece(op, 4)
    assert part.shape == (2048, 28672, 4096, 0)
    assert part.flops == pytest.approx(op.flops / 4) and part.weights == op.weights


def test_async_tp_between_no_communication_and_blocking() -> None:
    """TP 8 with sequence parallelism on one DGX H100: async TP adds less than the blocking
    all-gathers and reduce-scatters and never less than nothing."""
    group = load_cluster("dgx-h100", 8, None).group_topology(1, 8)
    base = block_costs(L8, 2, "h100", "bf16", 8, True, "none", group, "baseline",
                       kernels=KernelOptions(compiled=True))
    overlapped = block_costs(L8, 2, "h100", "bf16", 8, True, "none", group, "baseline",
                             kernels=KernelOptions(compiled=True), async_tp=True)
    message = 2 * 8192 * 4096 * 2
    blocking = 2 * (curve(group, "all-gather", "baseline").seconds(message)
                    + curve(group, "reduce-scatter", "baseline").seconds(message))
    assert base.tp_forward_s == pytest.approx(blocking)
    assert 0.0 <= overlapped.tp_forward_s < blocking
    assert 0.0 <= overlapped.tp_backward_s < base.tp_backward_s
    assert overlapped.layer_f - overlapped.tp_forward_s == pytest.approx(
        base.layer_f - base.tp_forward_s)


def test_summed_input_gradients_stay_blocking() -> None:
    """TorchTitan's Llama: the backward reduce-scatters of the QKV (wq + wk + wv) and gated
    FC1 (w1 + w3) input gradients are not decomposed (Inductor fuses only a matmul feeding a
    reduce-scatter), so each adds the whole blocking collective; a non-gated FFN's FC1 (one
    linear) is decomposed and adds less."""
    from dlsched.job.communication.async_tp import async_tp_exposed, summed_input_gradient

    group = load_cluster("dgx-h100", 8, None).group_topology(1, 8)
    compute = gpu_compute("h100", "bf16", 8, True)
    message = 2 * 8192 * 4096 * 2
    scatter = curve(group, "reduce-scatter", "baseline").seconds(message)

    def gemms_of(spec: Model) -> dict[str, Op]:
        return {op.label: op for layer in decoder_model(spec, 1).layers for op in layer.ops
                if op.kind == "gemm"}

    def seconds(op: Op, back: bool) -> float:  # 0.5 ms per 8192-row GEMM, a piece by its rows
        return 1e-3 * op.shape[0] / 16384

    gated = gemms_of(L8)
    plain = gemms_of(Model("gpt", 32, 4096, 32, 8192, 128256, ffn_hidden=14336))
    assert summed_input_gradient("attn.c_attn", gated) and summed_input_gradient("mlp.c_fc",
                                                                                 gated)
    assert not summed_input_gradient("mlp.c_fc", plain)
    assert not summed_input_gradient("mlp.c_proj", gated)
    _, backward = async_tp_exposed(gated, seconds, 8, message, group, "baseline",
                                   compute.gpu.memory_rate)
    _, backward_plain = async_tp_exposed(plain, seconds, 8, message, group, "baseline",
                                         compute.gpu.memory_rate)
    # the gated model's two summed reduce-scatters are whole; the plain one's FC1 is not
    assert backward >= 2 * scatter
    assert backward_plain < backward


def test_tensorwise_tp_gathers_fp8_inputs() -> None:
    """torchao's float8 TP (tensorwise only): the forward's two all-gathers of the attention's
    and the FFN's inputs and the backward's two of the projection's and FC2's output gradients
    (Float8RowwiseParallel casts the gradient on its shard before the gather) move FP8, half
    the bytes; the reduce-scatters stay 16-bit; rowwise gathers in 16 bits."""
    from dlsched.job.compute.fp8 import tp_gather_fraction

    assert tp_gather_fraction("tensorwise") == 0.5
    assert tp_gather_fraction("rowwise") == tp_gather_fraction(None) == 1.0
    group = load_cluster("dgx-h100", 8, None).group_topology(1, 8)
    message = 2 * 8192 * 4096 * 2

    def costs(precision: str, recipe: str | None) -> BlockCosts:
        return block_costs(L8, 2, "h100", precision, 8, True, "none", group, "baseline",
                           kernels=KernelOptions(fp8_recipe=recipe, compiled=True))

    def seconds(kind: str, size: float) -> float:
        return curve(group, kind, "baseline").seconds(size)

    bf16, tensorwise, rowwise = (costs("bf16", None), costs("fp8", "tensorwise"),
                                 costs("fp8", "rowwise"))
    scatter = seconds("reduce-scatter", message)
    assert bf16.tp_forward_s == pytest.approx(2 * (seconds("all-gather", message) + scatter))
    assert tensorwise.tp_forward_s == pytest.approx(
        2 * (seconds("all-gather", message / 2) + scatter))
    assert bf16.tp_backward_s == pytest.approx(bf16.tp_forward_s)
    assert tensorwise.tp_backward_s == pytest.approx(tensorwise.tp_forward_s)
    assert rowwise.tp_backward_s == pytest.approx(bf16.tp_backward_s)
    assert rowwise.tp_forward_s == pytest.approx(bf16.tp_forward_s)


def test_rowwise_all_gathers_stay_blocking() -> None:
    """Rowwise FP8 quantizes the gathered tensor, so no all-gather feeds a matmul directly:
    the forward's two all-gathers (QKV, FC1) and the backward's two (the projection's and FC2's
    gradients) are whole blocking collectives; the forward's reduce-scatters stay decomposed."""
    from dlsched.job.communication.async_tp import async_tp_exposed

    group = load_cluster("dgx-h100", 8, None).group_topology(1, 8)
    rate = gpu_compute("h100", "bf16", 8, True).gpu.memory_rate
    message = 2 * 8192 * 4096 * 2
    gather = curve(group, "all-gather", "baseline").seconds(message)
    scatter = curve(group, "reduce-scatter", "baseline").seconds(message)
    gemms = {op.label: op for layer in decoder_model(L8, 1).layers for op in layer.ops
             if op.kind == "gemm"}

    def seconds(op: Op, back: bool) -> float:  # GEMMs far longer than any collective
        return 1.0 * op.shape[0] / 8192

    fused_f, fused_b = async_tp_exposed(gemms, seconds, 8, message, group, "baseline", rate)
    forward, backward = async_tp_exposed(gemms, seconds, 8, message, group, "baseline", rate,
                                         gathers_fused=False)
    # GEMMs long enough to hide every decomposed all-gather (a piece is 1/8 of 1 s), so the
    # fused ones add nothing and the blocking ones their whole time
    assert forward - fused_f == pytest.approx(2 * gather)
    assert fused_b == pytest.approx(2 * scatter)  # QKV's and FC1's summed gradients
    assert backward == pytest.approx(2 * gather + 2 * scatter)
