"""The causal mask Transformer Engine's unfused attention core materializes on every call.

With ``attention: unfused`` under Transformer Engine's layer spec (``transformer_impl:
transformer_engine``: TE's ``DotProductAttention`` choosing its ``UnfusedDotProductAttention``
backend, as on GB200 for MLA's 192 / 128 head dimensions with TE 2.2 (the dgxc DeepSeek-V3
rows, ``ledger/data/dgxc.yaml``), the core does not pass the causal mask to a causal softmax
kernel: ``UnfusedDotProductAttention.forward`` first calls ``dpa_utils.get_full_mask``, which
builds the whole ``[1, 1, sq, sk]`` mask from two ``arange``\\ s, then hands it to
``FusedScaleMaskSoftmax`` (whose fused path for a mask is ``ScaledMaskedSoftmax``, the zoo's
``softmax`` op, priced already). NVIDIA/TransformerEngine v2.2
``transformer_engine/pytorch/dot_product_attention/utils.py`` ``get_full_mask`` (the same at
v2.3-v2.5; ``attention.py`` ``UnfusedDotProductAttention.forward`` calls it), for a causal mask
(``window_size`` (-1, 0) from ``check_set_window_size``, so ``(sk, 0)``) with no padding mask,
runs eagerly, on ``sq x sk`` elements (bytes per element read + written):

=========================================================  ======  ===========================
``arange(sq).view(1,1,sq,1) - arange(sk).view(1,1,1,sk)``      4  int32 written (2 aranges:
                                                                   ``sq + sk`` elements only)
``swa_left = mask - window_size[0]``                            8  int32 read, int32 written
``swa_right = mask + window_size[1]``                           8  int32 read, int32 written
``swa_left <= 0``                                               5  int32 read, bool written
``torch.where(..., 1, 0)``                                      9  bool read, int64 written
``swa_right < 0``                                               5
``torch.where(..., 1, 0)``                                      9
the difference of the two                                      24  2 x int64 read, int64 written
``torch.logical_not``                                           9  int64 read, bool written
=========================================================  ======  ===========================

81 bytes per element (``MASK_BYTES_PER_SCORE``), 11 kernels (``MASK_KERNELS``), once per call
whatever the microbatch (the mask has no batch dimension) and in full on every TP rank (the
mask is not split by heads). The mask needs no gradient (no backward kernels); a recomputed core
(``selective``, ``--recompute-modules core_attn``, full recomputation) builds it again.
TransformerEngine 0a1499faa (PR #1497, first in v2.6) writes the last four steps as
``logical_not((swa_left <= 0) & ~(swa_right < 0))`` on bools: 37 bytes per element from v2.6;
dlsched has no TE-version setting and prices the v2.2-v2.5 code the ledger's unfused-TE rows
ran (at sq = sk = 4,096 the difference is 0.7 GB a call, about 0.1 ms on a GB200).

Priced as the mask's bytes at the GPU's memory rate (``hardware.gpu``'s ``memory_rate``, the
rate of every elementwise op), added to the layer's forward beside the core. Its 11 launches
are not priced: they are queued while the layer's earlier GEMMs run (the attention half's GPU
seconds exceed its host's launch seconds on the rows where it applies). Not priced either: the
softmax kernel's read of the mask for each head (16.8 MB at 4,096, within a GB200's L2) and the
transient int64 tensors' memory. Transformer Engine runs no unfused core under context
parallelism; the mask is priced on the CP rank's own tokens both ways.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlsched.job.communication.context_parallel import local_tokens

if TYPE_CHECKING:
    from dlsched.job.model_spec import Model

MASK_BYTES_PER_SCORE = 4 + 8 + 8 + 5 + 9 + 5 + 9 + 24 + 9
"""Bytes read and written per ``sq x sk`` element by ``get_full_mask``'s causal path at TE
v2.2-v2.5 (module docstring's table): 81."""
MASK_KERNELS = 11
"""Its kernels: two ``arange``\\ s and the table's nine elementwise ops (not priced as
launches: module docstring)."""


def te_builds_mask(attention: str, transformer_impl: str) -> bool:
    """Whether the attention core is Transformer Engine's ``UnfusedDotProductAttention``, which
    materializes the causal mask on every call (module docstring)."""
    return attention == "unfused" and transformer_impl == "transformer_engine"


def mask_bytes(queries: int, keys: int) -> float:
    """Bytes ``get_full_mask`` moves for a causal ``queries x keys`` mask (module docstring)."""
    for name, value in (("queries", queries), ("keys", keys)):
        if not (isinstance(value, int) and value >= 1):
            raise ValueError(f"{name}: must be an integer >= 1 (got {value!r})")
    return float(MASK_BYTES_PER_SCORE * queries * keys)


def mask_seconds(spec: Model, cp: int, attention: str, transformer_impl: str,
                 memory_rate: float) -> float:
    """Seconds one call of the attention core spends building its mask on one GPU (0 unless
    ``te_builds_mask``): ``mask_bytes`` of the CP rank's tokens at ``memory_rate`` (B/s)."""
    if not te_builds_mask(attention, transformer_impl):
        return 0.0
    tokens = local_tokens(spec, cp)
    return mask_bytes(tokens, tokens) / memory_rate
