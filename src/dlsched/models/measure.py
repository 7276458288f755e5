"""``dlsched compute measure``: the kernel grid timed on the user's device, and the GPU
constants fitted to it, kernel class by kernel class.

The grid (``grid``) holds the zoo's kernel shapes: GEMMs of GPT-2's and BERT's linear layers
(and a large square one), ResNet's and VGG's convolutions in NCHW and, in 16 bits, in
channels-last, fused attention of GPT-2 (causal) and BERT, elementwise additions, and two
launch probes (a chain of tiny modules forward, and its backward). Each kernel is priced by
the very code that prices the zoo (``CalibratedCompute.work`` on the op a zoo layer would
list): its GPU seconds (the kernels are timed on the GPU alone), or for the probes the host's
launches, so a fitted constant is what that code needs to reproduce the timing.

The fit (``fit_grid``) goes class by class, each constant from the timings that depend on it
with the others already fitted: the launch overheads directly (host seconds per kernel of the
probes), the memory efficiency from the elementwise kernels, the GEMM efficiency of each
precision, the convolution efficiency (channels-last in 16 bits, NCHW otherwise), the
transpose efficiency from the 16-bit NCHW convolutions, the attention efficiency. Each is a
one-parameter least-squares fit of the log error (scipy). Precisions the device did not run
keep the base preset's values; the GPU document's ``sources`` say which were measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dlsched.hardware.gpu import KEY, Gpu, GpuSpec
from dlsched.models.compute import CalibratedCompute
from dlsched.models.ops import Op, attention_core, conv, elementwise, matmul


@dataclass(frozen=True)
class Kernel:
    """One grid entry: its class, precision, shape and layout, the op it is priced as, the
    batch it runs, and how many times the timing loop repeats it."""

    kind: str
    precision: str
    shape: tuple[int, ...]
    op: Op
    batch: int = 1
    channels_last: bool = False
    repeats: int = 1

    @property
    def label(self) -> str:
        """``gemm bf16 (8192, 768, 2304)``: the kernel in one word group."""
        layout = " channels_last" if self.channels_last else ""
        return f"{self.kind} {self.precision}{layout} {self.shape}"


def gemm_kernel(precision: str, m: int, n: int, k: int) -> Kernel:
    """C[m x n] = A[m x k] B[k x n]."""
    return Kernel("gemm", precision, (m, n, k), matmul("gemm", k, n, m, bias=False))


def conv_kernel(precision: str, batch: int, c_in: int, c_out: int, kernel: int, side: int,
                stride: int, channels_last: bool) -> Kernel:
    """A ``kernel`` x ``kernel`` convolution of ``batch`` square maps (padding kernel // 2)."""
    out = (side + 2 * (kernel // 2) - kernel) // stride + 1
    return Kernel("conv", precision, (batch, c_in, c_out, kernel, side, stride),
                  conv("conv", c_in, c_out, kernel, side, out), batch,
                  channels_last=channels_last)


def attention_kernel(precision: str, batch: int, heads: int, seq: int, width: int,
                     causal: bool) -> Kernel:
    """Scaled-dot-product attention of ``batch`` x ``heads`` sequences, head width ``width``."""
    return Kernel("attention", precision, (batch, heads, seq, width, int(causal)),
                  attention_core("sdpa", seq, heads * width, heads, causal), batch)


def add_kernel(precision: str, elements: int) -> Kernel:
    """out = a + b over ``elements`` elements (2 reads and a write each)."""
    return Kernel("elementwise", precision, (elements,), elementwise("add", elements, 3))


def launch_kernels(repeats: int) -> list[Kernel]:
    """The launch probes: a chain of ``repeats`` tiny ``nn.Linear`` modules run forward (one
    kernel each) and backward (three each: input and weight gradients, bias reduction), as a
    model's modules are; the GPU work is negligible, so they time the host."""
    probe = matmul("probe", 4, 4, 1)
    return [Kernel("launch", "fp32", ("forward",), probe, repeats=repeats),
            Kernel("launch", "fp32", ("backward",), probe, repeats=repeats)]


def grid(precisions: tuple[str, ...], tiny: bool) -> list[Kernel]:
    """The kernels to time in ``precisions``: the zoo's shapes, or (``tiny``) small stand-ins
    that exercise every class in seconds on a CPU."""
    kernels = launch_kernels(20 if tiny else 200)
    half = [p for p in precisions if KEY[p] == "bf16"]
    for precision in precisions:
        if tiny:
            kernels += [add_kernel(precision, 1 << 16), gemm_kernel(precision, 64, 48, 32),
                        gemm_kernel(precision, 96, 64, 80),
                        conv_kernel(precision, 2, 8, 8, 3, 16, 1, False),
                        attention_kernel(precision, 2, 2, 32, 16, False)]
            if precision in half:
                kernels.append(conv_kernel(precision, 2, 8, 8, 3, 16, 1, True))
            continue
        kernels += [add_kernel(precision, 1 << 26), add_kernel(precision, 1 << 22)]
        kernels += [gemm_kernel(precision, m, n, k) for m, n, k in (
            (8192, 2304, 768), (8192, 768, 768), (8192, 3072, 768), (8192, 768, 3072),
            (4096, 768, 768), (4096, 3072, 768), (8192, 8192, 8192))]
        layouts = (False, True) if precision in half else (False,)
        kernels += [conv_kernel(precision, b, c_in, c_out, k, side, stride, cl)
                    for b, c_in, c_out, k, side, stride in (
                        (32, 64, 64, 3, 56, 1), (32, 256, 64, 1, 56, 1),
                        (32, 128, 128, 3, 28, 1), (32, 512, 2048, 1, 7, 1),
                        (32, 64, 64, 3, 224, 1)) for cl in layouts]
        kernels += [attention_kernel(precision, 8, 12, 1024, 64, True),
                    attention_kernel(precision, 32, 12, 128, 64, False)]
    return kernels


def predicted(gpu: Gpu, kernel: Kernel) -> float:
    """Seconds per repetition the model gives ``kernel`` on ``gpu``: the host's launches of a
    launch probe, the GPU seconds of any other kernel (timed on the GPU alone)."""
    compute = CalibratedCompute(gpu, kernel.precision, autocast=False,
                                channels_last=kernel.channels_last)
    if kernel.kind == "launch":
        backward = kernel.shape == ("backward",)
        work = compute.work(kernel.op, kernel.batch, backward)
        overhead = gpu.spec.backward_overhead if backward else gpu.spec.kernel_overhead
        return work.launches * overhead
    return compute.work(kernel.op, kernel.batch).gpu_s


def _with(spec: GpuSpec, name: str, value: float) -> Gpu:
    data = spec.model_dump()
    parts = name.split(".")
    if parts[0] == "efficiency":
        data["efficiency"][parts[1]][parts[2]] = value
    else:
        data[name] = value
    return Gpu(GpuSpec.model_validate(data))


def _fit_one(spec: GpuSpec, name: str, timed: list[tuple[Kernel, float]]) -> GpuSpec:
    """``spec`` with the fraction ``name`` fitted (in (0, 1]) to ``timed`` kernels."""
    from scipy.optimize import minimize_scalar

    def loss(logit: float) -> float:
        gpu = _with(spec, name, 1.0 / (1.0 + math.exp(-logit)))
        return float(sum(math.log(predicted(gpu, k) / t) ** 2 for k, t in timed))

    # a coarse scan first: the loss is flat where a constant stops mattering (a kernel
    # bound by memory), which misleads a bracketing search started there
    logits = np.linspace(-14.0, 14.0, 113)
    start = float(logits[int(np.argmin([loss(x) for x in logits]))])
    best = minimize_scalar(loss, bounds=(start - 0.25, start + 0.25), method="bounded",
                           options={"xatol": 1e-5})
    return _with(spec, name, 1.0 / (1.0 + math.exp(-best.x))).spec


def fit_grid(base: Gpu, timed: list[tuple[Kernel, float]], where: str) -> tuple[Gpu, list[str]]:
    """The GPU of ``base`` with every constant the timings determine fitted (see the module
    docstring), and the names fitted. ``timed``: (kernel, measured seconds per repetition)."""
    spec = base.spec
    fitted: list[str] = []
    for name, direction in (("kernel_overhead", "forward"), ("backward_overhead", "backward")):
        probes = [(k, t) for k, t in timed if k.kind == "launch" and k.shape == (direction,)]
        if probes:
            per_launch = [t / predicted(_with(spec, name, 1.0), k) for k, t in probes]
            spec = _with(spec, name, float(np.median(per_launch))).spec
            fitted.append(name)

    def fit(name: str, chosen: list[tuple[Kernel, float]]) -> None:
        nonlocal spec
        if chosen:
            spec = _fit_one(spec, name, chosen)
            fitted.append(name)

    fit("memory_efficiency", [(k, t) for k, t in timed if k.kind == "elementwise"])
    precisions = sorted({KEY[k.precision] for k, _ in timed if k.kind != "launch"})
    for key in precisions:
        mine = [(k, t) for k, t in timed if KEY[k.precision] == key]
        fit(f"efficiency.gemm.{key}", [(k, t) for k, t in mine if k.kind == "gemm"])
        layout = key == "bf16"  # 16 bits: the convolution's own rate from channels-last
        fit(f"efficiency.conv.{key}", [(k, t) for k, t in mine
                                       if k.kind == "conv" and k.channels_last == layout])
        if key == "bf16":
            fit("transpose_efficiency", [(k, t) for k, t in mine
                                         if k.kind == "conv" and not k.channels_last])
        fit(f"efficiency.attention.{key}", [(k, t) for k, t in mine if k.kind == "attention"])
    note = f"measured by dlsched compute measure ({where})"
    spec = spec.model_copy(update={"sources": dict(spec.sources) | dict.fromkeys(fitted, note)})
    return Gpu(spec), fitted


def rows(gpu: Gpu, timed: list[tuple[Kernel, float]]) -> list[dict[str, Any]]:
    """Measured vs fitted seconds of every kernel timed."""
    return [{"kernel": kernel.kind, "case": kernel.label, "measured_s": seconds,
             "predicted_s": (guess := predicted(gpu, kernel)), "error": guess / seconds - 1}
            for kernel, seconds in timed]
