"""NVFP4 linear layers as Transformer Engine runs them (``--precision fp8 --fp8-recipe nvfp4``).

The recipe is TE's ``NVFP4BlockScaling`` (``transformer_engine/common/recipe/__init__.py`` at
v2.12, the 26.02 NeMo container's TE), what Megatron-Bridge's ``get_precision_config('nvfp4')``
runs (``scripts/performance/utils/precision.py`` at df0289c: ``bf16_with_nvfp4_mixed``,
``src/megatron/bridge/training/mixed_precision.py``: bf16 mixed precision with ``fp4 =
"e2m1"``, ``fp4_recipe = "nvfp4"``, ``fp8 = None``, ``fp8_param_gather = False``; no
``first_last_layers_bf16``, so every layer's linears run it; the performance scripts add
``NVTE_USE_FAST_MATH=1``, ``perf_plugins.py``, fast reciprocals in the cast kernels, no change
of bytes). Megatron-Core (3rdparty/Megatron-LM 8f1c2f8, ``megatron/core/fp4_utils.py``
``get_fp4_recipe`` / ``get_fp4_context``) builds ``NVFP4BlockScaling()`` with its defaults
and enters it through TE's ``fp8_autocast`` ("TE currently uses fp8_autocast for fp8 and fp4
quantization"), which is why dlsched spells it as an ``fp8_recipe``: the same autocast, the same
bf16 model states, another GEMM format, as ``mxfp8`` is.

**Format.** Each value E2M1 (half a byte), one E4M3 scale per 16 consecutive values along the
GEMM's reduction axis, and a per-tensor FP32 scale from the tensor's amax (so one amax pass per
tensor): ``NVFP4_BYTES`` = 0.5 + 1/16 bytes per element (``hardware.gpu.OPERAND_BYTES``).
Rowwise and columnwise copies are quantized separately from the bf16 source (the recipe's
docstring: "both versions are computed from the high precision input").

**Which GEMMs.** The same four linears per layer as the FP8 recipes (``job.compute.fp8``):
forward, data-gradient and weight-gradient GEMMs all in FP4 (the recipe's three quantizer
settings, ``fp4_quant_fwd_inp``, ``fp4_quant_fwd_weight``, ``fp4_quant_bwd_grad``), at the
GPU's ``peak.fp4`` x ``efficiency.gemm.fp4``. The attention core stays bf16 (``fp8_dpa =
fp8_mha = False``: "Not applying quantization to attention for now"), as do the embedding and
the LM head (outside the autocast), norms and activations.

**Casts** (``NVFP4Quantizer::quantize_impl``, ``transformer_engine/pytorch/csrc/quantizer.cpp``
at v2.12), per element, bf16 source (2 bytes):

* input ``X`` (forward) and output gradient ``G`` (backward): random Hadamard transform (16 x
  16) on the columnwise copy only, the one the weight-gradient GEMM reads ("RHT is currently
  only applied to column-wise usage so that it can be used for wgrad GEMM"); stochastic
  rounding on ``G``. Three kernels: ``nvte_hadamard_transform_amax`` (reads 2: the rowwise
  amax and the post-RHT columnwise amax), ``nvte_quantize_v2`` rowwise (reads 2, writes
  ``NVFP4_BYTES``), ``nvte_hadamard_transform_cast_fusion_columnwise`` (reads 2, writes
  ``NVFP4_BYTES``): ``ACTIVATION_CAST_BYTES`` = 7.125. The fused RHT cast needs bf16, rows %
  64 and columns % 128 == 0 (every priced shape; the fallback, a transposed bf16 RHT output
  written and read again, is not priced). A norm before QKV or FC1 is not fused with the
  cast under RHT (``normalization.cpp`` at v2.12: "Post-RHT amax is handled within NVFP4
  quantizer", ``Impl::UNFUSED``): the cast reads the norm's bf16 output.
* weight ``W``: 16 x 16 2D block scaling, no RHT: ``nvte_compute_amax_with_config`` (reads 2),
  the columnwise amax copied (a 4-byte ``cudaMemcpyAsync``), one ``quantize_transpose`` kernel
  writing both copies (reads 2, writes 2 x ``NVFP4_BYTES``, ``cast/nvfp4/
  quantize_transpose_nvfp4.cuh``, 2D path): ``WEIGHT_CAST_BYTES`` = 5.125, three launches;
  cached over an iteration's microbatches like every TE recipe's (``linear.py``:
  ``get_weight_workspace`` with ``update_workspace = is_first_microbatch``).

**Under sequence parallelism** (TP > 1 and SP, no TP overlap): the gathered operand (a
column-parallel input, a row-parallel output gradient) is quantized on the GPU's ``1/t`` of the
tokens, both copies (NVFP4 is not one of the quantizers limited to rowwise all-gathers,
``linear.py``), and gathered in NVFP4 (``distributed.py`` ``_all_gather_nvfp4``: data and
scales): ``ACTIVATION_CAST_BYTES / t`` per element of the gathered tensor, the all-gathers
moving ``NVFP4_BYTES`` per element (``GATHER_FRACTION`` of bf16's). Its amax is reduced over
the TP group first (``_customize_quantizers_nvfp4``: ``with_amax_reduction`` for the
column-parallel input and the row-parallel output gradient, one coalesced all-reduce each):
two per layer forward, two backward, as current scaling's (``fp8.amax_reductions``).

**Not priced.** The GEMMs' swizzle of the block scales into cuBLAS's layout
(``swizzle_scales_for_gemm``, ``csrc/extensions/gemm.cpp``: a kernel per scaled operand per
GEMM moving 2/16 bytes per element; MXFP8's are not priced either); the RNG-state setup of
stochastic rounding (host work); the attention output projection's input quantized in the
backward from the bf16 tensor it keeps (Megatron-Core sets ``save_original_input`` on
``linear_proj`` under fp4 too, ``attention.py`` at 8f1c2f8: one more amax read, the columnwise
cast moved to the backward; not priced for ``current`` or ``mxfp8`` either). Refused: NVFP4
with TE's userbuffers TP overlap (Megatron-Bridge turns ``tp_comm_overlap`` off for nvfp4:
``llama3_llm_pretrain.py`` and ``llama31_llm_pretrain.py`` at df0289c), with FP8 parameter
gathers (``bf16_with_nvfp4_mixed`` sets ``fp8_param_gather = False``) and for MoE experts (no
grouped NVFP4 GEMM priced).
"""

