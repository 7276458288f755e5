"""Timing the ``models.measure`` grid with torch on a CUDA GPU or, to run the mechanics, the
CPU (torch is the runtime extra; imported only here).

Each kernel runs as eager PyTorch runs it in a training step: ``torch.matmul``,
``F.conv2d`` (NCHW, or channels-last tensors), ``F.scaled_dot_product_attention``, ``a + b``,
in the kernel's precision (fp32 with TF32 off, tf32 with it on, bf16/fp16 tensors). A kernel
is timed over a loop of launches after warm-up, the median of ``SAMPLES`` loops: on a GPU
with CUDA events, the loop queued behind a sleeping kernel so that the events time the GPU
alone (``_seconds``); on the CPU with ``time.perf_counter``. The launch probes (a chain of
tiny modules forward, and its backward) are timed by the wall clock: the host is their
bottleneck by construction.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from typing import Any

from dlsched.errors import ConfigError
from dlsched.models.measure import Kernel

SAMPLES, WARMUP = 5, 2
TARGET_S = 0.02  # a timing loop lasts about this long
# GPU clock cycles the sleeping kernel waits per launch queued behind it: 100 us at 2 GHz,
# above eager PyTorch's host cost of one launch (tens of us)
SLEEP_CYCLES_PER_LAUNCH = 200_000
MAX_LOOPS = 200


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise ConfigError("device: torch is not installed; accepted: a Python with torch "
                          "(pip install 'dlsched[torch]'; CPU: pip install torch==2.13.0)"
                          ) from None
    return torch


def device_name(device: str) -> str:
    """The CUDA device's name, or the CPU's, after checking the device can run."""
    torch = _torch()
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("device: cuda is not available here (torch.cuda.is_available() "
                              "is False); accepted: cpu, or cuda on a machine with a GPU")
        return torch.cuda.get_device_name()
    import platform

    return f"CPU {platform.processor() or platform.machine()} (torch {torch.__version__})"


def _dtype(torch: Any, precision: str) -> Any:
    return {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16,
            "fp16": torch.float16}[precision]


Runner = Callable[[], Any]


def _runner(torch: Any, kernel: Kernel, device: str) -> tuple[Runner, Runner | None]:
    """A closure launching ``kernel`` once (inputs allocated here, outside the timing), and
    what of it is not the kernel's (timed apart and taken off), if anything."""
    dtype = _dtype(torch, kernel.precision)
    new = {"device": device, "dtype": dtype}
    if kernel.kind == "gemm":
        m, n, k = kernel.shape
        a, b = torch.randn(m, k, **new), torch.randn(k, n, **new)
        return (lambda: torch.matmul(a, b)), None
    if kernel.kind == "conv":
        batch, c_in, c_out, size, side, stride = kernel.shape
        fmt = torch.channels_last if kernel.channels_last else torch.contiguous_format
        x = torch.randn(batch, c_in, side, side, **new).to(memory_format=fmt)
        w = torch.randn(c_out, c_in, size, size, **new).to(memory_format=fmt)
        conv2d = torch.nn.functional.conv2d
        return (lambda: conv2d(x, w, stride=stride, padding=size // 2)), None
    if kernel.kind == "attention":
        batch, heads, seq, width, causal = kernel.shape
        q, k, v = (torch.randn(batch, heads, seq, width, **new) for _ in range(3))
        sdpa = torch.nn.functional.scaled_dot_product_attention
        return (lambda: sdpa(q, k, v, is_causal=bool(causal))), None
    if kernel.kind == "elementwise":
        a, b = torch.randn(kernel.shape[0], **new), torch.randn(kernel.shape[0], **new)
        return (lambda: a + b), None
    return _launch_runner(torch, kernel, device)


def _launch_runner(torch: Any, kernel: Kernel, device: str) -> tuple[Runner, Runner | None]:
    """The launch probes: a chain of ``repeats`` ``nn.Linear(4, 4)`` modules forward; or
    forward and backward, the forward taken off."""
    chain = torch.nn.Sequential(*(torch.nn.Linear(4, 4) for _ in range(kernel.repeats)))
    chain = chain.to(device)
    x = torch.ones(1, 4, device=device)

    def forward() -> Any:
        for parameter in chain.parameters():
            parameter.grad = None
        return chain(x)

    if kernel.shape == ("forward",):
        return forward, None
    return (lambda: forward().sum().backward()), (lambda: forward().sum())


def _seconds(torch: Any, run: Runner, loops: int, device: str, host: bool) -> float:
    """Seconds of ``loops`` calls of ``run``: wall clock (synchronized) on the CPU or for the
    host-bound launch probes (``host``); on a GPU otherwise CUDA events around the loop,
    queued behind a sleeping kernel long enough for the host to launch them all, so the
    events time the GPU alone."""
    if device == "cuda" and not host:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        torch.cuda._sleep(int(SLEEP_CYCLES_PER_LAUNCH * loops))
        start.record()
        for _ in range(loops):
            run()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1e3
    if device == "cuda":
        torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(loops):
        run()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - began


def measure_kernel(kernel: Kernel, device: str) -> float:
    """Median seconds per repetition of ``kernel`` on ``device`` (see the module docstring)."""
    torch = _torch()
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    tf32 = kernel.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    try:
        return _median_seconds(torch, kernel, device)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _median_seconds(torch: Any, kernel: Kernel, device: str) -> float:
    host = kernel.kind == "launch"
    with nullcontext() if host else torch.no_grad():
        run, baseline = _runner(torch, kernel, device)
        for _ in range(WARMUP):
            run()
        once = max(_seconds(torch, run, 1, device, host), 1e-7)
        loops = max(1, min(MAX_LOOPS, round(TARGET_S / once)))
        seconds = statistics.median(_seconds(torch, run, loops, device, host) / loops
                                    for _ in range(SAMPLES))
        if baseline is not None:
            seconds -= statistics.median(_seconds(torch, baseline, loops, device, host) / loops
                                         for _ in range(SAMPLES))
    return max(seconds, 1e-9) / kernel.repeats


def measure_grid(kernels: list[Kernel], device: str,
                 progress: Callable[[Iterable[Kernel], int], Iterator[Kernel]] | None = None,
                 ) -> list[tuple[Kernel, float]]:
    """(kernel, median seconds per repetition) of every kernel of the grid on ``device``;
    ``progress(items, total)`` may wrap the loop (a progress bar)."""
    torch = _torch()
    threads = torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(1)  # one core: steadier timings on a shared machine
    try:
        chosen = progress(kernels, len(kernels)) if progress is not None else kernels
        return [(kernel, measure_kernel(kernel, device)) for kernel in chosen]
    finally:
        torch.set_num_threads(threads)
