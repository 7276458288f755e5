"""Seconds and memory that sliding-window and chunked attention layers save on one GPU
(``Model.attention_pattern``; which keys each layer attends: ``job.attention_layers``).

**Time.** A windowed layer is a full layer whose attention core executes fewer score tiles:
the fused kernel (``flash`` or ``fused``) computes ``window_ratio`` of a full causal layer's
tiles (``job.attention_layers.executed_pairs``: the tiles not wholly masked, at
FlashAttention-2's 128 x 128 blocks), so its core op is the full layer's executing that share
of its tiles (``Op.executed``), priced by the calibrated GPU model at the same shape and wave
quantization (``models.pricing``; the kernel still reads Q, K, V and writes O once, so a short
window can leave it memory-bound; cuDNN's kernel still pays its cost per query tile,
``models.fused_attention``). cuDNN's kernel does skip the out-of-window tiles: its own published
GB200 benchmark (NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training, gpt_oss at 50c8aeb:
256 query heads of 64, 4,096 tokens, a 128 window) runs the forward in 0.210 ms, where every
causal tile would be 566 GFLOP, above the GPU's peak in that time (docs/validation-moe.md). Its
short rows of tiles run below the long-row rate: each query tile's fixed cost
(``hardware.attention_kernel``) weighs on a row of two tiles. Every other op of the layer is
unchanged. What a layer saves is the
difference of the two cores' GPU seconds: forward, and backward (FlashAttention-2's backward
recomputes the scores of the same tiles), plus the forward's saving again where
recomputation reruns the core (``full``, ``selective``; ``selective-op`` keeps the fused
kernel's outputs). Megatron's ``unfused`` products compute the whole ``s x s`` scores with a
mask, so a window saves nothing there (Megatron-Core passes ``window_size`` only to its fused
backends). Under context parallelism each GPU's core is priced at its real shape and takes
the same ratio (the load-balanced split gives each rank an equal share of every layer's
tiles); the CP ring's K/V exchange is priced as for full attention (not reduced).

**Memory.** Training keeps no score matrix with a fused kernel: the core stashes Q, K, V, its
output and one log-sum-exp per query and head whatever the window (FlashAttention-2 §3.1:
O(s) memory), and Megatron's unfused core materializes the whole masked ``s x s`` scores. So
at the training sequence length a window saves no activation memory in either
(what a window bounds is the KV cache of inference, which
training does not hold); the planner's memory (``job.memory``) is left as it is, and
``tests/job/test_attention_window.py`` checks it is unchanged by the pattern.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from dlsched.job.attention_layers import kind_counts, window_ratio
from dlsched.job.compute.layer_costs import decoder_model, gpu_compute
from dlsched.job.compute.module_recompute import reruns_core
from dlsched.job.model_spec import Model
from dlsched.models.ops import ATTENTION_KINDS, Op


def core_op(spec: Model, cp: int = 1, cp_algorithm: str = "ring",
            attention: str = "flash") -> Op | None:
    """The fused attention core of one full layer as one GPU of a CP group of ``cp`` runs it
    (None under the ``unfused`` products, which a window does not shorten)."""
    if attention == "unfused":
        return None
    model = decoder_model(spec, 1, cp, cp_algorithm, attention)
    return next(op for layer in model.layers if layer.block == "h.0" for op in layer.ops
                if op.kind in ATTENTION_KINDS)


@lru_cache(maxsize=4096)
def layer_savings(spec: Model, microbatch_size: int, gpu: str, precision: str,
                  tp: int, sp: bool, recompute: str, cp: int = 1, cp_algorithm: str = "ring",
                  attention: str = "flash") -> dict[str, tuple[float, float]]:
    """Seconds one windowed layer of each kind (``S``, ``C``) saves per microbatch on one GPU
    against a full layer: (forward, backward with its recomputation); module docstring."""
    op = core_op(spec, cp, cp_algorithm, attention)
    kinds = [kind for kind, n in kind_counts(spec.attention_pattern, 0, spec.layers).items()
             if kind != "F" and n]
    if op is None or not kinds:
        return {}
    compute = gpu_compute(gpu, precision, tp, sp)
    saved = {}
    for kind in kinds:
        windowed = replace(op, executed=window_ratio(kind, spec.seq, spec.attention_window))
        forward, backward = (compute.work(op, microbatch_size, back).gpu_s
                             - compute.work(windowed, microbatch_size, back).gpu_s
                             for back in (False, True))
        saved[kind] = (forward, backward + (forward if reruns_core(recompute) else 0.0))
    return saved


def stage_savings(spec: Model, spans: tuple[range, ...],
                  saved: dict[str, tuple[float, float]]) -> list[tuple[float, float]]:
    """Seconds each virtual stage (its layers ``spans``) saves per microbatch: its windowed
    layers of each kind times that kind's ``layer_savings``."""
    live = [(kind, f, b) for kind, (f, b) in saved.items() if f or b]
    if not live:  # a dense pattern, or windows no shorter than the sequence
        return [(0.0, 0.0)] * len(spans)
    out = []
    for span in spans:
        counts = kind_counts(spec.attention_pattern, span.start, span.stop)
        out.append((sum(counts[k] * f for k, f, _ in live),
                    sum(counts[k] * b for k, _, b in live)))
    return out

