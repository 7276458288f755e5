"""TorchTitan's eager Llama ops (``job.compute.eager_ops``) by hand on one layer: the bytes and
launches of eager RMSNorm, rotary, repeat_kv, SwiGLU and the residual additions, Inductor's
groups of them, the layer's seconds, and the kernel lists against what torch dispatches."""

from __future__ import annotations

import pytest

from dlsched.errors import ConfigError
from dlsched.job.compute.block_pricing import KernelOptions, block_ops, ops_seconds
from dlsched.job.compute.eager_ops import (
    RMS_NORM,
    ROTARY,
    SWIGLU,
    check_ops,
    repeat_kv,
    torch_ops,
)
from dlsched.job.compute.layer_costs import decoder_model, gpu_compute
from dlsched.job.model_spec import Model, load_spec

L8 = load_spec("llama3-8b")
SH = 8192 * 4096  # tokens x hidden per sample
FH = 8192 * 14336  # tokens x FFN width
KV = 8192 * 8 * 128  # tokens x key width


def layer(compiled: bool) -> dict[str, object]:
    model = decoder_model(L8, 1)
    return {op.label: op for op in dict(block_ops(model, compiled, "eager", L8))["h.0"]}


def test_eager_rms_norm_bytes_and_launches_by_hand() -> None:
    """Forward: cast 2+4, pow 4+4, mean 4, mul 4+4, cast 4+2, weight 2+2 = 36 B per element in
    8 kernels (eps, rsqrt per row); backward 92 B in 16 kernels; as Op: 18 and 46 two-byte
    elements per s h."""
    assert (RMS_NORM.bytes(False), RMS_NORM.launches(False)) == (36, 8)
    assert (RMS_NORM.bytes(True), RMS_NORM.launches(True)) == (92, 16)
    norm = layer(False)["h.0.ln_1"]
    assert norm.elements == pytest.approx(18 * SH)
    assert norm.backward_elements == pytest.approx(46 * SH)
    assert (norm.kernels, norm.backward_kernels, norm.split) == (8, 16, False)


def test_eager_rotary_swiglu_repeat_and_residual_by_hand() -> None:
    """Rotary 20 B both ways (3 / 4 kernels) on 32 query and 8 key heads of 128; repeat_kv
    x4 copies keys and values: 2 + 8 B per key element; SwiGLU 10 / 18 B per FFN element;
    each residual addition 6 B forward, its fork's gradient sum 6 B backward."""
    ops = layer(False)
    assert (ROTARY.bytes(False), ROTARY.bytes(True)) == (20, 20)
    assert ops["rotary-q"].elements == pytest.approx(10 * SH)
    assert ops["rotary-k"].elements == pytest.approx(10 * KV)
    assert repeat_kv(4).bytes(False) == repeat_kv(4).bytes(True) == 10
    assert ops["repeat_kv-v"].elements == pytest.approx(5 * KV)
    assert (SWIGLU.bytes(False), SWIGLU.bytes(True)) == (10, 18)
    swiglu = ops["swiglu:silu*mul"]
    assert (swiglu.elements, swiglu.backward_elements) == pytest.approx((5 * FH, 9 * FH))
    assert (swiglu.kernels, swiglu.backward_kernels) == (2, 3)
    assert ops["residual"].elements == ops["residual"].backward_elements == pytest.approx(3 * SH)
    gemms = [op for op in decoder_model(L8, 1).layers[1].ops]
    assert gemms[0].label == "h.0.ln_1"  # the zoo's own norm: 3 passes, 1 kernel
    assert gemms[0].elements == pytest.approx(3 * SH)


def test_compiled_groups_by_hand() -> None:
    """Compiled: addition + norm one kernel, 8 B forward (read 2 + 2, write 2 + 2) and 12 B
    backward in 2 kernels; rotary 20 B per query element as eager (Inductor leaves the complex
    product to ATen); the keys' rotation with their 4 copies 6 + 8 + 12 = 26 B forward in two
    launches (the cast back and copies in the queries' kernel), 12 + 8 + 6 = 26 B backward in
    three; the values' copy 10 B in no launch of its own, its sum 10 B in one; SwiGLU 6 / 10
    B; the GEMMs and attention as eager."""
    ops = layer(True)
    eager = layer(False)
    for norm in ("add+h.0.ln_1", "add+h.0.ln_2"):
        assert ops[norm].elements == pytest.approx(4 * SH)
        assert ops[norm].backward_elements == pytest.approx(6 * SH)
        assert (ops[norm].kernels, ops[norm].backward_kernels) == (1, 2)
    assert ops["rotary-q"].elements == ops["rotary-q"].backward_elements == pytest.approx(10 * SH)
    keys = ops["rotary-k+repeat_kv"]
    assert keys.elements == keys.backward_elements == pytest.approx(13 * KV)
    assert (keys.kernels, keys.backward_kernels) == (2, 3)
    values = ops["repeat_kv-v"]
    assert values.elements == values.backward_elements == pytest.approx(5 * KV)
    assert (values.kernels, values.backward_kernels) == (0, 1)
    assert ops["swiglu:silu*mul"].elements == pytest.approx(3 * FH)
    assert ops["swiglu:silu*mul"].backward_elements == pytest.approx(5 * FH)
    assert "residual" not in ops
    assert [k for k, op in ops.items() if op.kind != "elementwise"] == \
        [k for k, op in eager.items() if op.kind != "elementwise"]


