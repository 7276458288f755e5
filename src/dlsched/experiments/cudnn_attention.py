"""cuDNN's fused attention against NVIDIA's own published timings of it: the timings, the
evaluator's price of each, and the fit behind the presets' ``fused_attention_kernel``
constants.

The timings (``experiments/data/cudnn_sdpa_training.csv``, its ``.source.yaml``: NVIDIA/
cudnn-frontend's ``sdpa_benchmark_training`` results, BF16, non-deterministic backward) cover
an H200, a GB200 and a GB300 with cuDNN 9.19 (Llama 3.1's and GPT-OSS's shapes) and the GB200
and GB300 again with cuDNN 9.22 (seven models' shapes), at 2,048 to 75,600 tokens, with and
without the causal mask.

**Fitted** per GPU (``fit_kernel``), by least squares on the logarithm of the time, with the
pricing the evaluator runs (``models.fused_attention`` through ``CalibratedCompute.work``), on
cuDNN 9.19's timings up to 16,384 tokens:

* Llama 3.1's shape (batch 2, 64 query and 8 KV heads of 128), causal and unmasked: per pass
  the rate on long rows (the forward's is ``efficiency.fused_attention``, the backward's its
  ``backward`` ratio), the cost per query tile and the causal diagonal's extra;
* then GPT-OSS's (head dimension 64, a 1,024-token window): ``head_dim_64`` per pass.

**Held out** (``experiments.attention_reproduction`` reports them): both shapes at 32,768
tokens, and every cuDNN 9.22 timing: Llama 3.1 again, GPT-OSS with a 128-token window,
DeepSeek-V3's and Kimi's multi-head latent attention (keys 192 wide, values 128), Qwen3.5's
head dimension 256, and the video models' unmasked attention at lengths that are not
multiples of 128 (Wan 2.2: 40 heads, up to 75,600 tokens; LTX-2: 32 heads).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache

import numpy as np
from scipy.optimize import least_squares

from dlsched.experiments.bundled_csv import bundled_text, parse_csv
from dlsched.hardware.attention_kernel import FusedAttentionKernel, PassFractions, PerPass
from dlsched.hardware.gpu import Gpu, GpuSpec, get_gpu
from dlsched.job.attention_layers import window_ratio
from dlsched.models.compute import CalibratedCompute
from dlsched.models.ops import Op, attention_core

TABLE = "cudnn_sdpa_training.csv"
HEADER = ("gpu", "config", "mask", "batch", "queries", "keys", "q_heads", "kv_heads",
          "head_dim_qk", "head_dim_vo", "window", "pass", "time_ms", "cudnn", "file")
MEASURED_GPUS = ("h200", "gb200", "gb300")
FIT_CONFIG = "llama3.1"  # the head-dimension-128 constants
HEAD_DIM_64_CONFIG = "gpt_oss"  # then head_dim_64
FIT_MAX_QUERIES = 16384  # the fit's longest sequence; 32,768 is held out
FIT_CUDNN = 91901  # cuDNN 9.19.1, the version all three GPUs were timed with


@dataclass(frozen=True)
class Timing:
    """One published pass of the kernel (seconds)."""

    gpu: str
    config: str
    causal: bool
    batch: int
    queries: int
    keys: int
    q_heads: int
    kv_heads: int
    head_dim_qk: int
    head_dim_vo: int
    window: int
    backward: bool
    seconds: float
    cudnn: int

    @property
    def fitted(self) -> bool:
        """In the fit (module docstring), not held out."""
        return self.config in (FIT_CONFIG, HEAD_DIM_64_CONFIG) and \
            self.queries <= FIT_MAX_QUERIES and self.cudnn == FIT_CUDNN


def _timing(cells: list[str]) -> Timing:
    gpu, config, mask, *numbers = cells[:11]
    if mask not in ("causal", "full") or cells[11] not in ("forward", "backward"):
        raise ValueError("mask: causal or full; pass: forward or backward")
    batch, queries, keys, q_heads, kv_heads, d_qk, d_vo, window = (int(n) for n in numbers)
    return Timing(gpu, config, mask == "causal", batch, queries, keys, q_heads, kv_heads,
                  d_qk, d_vo, window, cells[11] == "backward", float(cells[12]) * 1e-3,
                  int(cells[13]))


@cache
def load_timings() -> tuple[Timing, ...]:
    """The bundled timings, in the table's order (read once per process)."""
    return tuple(parse_csv(bundled_text(TABLE), HEADER, TABLE, _timing))


