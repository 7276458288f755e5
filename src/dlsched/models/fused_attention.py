"""Seconds of cuDNN's fused attention kernel on a GPU that gives its kernel constants
(``GpuSpec.fused_attention_kernel``, ``hardware.attention_kernel``), by the tiles it runs.

Per sample and head the kernel runs ``ceil(queries / 128)`` query tiles; query tile ``i`` walks
its row of 128 x 128 score tiles. In units of one full tile's time of the pass:

    tiles = executed pairs / 128^2 + query tiles x (query_tile + diagonal if causal)

* executed pairs: ``queries x keys`` without a mask; under the causal mask the pairs below the
  diagonal and each diagonal tile computed whole, ``queries x keys / 2 + 64 x queries``
  (``job.attention_layers.executed_pairs`` of a full causal layer: ``s (s + 128) / 2``); a
  sliding window or chunk computes the op's ``executed`` share of that (``Op.executed``:
  ``job.attention_layers.window_ratio``), while its query tiles, and what each costs, stay;
* one tile is ``4 x 128^2 x head_dim`` FLOP forward and 2.5x that backward (the scores
  recomputed: Dao, FlashAttention-2, 2023, Sec. 3.1), run at the kernel's rate: the bf16 peak x
  ``efficiency.fused_attention`` (x ``backward`` in the backward) x the head dimension's scale
  (``FusedAttentionKernel.head_dim_scale``) x the wave quantization of the thread blocks over
  the SMs (``models.kernels.attention_utilization``).

The head dimension is the op's FLOP per query-key pair over 4 and its heads (a multi-head
latent attention's core, 192-wide keys and 128-wide values, at the mean 160: its FLOP are
exact). ``dlsched reproduce attention`` checks this against NVIDIA's published benchmark of
the kernel (``experiments.cudnn_attention``: fitted on two shapes per GPU, the rest held out).
"""

from __future__ import annotations

import math

from dlsched.hardware.attention_kernel import FusedAttentionKernel
from dlsched.models.kernels import ATTENTION_BLOCK, attention_utilization
from dlsched.models.ops import ATTENTION_BACKWARD, Op


def fused_attention_tiles(queries: int, keys: int, causal: bool, executed: float,
                          kernel: FusedAttentionKernel, backward: bool) -> float:
    """Full-tile times of one (sample, head)'s kernel (module docstring)."""
    block = ATTENTION_BLOCK
    pairs = queries * keys / 2 + block / 2 * queries if causal else queries * keys
    per_tile = kernel.query_tile.of(backward) + (kernel.diagonal.of(backward) if causal else 0)
    return executed * pairs / block**2 + math.ceil(queries / block) * per_tile


def fused_attention_seconds(op: Op, samples: float, forward_rate: float, sms: int,
                            kernel: FusedAttentionKernel, backward: bool) -> float:
    """Seconds of the fused attention ``op`` on ``samples`` samples (this GPU's share of the
    batch), forward or ``backward``, at ``forward_rate`` FLOP/s (the forward's asymptote at
    head dimension 128) on ``sms`` SMs (module docstring)."""
    queries, keys, heads, causal = op.shape
    head_dim = op.flops / (4 * queries * keys * heads)
    problems = max(1, round(samples * heads))
    tiles = fused_attention_tiles(queries, keys, bool(causal), op.executed, kernel, backward)
    tile_flops = 4 * ATTENTION_BLOCK**2 * head_dim * (ATTENTION_BACKWARD if backward else 1.0)
    rate = (forward_rate * (kernel.backward if backward else 1.0)
            * kernel.head_dim_scale(head_dim, backward)
            * attention_utilization(queries, problems, sms))
    return samples * heads * tiles * tile_flops / rate
