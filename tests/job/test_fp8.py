"""FP8 linear layers in the job evaluator (``job.compute.fp8``): one Llama 3 8B layer's FP8
GEMM seconds and cast bytes computed by hand per recipe, the layer's other ops untouched, the
recipes' checks."""

from __future__ import annotations

from dataclasses import replace

import pytest
from llama3_8b import L8

from dlsched.errors import ConfigError
from dlsched.job.compute.block_pricing import KernelOptions, ops_works
from dlsched.job.compute.fp8 import (
    FP8_RECIPES,
    cast_bytes,
    cast_kernels,
    check_fp8,
    fp8_gemm_seconds,
    fp8_linear_work,
    fp8_weight_bytes,
    input_casts,
    is_fp8_linear,
    operand_elements,
    producer_fused,
    rescale_fused,
    separate_linears,
)
from dlsched.job.compute.layer_costs import (
    block_costs,
    decoder_model,
    gpu_compute,
    separate_linears_seconds,
)
from dlsched.models.kernels import gemm_utilization
from dlsched.models.ops import Op

B = 2  # microbatch size
TOKENS = B * 8192


def _layer_ops() -> dict[str, object]:
    model = decoder_model(L8, 1)
    return {op.label: op for layer in model.layers if layer.block == "h.0" for op in layer.ops}


def test_the_four_linears_run_in_fp8_the_core_and_head_do_not() -> None:
    model = decoder_model(L8, 1)
    fp8 = sorted(op.label for layer in model.layers for op in layer.ops if is_fp8_linear(op))
    assert fp8 == ["h.0.attn.c_attn", "h.0.attn.c_proj", "h.0.mlp.c_fc", "h.0.mlp.c_proj"]


def test_fc1_operands_by_hand_column_and_row_parallel() -> None:
    """FC1 (column-parallel, 4096 -> 2 x 14336) and FC2 (row-parallel, 14336 -> 4096) at TP 4:
    FC1's input is the whole gathered activation, its gradient a quarter; FC2 the other way."""
    ops = _layer_ops()
    assert operand_elements(ops["h.0.mlp.c_fc"], B, 4) == (
        TOKENS * 4096, 4096 * 28672 / 4, TOKENS * 28672 / 4)
    assert operand_elements(ops["h.0.mlp.c_proj"], B, 4) == (
        TOKENS * 14336 / 4, 14336 * 4096 / 4, TOKENS * 4096)


@pytest.mark.parametrize(("recipe", "compiled", "forward", "backward"), [
    # per element: input x, weight w (TE: once per 8 microbatches), gradient g
    ("delayed", False, lambda x, w: 4 * x + 4 * w / 8, lambda x, w, g: 4 * g),
    ("current", False, lambda x, w: 6 * x + 6 * w / 8, lambda x, w, g: 6 * g),
    ("mxfp8", False, lambda x, w: (2 + 2 * 33 / 32) * (x + w / 8),
     lambda x, w, g: (2 + 2 * 33 / 32) * g),
    ("tensorwise", True, lambda x, w: 4 * x + 8 * w, lambda x, w, g: 4 * g),
    ("tensorwise", False, lambda x, w: 6 * x + 8 * w, lambda x, w, g: 6 * g),
    ("rowwise", True, lambda x, w: 6 * x + 10 * w, lambda x, w, g: 6 * g + 4 * (x + w)),
    ("rowwise", False, lambda x, w: 8 * x + 10 * w, lambda x, w, g: 8 * g + 4 * (x + w)),
    # rowwise_with_gw_hp: X and G once along their rows (write 1; read 2 eager), the weight
    # 3 (axiswise) + 2 (amax) + 3 (tensorwise cast-transpose); only dX rescaled (read 2 write 2)
    ("rowwise_with_gw_hp", True, lambda x, w: 1 * x + 8 * w, lambda x, w, g: 1 * g + 4 * x),
    ("rowwise_with_gw_hp", False, lambda x, w: 3 * x + 8 * w, lambda x, w, g: 3 * g + 4 * x),
])
def test_cast_bytes_of_fc1_by_hand(recipe, compiled, forward, backward) -> None:
    op = _layer_ops()["h.0.mlp.c_fc"]
    x, w, g = TOKENS * 4096, 4096 * 28672, TOKENS * 28672
    assert cast_bytes(op, B, 1, recipe, False, compiled, 8) == pytest.approx(forward(x, w))
    assert cast_bytes(op, B, 1, recipe, True, compiled, 8) == pytest.approx(backward(x, w, g))