def test_eager_layer_seconds_by_hand() -> None:
    """The eager layer's memory-bound forward on the h100 at microbatch 2: (2 x 36 + 6 + 6 + 20)
    B x s h + 20 B x keys + 2 x 10 B x keys + 10 B x s f, at the memory rate; the layer's
    seconds are those plus the zoo's GEMMs and attention, more than the fused zoo layer's."""
    compute = gpu_compute("h100", "bf16")
    options = KernelOptions(ops="eager")
    ops = dict(block_ops(decoder_model(L8, 1), False, "eager", L8))["h.0"]
    memory = [op for op in ops if op.kind == "elementwise"]
    assert [op.label for op in memory].count("residual") == 2
    moved = 2 * ((2 * 36 + 6 + 6 + 20) * SH + 20 * KV + 2 * 10 * KV + 10 * FH)
    assert ops_seconds(memory, 2, compute, options, False) == pytest.approx(
        moved / compute.gpu.memory_rate)
    fused = dict(block_ops(decoder_model(L8, 1), False))["h.0"]
    assert ops_seconds(ops, 2, compute, options, False) > ops_seconds(
        fused, 2, compute, KernelOptions(), False)


def test_ops_refused_off_llama() -> None:
    """Eager ops are TorchTitan's Llama: a LayerNorm GPT with biases is refused naming them."""
    gpt = Model("gpt", 2, 1024, 16, 1024, 50257)
    assert check_ops("fused", gpt) == "fused"
    with pytest.raises(ConfigError, match="rms_norm, gated_ffn, rotary positions, no biases"):
        check_ops("eager", gpt)
    with pytest.raises(ConfigError, match="ops: 'jit' is not one of fused, eager"):
        check_ops("jit", L8)


def test_kernels_as_torch_dispatches_them() -> None:
    """The kernel lists against the ATen ops torch dispatches (CPU) for the same formulas,
    views left out: RMSNorm 8 / 16, rotary 3 / 4 (the complex conjugate a view), SwiGLU
    2 / 3."""
    torch = pytest.importorskip("torch")
    dispatch = pytest.importorskip("torch.utils._python_dispatch")
    views = {"view", "_unsafe_view", "reshape", "expand", "unsqueeze", "transpose", "t",
             "view_as_complex", "view_as_real", "detach", "alias", "slice", "_conj",
             "_reshape_alias", "as_strided", "permute", "squeeze", "select"}

    class Count(dispatch.TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.kernels = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if func._schema.name.split("::")[1] not in views:
                self.kernels += 1
            return func(*args, **(kwargs or {}))

    def counts(fn, *inputs):  # type: ignore[no-untyped-def]
        with Count() as forward:
            out = fn(*inputs)
        grad = torch.ones_like(out)
        with Count() as backward:
            out.backward(grad)
        return forward.kernels, backward.kernels

    bf16 = torch.bfloat16
    weight = torch.ones(64, dtype=bf16, requires_grad=True)
    x = torch.randn(8, 64, dtype=bf16, requires_grad=True)

    def rms(x):  # type: ignore[no-untyped-def]
        y = x.float()
        return (y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * weight

    fwd, bwd = counts(rms, x)  # a leaf's first gradient is taken as it is: no kernel
    assert (fwd, bwd) == (RMS_NORM.launches(False), RMS_NORM.launches(True))
    freqs = torch.polar(torch.ones(8, 16), torch.randn(8, 16)).view(1, 8, 1, 16)
    q = torch.randn(1, 8, 2, 32, dtype=bf16, requires_grad=True)

    def rotary(q):  # type: ignore[no-untyped-def]
        complex_q = torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2))
        return torch.view_as_real(complex_q * freqs).flatten(3).type_as(q)

    fwd, bwd = counts(rotary, q)
    assert (fwd, bwd) == (ROTARY.launches(False), ROTARY.launches(True))
    gate, up = (torch.randn(8, 64, dtype=bf16, requires_grad=True) for _ in range(2))
    fwd, bwd = counts(lambda a, b: torch.nn.functional.silu(a) * b, gate, up)
    assert (fwd, bwd) == (SWIGLU.launches(False), SWIGLU.launches(True))
    assert torch_ops((), L8, False) == ()
