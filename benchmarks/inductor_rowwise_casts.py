"""How many times torch.compile quantizes an input that several rowwise-FP8 linears share
(issue 48; the evidence behind ``job.compute.fp8.input_casts``).

TorchTitan's Llama runs ``wq``, ``wk``, ``wv`` (and ``w1``, ``w3``) as separate linears on one
input; with torchao's rowwise recipe each is a ``Float8Linear`` whose autograd function casts
its bf16 input along the last axis in the forward (amax per row, scale, clamp, cast to e4m3)
and saves the bf16 input, which its backward casts along axis 0 for the weight gradient
(torchao ``float8/float8_linear.py``, ``matmul_with_hp_or_float8_args``). This script builds
three such linears as a stand-in (the casts as plain aten ops, the scaled matmul emulated in
bf16 on the CPU), compiles them with ``fullgraph=True`` and prints, from the forward graph
AOTAutograd hands Inductor (``TORCH_LOGS=aot_graphs``), which tensors get an ``abs`` and an
``amax`` and along which axis. With torch 2.13 (CPU): the shared input gets one ``amax(-1)``
and one ``amax(0)``, each weight and each output gradient its own: AOTAutograd's
common-subexpression elimination (``torch._functorch.config.cse``) merged the three identical
casts.

The backward runs torchao's rowwise workaround (``addmm_float8_unwrapped``: without fast
accumulation the GEMM runs as a tensorwise one and ``output *= post_inverse_scale`` follows).
With ``TORCH_LOGS=output_code`` the backward's last kernel (``..._add_..._mul_...``) reads the
three unscaled data-gradient GEMM outputs, rescales and sums them: the rescales are fused into
the sum of the input gradients, no pass of their own (``job.compute.fp8.rescale_fused``).

    TORCH_LOGS=aot_graphs python benchmarks/inductor_rowwise_casts.py 2>&1 | grep -E "abs|amax"

A few seconds of CPU; needs only torch.
"""

from __future__ import annotations

from typing import Any

E4M3_MAX = 448.0  # largest finite float8_e4m3fn value (OCP FP8 spec)


def _cast(torch: Any, tensor: Any, dim: int) -> tuple[Any, Any]:
    """Axiswise dynamic scaling: one scale per slice along ``dim`` (amax of |x|)."""
    amax = tensor.abs().amax(dim=dim, keepdim=True).float().clamp(min=1e-12)
    scale = E4M3_MAX / amax
    return (tensor.float() * scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn), scale


def _scaled_mm(torch: Any, a: Any, a_scale: Any, b: Any, b_scale: Any) -> Any:
    """A CPU stand-in for rowwise ``_scaled_mm``: FP8 operands, bf16 result."""
    product = a.to(torch.bfloat16).float() @ b.to(torch.bfloat16).float()
    return (product / (a_scale * b_scale)).to(torch.bfloat16)


def _rescaled_mm(torch: Any, a: Any, a_scale: Any, b: Any, b_scale: Any) -> Any:
    """torchao's backward workaround: an unscaled GEMM (an extern ``mm`` here), then the
    product of the inverse scales multiplied in."""
    product = torch.mm(a.to(torch.bfloat16), b.to(torch.bfloat16))
    return product * (1.0 / (a_scale * b_scale))


def main() -> None:
    import torch

    class RowwiseLinear(torch.autograd.Function):
        """One rowwise Float8Linear's matmul, casts inside (as torchao's)."""

        @staticmethod
        def forward(ctx: Any, x: Any, w: Any) -> Any:
            ctx.save_for_backward(x, w)
            xq, sx = _cast(torch, x, -1)
            wq, sw = _cast(torch, w, -1)
            return _scaled_mm(torch, xq, sx, wq.t(), sw.t())

        @staticmethod
        def backward(ctx: Any, grad: Any) -> tuple[Any, Any]:
            x, w = ctx.saved_tensors
            gq, sg = _cast(torch, grad, -1)
            wq0, sw0 = _cast(torch, w, 0)
            grad_x = _rescaled_mm(torch, gq, sg, wq0, sw0)
            gq0, sg0 = _cast(torch, grad, 0)
            xq0, sx0 = _cast(torch, x, 0)
            grad_w = _rescaled_mm(torch, gq0.t(), sg0.t(), xq0, sx0)
            return grad_x, grad_w

    def attention_inputs(x: Any, wq: Any, wk: Any, wv: Any) -> Any:
        # weighted differently, so that each linear gets an output gradient of its own
        return sum((RowwiseLinear.apply(x, w).float() * (1.0 + i)).sum()
                   for i, w in enumerate((wq, wk, wv)))

    tokens, width = 256, 128
    x = torch.randn(tokens, width, dtype=torch.bfloat16, requires_grad=True)
    weights = [torch.randn(n, width, dtype=torch.bfloat16, requires_grad=True)
               for n in (128, 32, 32)]
    torch.compile(attention_inputs, fullgraph=True)(x, *weights).backward()
    print("compiled and ran; read the aot_graphs log (abs / amax) or output_code (kernels)")


if __name__ == "__main__":
    main()