def test_fsdp_float8_all_gather_casts_the_weight_on_its_shard() -> None:
    """Tensorwise with the FP8 all-gather over 8 ranks: the shard's amax and cast (2 + 2 + 1
    bytes per shard element), the gathered FP8 weight's column-major copy (1 + 1)."""
    op = _layer_ops()["h.0.mlp.c_fc"]
    x, w = TOKENS * 4096, 4096 * 28672
    assert cast_bytes(op, B, 1, "tensorwise", False, True, 1, 8) == pytest.approx(
        4 * x + 5 * w / 8 + 2 * w)


def test_fc1_fp8_work_by_hand_delayed() -> None:
    """FC1 forward on an H100 in FP8: 2 x 16384 x 28672 x 4096 FLOP at 1978.9 TFLOP/s x the
    fp8 GEMM fraction x the tile utilization of (16384, 28672, 4096), plus 4 x (x + w / 8) cast
    bytes at the memory rate."""
    op = _layer_ops()["h.0.mlp.c_fc"]
    bf16 = gpu_compute("h100", "fp8")
    fp8 = replace(bf16, precision="fp8", autocast=False)
    gpu = fp8.gpu
    flops = 2 * TOKENS * 28672 * 4096
    rate = 1978.9e12 * gpu.efficiency("gemm", "fp8") * gemm_utilization(
        TOKENS, 28672, 4096, 1, gpu.spec.sms)
    moved = 4 * (TOKENS * 4096 + 4096 * 28672 / 8)
    work = fp8_linear_work(op, B, fp8, "delayed", False, False, 8)
    assert work.gpu_s == pytest.approx(flops / rate + moved / gpu.memory_rate)
    assert flops / rate > (TOKENS * (4096 + 28672) * 2 + 4096 * 28672) / gpu.memory_rate


def test_rowwise_with_gw_hp_runs_its_weight_gradient_in_bf16_by_hand() -> None:
    """FC1's backward on an H100 under rowwise_with_gw_hp (torchao 4fc4068d6's
    Float8LinearConfig for it: grad_weight = input_t_hp @ grad_output_hp): the data gradient
    (16384 x 4096, inner 28672) at the FP8 rate, the weight gradient (28672 x 4096, inner
    16384) at the bf16 one, each 2 x 16384 x 28672 x 4096 FLOP at its shape's utilization;
    casts compiled: g + 4x bytes (G once along its rows, dX rescaled) at the memory rate, 2
    kernels (G's cast, dX's rescale) beyond the GEMMs'. Rowwise runs both GEMMs in FP8."""
    op = _layer_ops()["h.0.mlp.c_fc"]
    bf16 = gpu_compute("h100", "fp8")
    fp8 = replace(bf16, precision="fp8", autocast=False)
    gpu, sms = fp8.gpu, fp8.gpu.spec.sms
    flops = 2 * TOKENS * 28672 * 4096
    data = flops / (1978.9e12 * gpu.efficiency("gemm", "fp8")
                    * gemm_utilization(TOKENS, 4096, 28672, 1, sms))
    weight = flops / (989.4e12 * gpu.efficiency("gemm", "bf16")
                      * gemm_utilization(28672, 4096, TOKENS, 1, sms))
    x, g = TOKENS * 4096, TOKENS * 28672
    work = fp8_linear_work(op, B, fp8, "rowwise_with_gw_hp", True, True)
    assert work.gpu_s == pytest.approx(data + weight + (g + 4 * x) / gpu.memory_rate)
    assert work.launches == op.launches_backward + 2
    fp8_weight = flops / (1978.9e12 * gpu.efficiency("gemm", "fp8")
                          * gemm_utilization(28672, 4096, TOKENS, 1, sms))
    assert fp8_gemm_seconds(op, B, fp8, "rowwise", True) == pytest.approx(data + fp8_weight)
    assert fp8_gemm_seconds(op, B, fp8, "rowwise_with_gw_hp", False) == \
        fp8_gemm_seconds(op, B, fp8, "rowwise", False)
    assert separate_linears(_layer_ops()["h.0.attn.c_attn"], "rowwise_with_gw_hp", True) == 3


@pytest.mark.parametrize("recipe", ["delayed", "current", "tensorwise", "rowwise",
                                    "rowwise_with_gw_hp"])