def core_op(timing: Timing) -> Op:
    """The kernel's op per sample: ``q_heads`` heads, the mean of the key and value widths
    (exact FLOP, ``job.compute.mla``'s convention), a window's share of the causal tiles."""
    width = (timing.head_dim_qk + timing.head_dim_vo) // 2
    op = attention_core("sdpa", timing.queries, width * timing.q_heads, timing.q_heads,
                        timing.causal, keys=timing.keys,
                        kv_hidden=width * timing.kv_heads, kind="fused_attention")
    if timing.window:
        return replace(op, executed=window_ratio("S", timing.queries, timing.window))
    return op


def predicted_seconds(timing: Timing, gpu: Gpu) -> float:
    """The evaluator's seconds for ``timing``'s pass on ``gpu``."""
    compute = CalibratedCompute(gpu, "bf16")
    return compute.work(core_op(timing), timing.batch, timing.backward).gpu_s


def _with(spec: GpuSpec, forward: float, kernel: FusedAttentionKernel) -> Gpu:
    efficiency = {**spec.efficiency,
                  "fused_attention": spec.efficiency["fused_attention"].model_copy(
                      update={"bf16": forward})}
    return Gpu(spec.model_copy(update={"efficiency": efficiency,
                                       "fused_attention_kernel": kernel}))


def _log_errors(timings: Sequence[Timing], gpu: Gpu) -> list[float]:
    return [math.log(predicted_seconds(t, gpu) / t.seconds) for t in timings]


@dataclass(frozen=True)
class KernelFit:
    """One GPU's fitted constants and the fit's root-mean-square error (of log time)."""

    gpu: str
    forward_efficiency: float
    kernel: FusedAttentionKernel
    rms: float


def fit_kernel(gpu: str, timings: Sequence[Timing] | None = None) -> KernelFit:
    """Fit ``gpu``'s constants on its published timings (module docstring), starting from
    its preset's SM count and peak."""
    rows = [t for t in (load_timings() if timings is None else timings)
            if t.gpu == gpu and t.fitted]
    spec = get_gpu(gpu).spec
    passes = {}
    for backward in (False, True):
        shape = [t for t in rows if t.config == FIT_CONFIG and t.backward == backward]

        def residuals(x: np.ndarray, shape: list[Timing] = shape) -> list[float]:
            rate, tile, diagonal = (float(v) for v in x)
            kernel = FusedAttentionKernel(backward=1.0, query_tile=PerPass(forward=tile,
                                          backward=tile),
                                          diagonal=PerPass(forward=diagonal, backward=diagonal),
                                          head_dim_64=PassFractions(forward=1.0, backward=1.0))
            return _log_errors(shape, _with(spec, rate, kernel))

        passes[backward] = least_squares(residuals, [0.6, 2.0, 1.0],
                                         bounds=([0.05, 0.0, 0.0], [1.0, 50.0, 50.0])).x
    forward, backward = passes[False], passes[True]
    kernel = FusedAttentionKernel(
        backward=float(backward[0] / forward[0]),
        query_tile=PerPass(forward=float(forward[1]), backward=float(backward[1])),
        diagonal=PerPass(forward=float(forward[2]), backward=float(backward[2])),
        head_dim_64=PassFractions(forward=1.0, backward=1.0))
    lows = {}
    for back in (False, True):
        narrow = [t for t in rows if t.config == HEAD_DIM_64_CONFIG and t.backward == back]

        def narrow_residuals(x: np.ndarray, narrow: list[Timing] = narrow,
                             back: bool = back) -> list[float]:
            fractions = {"forward": 1.0, "backward": 1.0, ("backward" if back else "forward"):
                         float(x[0])}
            trial = kernel.model_copy(update={"head_dim_64": PassFractions(**fractions)})
            return _log_errors(narrow, _with(spec, float(forward[0]), trial))

        lows[back] = float(least_squares(narrow_residuals, [0.6], bounds=([0.05], [1.0])).x[0])
    kernel = kernel.model_copy(update={"head_dim_64": PassFractions(forward=lows[False],
                                                                    backward=lows[True])})
    gpu_fit = _with(spec, float(forward[0]), kernel)
    rms = float(np.sqrt(np.mean(np.square(_log_errors(rows, gpu_fit)))))
    return KernelFit(gpu, float(forward[0]), kernel, rms)