from __future__ import annotations

from dlsched.hardware.gpu import OPERAND_BYTES

NVFP4_BLOCK = 16  # elements per E4M3 scale (NVFP4BlockScaling, TE v2.12)
NVFP4_BYTES = OPERAND_BYTES["fp4"]  # 0.5 (E2M1) + 1/16 (one E4M3 scale per 16)
BF16 = 2.0  # bytes per element of the casts' source
ACTIVATION_CAST_BYTES = BF16 + 2 * (BF16 + NVFP4_BYTES)  # amax + rowwise + RHT columnwise
ACTIVATION_CAST_KERNELS = 3
WEIGHT_CAST_BYTES = BF16 + BF16 + 2 * NVFP4_BYTES  # amax + one quantize-transpose (2D)
WEIGHT_CAST_KERNELS = 3  # amax, the amax copy, the quantize-transpose
GATHER_FRACTION = NVFP4_BYTES / BF16
"""Bytes of a sequence-parallel all-gather of an NVFP4 operand against bf16's."""
SAVED_BYTES = NVFP4_BYTES
"""Bytes per element of the input a linear keeps for its weight gradient: the columnwise copy
alone (``linear.py``: "Discard row-wise data since it is not needed in backward pass")."""
WEIGHT_COPY_BYTES = 2 * NVFP4_BYTES
"""Bytes per parameter of the cached quantized weight: its rowwise and columnwise copies."""