def test_a_layer_in_fp8_is_the_bf16_layer_with_its_linears_replaced(recipe: str) -> None:
    """Everything but the four linears is priced as in bf16: the FP8 layer's forward and
    backward differ from the bf16 layer's by exactly the linears' difference (GPU-bound), the
    linears on both sides as TorchTitan's separate ones at their own shapes (compiled:
    ``layer_costs.torch_linears``; FP8's each its own FP8 GEMM, the casts ``job.compute.fp8``'s)."""
    options = KernelOptions(recipe, compiled=True, microbatches=4)
    plain = KernelOptions(compiled=True)
    compute = gpu_compute("h100", "fp8")
    fp8 = block_costs(L8, B, "h100", "fp8", 1, False, "none", None, "baseline", kernels=options)
    bf16 = block_costs(L8, B, "h100", "bf16", 1, False, "none", None, "baseline", kernels=plain)
    layer = list(_layer_ops().values())  # the whole layer: its SwiGLU says the FFN is gated
    linears = [i for i, op in enumerate(layer) if is_fp8_linear(op)]
    split = separate_linears_seconds(decoder_model(L8, 1), L8, B, gpu_compute("h100", "bf16"))
    split8 = separate_linears_seconds(decoder_model(L8, 1), L8, B, compute, options)
    assert split8[0] > 0 and split8[1] > 0  # wk, wv: small N, each reading the whole input
    for backward, fp8_s, bf16_s in ((False, fp8.layer_f - split8[0], bf16.layer_f - split[0]),
                                    (True, fp8.layer_b - split8[1], bf16.layer_b - split[1])):
        new_works = ops_works(layer, B, compute, options, backward)
        old_works = ops_works(layer, B, compute, plain, backward)
        new = sum(new_works[i].gpu_s for i in linears)
        old = sum(old_works[i].gpu_s for i in linears)
        assert fp8_s - bf16_s == pytest.approx(new - old, rel=1e-9)
        assert fp8_s < bf16_s  # at this shape FP8 pays for its casts
    assert (fp8.head_f, fp8.core_f) == (bf16.head_f, bf16.core_f)


def test_rowwise_quantizes_a_shared_input_once_per_torchtitan_linear() -> None:
    """Rowwise (no float8 TP input preparation in TorchTitan) casts the QKV input for wq, wk
    and wv and the gated FFN's input for w1 and w3, and rescales each one's data gradient:
    against one linear, eager, forward 2 x 8 bytes more per input element of QKV (amax read 2,
    FP8 rows 1, bf16 transposed copy 2 + 2, FP8 columns 1); compiled, AOTAutograd's CSE leaves
    one cast (0 more; benchmarks/inductor_rowwise_casts.py); backward, eager, 2 x 4 bytes more
    (each data gradient rescaled: read 2, write 2); compiled none, and a lone QKV's own rescale
    pass (4 bytes) is gone too (the rescales fused into the kernel summing the linears' input
    gradients: ``rescale_fused``); tensorwise and the projections stay at one."""
    ops = _layer_ops()
    qkv, fc1, proj = ops["h.0.attn.c_attn"], ops["h.0.mlp.c_fc"], ops["h.0.attn.c_proj"]
    assert [separate_linears(op, "rowwise", True) for op in (qkv, fc1, proj)] == [3, 2, 1]
    assert separate_linears(fc1, "rowwise", False) == 1
    assert separate_linears(qkv, "tensorwise", True) == 1
    assert (input_casts(3, False), input_casts(3, True), input_casts(1, False)) == (3, 1, 1)
    x = TOKENS * 4096  # the QKV input's elements at TP 1
    for compiled, more in ((False, 2 * 8 * x), (True, 0.0)):
        forward = [cast_bytes(qkv, B, 1, "rowwise", False, compiled, linears=n) for n in (1, 3)]
        backward = [cast_bytes(qkv, B, 1, "rowwise", True, compiled, linears=n) for n in (1, 3)]
        assert forward[1] - forward[0] == pytest.approx(more)
        # eager: two more rescales; compiled: a lone QKV's rescale is its own pass (4 x),
        # three separate linears' are fused into their gradients' sum (0)
        assert backward[1] - backward[0] == pytest.approx(-4 * x if compiled else 2 * 4 * x)
        kernels = [cast_kernels("rowwise", False, compiled, linears=n) for n in (1, 3)]
        assert kernels[1] - kernels[0] == (0 if compiled else 2 * 2)


def test_rowwise_is_slower_than_tensorwise_and_te_caches_weights() -> None:
    costs = {r: block_costs(L8, B, "h100", "fp8", 1, False, "none", None, "baseline",
                            kernels=KernelOptions(r, True, 8)).layer_b
             for r in ("delayed", "tensorwise", "rowwise")}
    assert costs["tensorwise"] < costs["rowwise"]
    # the cached weight: fewer cast bytes per microbatch with more microbatches
    one = block_costs(L8, B, "h100", "fp8", 1, False, "none", None, "baseline",
                      kernels=KernelOptions("delayed", True, 1)).layer_f
    eight = block_costs(L8, B, "h100", "fp8", 1, False, "none", None, "baseline",
                        kernels=KernelOptions("delayed", True, 8)).layer_f
    assert eight < one


def test_fp8_weight_copies_by_recipe() -> None:
    """TE's per-tensor FP8 weight and its transpose, 1 byte each; on Blackwell (FP8 GEMMs in
    any layout) no transpose; MXFP8's two copies with a scale per 32 elements on any GPU;
    torchao's casts transient."""
    assert fp8_weight_bytes("delayed", 1000) == 2000
    assert fp8_weight_bytes("current", 1000, "h100") == 2000
    assert fp8_weight_bytes("current", 1000, "b200") == 1000
    assert fp8_weight_bytes("mxfp8", 3200) == pytest.approx(2 * 3300)
    assert fp8_weight_bytes("mxfp8", 3200, "gb200") == pytest.approx(2 * 3300)
    assert fp8_weight_bytes("tensorwise", 1000) == 0


@pytest.mark.parametrize(("precision", "recipe", "gpu", "peaks", "field"), [
    ("bf16", "delayed", "h100", {"fp8": 1}, "fp8_recipe"),
    ("fp8", None, "h100", {"fp8": 1}, "fp8_recipe"),
    ("fp8", "nonsense", "h100", {"fp8": 1}, "fp8_recipe"),
    ("fp8", "delayed", "a100", {"bf16": 1}, "precision"),
    ("fp8", "mxfp8", "h100", {"fp8": 1}, "fp8_recipe"),
])
def test_refused_with_the_field(precision, recipe, gpu, peaks, field) -> None:
    with pytest.raises(ConfigError, match=f"^{field}: ") as refused:
        check_fp8(precision, recipe, gpu, peaks)
    assert refused.value.field == field


def test_every_recipe_accepted_where_it_runs() -> None:
    for recipe in FP8_RECIPES:
        gpu = "b200" if recipe in ("mxfp8", "nvfp4") else "h100"
        peaks = {"fp8": 1, "fp4": 1} if gpu == "b200" else {"fp8": 1}
        assert check_fp8("fp8", recipe, gpu, peaks) == recipe
    assert check_fp8("bf16", None, "a100", {}) is None


def _plan(**fields):
    from dlsched.job.scenario import PlanScenario

    base = {"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 8, "global_batch": 16,
            "tp": 1, "pp": 1, "zero": 3, "microbatch_size": 2, "recompute": "selective-op",
            "baselines": False}
    row, = PlanScenario(**{**base, **fields}).run().rows
    return row


@pytest.mark.parametrize("recipe", ["delayed", "current", "tensorwise", "rowwise"])
def test_plan_in_fp8_is_faster_than_bf16_on_h100(recipe: str) -> None:
    bf16 = _plan(precision="bf16", microbatch_size=1)
    fp8 = _plan(precision="fp8", fp8_recipe=recipe, microbatch_size=1)
    assert fp8["iteration_s"] < bf16["iteration_s"]
    assert fp8["precision"] == "fp8"


def test_plan_fp8_refused_on_a100_and_without_a_recipe() -> None:
    with pytest.raises(ConfigError, match=r"^precision: fp8 needs FP8 tensor cores") as refused:
        _plan(cluster="dgx-a100", precision="fp8", fp8_recipe="delayed")
    assert refused.value.field == "precision"
    with pytest.raises(ConfigError, match=r"^fp8_recipe: needed with --precision fp8"):
        _plan(precision="fp8")
    with pytest.raises(ConfigError, match=r"^fp8_all_gather: "):
        _plan(precision="fp8", fp8_recipe="delayed", fp8_all_gather=True)
    with pytest.raises(ConfigError, match=r"^async_tp: needs --compile"):
        _plan(async_tp=True)


def test_te_keeps_fp8_weight_copies_in_memory() -> None:
    """Delayed scaling keeps each linear's FP8 weight and its transpose: 2 bytes per linear
    parameter of the rank's 32 layers on top of bf16's weights; tensorwise keeps none."""
    bf16, te, ao = (_plan(precision=p, fp8_recipe=r, microbatch_size=1)
                    for p, r in (("bf16", None), ("fp8", "delayed"), ("fp8", "tensorwise")))
    linear = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336
    assert (te["memory_weights_gib"] - bf16["memory_weights_gib"]) * 2**30 == pytest.approx(
        2 * 32 * linear)
    assert ao["memory_weights_gib"] == pytest.approx(bf16["memory_weights_gib"])


def test_search_counts_fp8_weight_copies_when_it_checks_memory() -> None:
    """The search's memory check holds TE's FP8 weight copies as the plan's memory does: on 8
    H100s at sequence 8,192 FSDP over 8 GPUs needs 64.1 GiB in bf16 weights and activations,
    and delayed scaling's copies (2 bytes per linear parameter, 13 GiB for Llama 3 8B) take
    it past what an 80 GiB GPU leaves; the plan the search returns fits with them (FSDP alone
    only with some recomputation: Megatron-Core's block recomputation of a few layers, say)."""
    row = _plan(precision="fp8", fp8_recipe="delayed", seq=8192, tp=None, pp=None,
                zero=None, microbatch_size=None, recompute=None)
    assert not [note for note in row["notes"] if note.startswith("needs ")]
    assert not (row["tp"] == 1 and row["pp"] == 1 and row["recompute"] == "none")


def test_rowwise_gathered_operands_read_their_amax_even_compiled() -> None:
    """Rowwise under TP 8 with sequence parallelism, compiled: QKV's gathered input (forward)
    and the projection's gathered output gradient (backward) are cast from the all-gather's
    bf16 output, so their amax reads 2 bytes per element (8 in all, against 6 fused into the
    producer); the projection's input and QKV's output gradient keep 6. Tensorwise casts
    before the gather (fused: 4)."""
    ops = _layer_ops()
    qkv, proj = ops["h.0.attn.c_attn"], ops["h.0.attn.c_proj"]
    assert not producer_fused("rowwise", True)
    assert producer_fused("rowwise", False) and producer_fused("tensorwise", True)
    x_qkv = operand_elements(qkv, B, 8)[0]
    g_proj = operand_elements(proj, B, 8)[2]

    def activation(op: Op, backward: bool, recipe: str, sp: bool) -> float:
        return cast_bytes(op, B, 8, recipe, backward, True, sequence_parallel=sp)
    # the weight's casts are the same with or without SP: compare differences
    assert (activation(qkv, False, "rowwise", True) - activation(qkv, False, "rowwise", False)
            == pytest.approx(2 * x_qkv))
    assert (activation(proj, True, "rowwise", True) - activation(proj, True, "rowwise", False)
            == pytest.approx(2 * g_proj))
    assert activation(proj, False, "rowwise", True) == activation(proj, False, "rowwise", False)
    assert activation(qkv, True, "rowwise", True) == activation(qkv, True, "rowwise", False)
    assert (activation(qkv, False, "tensorwise", True)
            == activation(qkv, False, "tensorwise", False))


def test_rowwise_rescales_fused_where_inductor_consumes_them() -> None:
    """Compiled: the separate linears' and FC2's data-gradient rescales are fused into their
    consumers (no bytes, one kernel fewer per linear); the projection's (feeding SDPA's
    backward) and every eager one stay a pass of 4 bytes per input element."""
    ops = _layer_ops()
    qkv, proj, fc2 = ops["h.0.attn.c_attn"], ops["h.0.attn.c_proj"], ops["h.0.mlp.c_proj"]
    assert rescale_fused(qkv, True, 3) and rescale_fused(fc2, True, 1)
    assert not rescale_fused(qkv, True, 1) and not rescale_fused(proj, True, 1)
    assert not rescale_fused(fc2, False, 1)
    for op in (proj, fc2):
        x, _, g = operand_elements(op, B, 1)
        eager = cast_bytes(op, B, 1, "rowwise", True, False)
        compiled = cast_bytes(op, B, 1, "rowwise", True, True)
        fused = rescale_fused(op, True, 1)
        # and the output gradient's amax, fused into its producer compiled (2 bytes)
        assert eager - compiled == pytest.approx(2 * g + (4 * x if fused else 0.0))
        assert (cast_kernels("rowwise", True, True, op=op)
                == cast_kernels("rowwise", True, False, op=op) - (1 if fused else 0))
