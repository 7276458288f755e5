"""FP8 linear layers as each framework runs them (``--precision fp8 --fp8-recipe R``).

**Which GEMMs run in FP8.** The four linear layers of every transformer layer (QKV, the
attention's output projection, FC1 and FC2: ``FP8_LINEARS``), their forward and both backward
GEMMs (data and weight gradient). Everything else stays 16-bit: the attention core (Megatron-
Core runs it in bf16 unless ``--fp8-dot-product-attention``; TorchTitan's SDPA is bf16), the
embedding and the LM head (Megatron-Core's output layer is a ``ColumnParallelLinear`` outside
Transformer Engine's FP8 autocast; TorchTitan's float8 converter skips ``output``:
``torchtitan/components/quantization/float8.py``, ``filter_fqns`` with the output layer by
default), norms and activations. Megatron-LM's ``--first-last-layers-bf16`` (the first and
last ``--num-layers-at-start-in-bf16`` / ``-at-end-in-bf16`` layers, default 1 each, kept in
bf16 when set; off by default, and in the published runs priced here) is not modelled: every
layer's linears are priced in FP8.

**Casts as memory traffic** (bf16 source: 2 bytes read per element, 1 byte per FP8 copy
written), per element of each GEMM operand: the input ``X`` (tokens x fan-in), the weight ``W``
and the output gradient ``G`` (tokens x fan-out), at the shapes one GPU of the TP group holds
(a column-parallel layer's input is the whole gathered activation, a row-parallel layer's its
``1/t`` slice; the gradient the other way round), at the GPU's memory rate:

* ``delayed`` (Transformer Engine ``DelayedScaling``, Hopper): one fused cast-transpose kernel
  per tensor reads bf16, writes the FP8 tensor and its transpose (Hopper's FP8 GEMMs take only
  the TN layout, so the backward needs the transposed copies) and records the amax in the same
  pass: 4 bytes per element; the scale comes from the amax history (a few floats per tensor).
  The weight's FP8 copy is cached over an iteration's microbatches (``is_first_microbatch``,
  which Megatron-Core's schedules set at each iteration's first microbatch): cast once per
  iteration.
* ``current`` (TE ``Float8CurrentScaling``): the scale from the tensor itself, so one amax
  pass (read 2 bytes) before the cast-transpose: 6 bytes per element; the weight cached as for
  ``delayed``. Three kernels per tensor: TE v2.12's ``Float8CurrentScalingQuantizer::
  quantize_impl`` (``pytorch/csrc/quantizer.cpp``) launches ``nvte_compute_amax_with_config``,
  ``nvte_compute_scale_from_amax`` and ``nvte_quantize_v2``.
* ``mxfp8`` (TE ``MXFP8BlockScaling``, Blackwell only: ``tcgen05`` block-scaled MMA): a scale
  (E8M0, 1 byte) per 32 elements along the reduction axis, so each tensor is quantized rowwise
  and columnwise in one kernel: read 2, write 2 x (1 + 1/32) bytes; weight cached.
* ``nvfp4`` (TE ``NVFP4BlockScaling``, Blackwell only): its GEMMs in FP4; its casts (7.125
  bytes per activation element, 5.125 per weight element, the weight cached), gathers and
  amax reductions are ``job.compute.nvfp4``'s.
* ``tensorwise`` (torchao ``Float8Linear``, dynamic per-tensor scaling, TorchTitan's default):
  per tensor an amax reduction (read 2 bytes; under ``torch.compile`` fused into the kernel
  that produced the input or the gradient, free) and a cast writing the row- and column-major
  FP8 copies (read 2, write 2): input and gradient 4 bytes per element compiled, 6 eager; the
  weight 2 + (2 + 1) + (2 + 1) = 8 (amax, forward cast, backward cast), every microbatch (no
  cache). torchao's own roofline (``torchao/float8/roofline_utils.py``,
  ``get_tensor_memory_traffic_ovhd_s``) counts the same kernels.
* ``rowwise`` (torchao ``Float8LinearRecipeName.ROWWISE``): scales per row along each GEMM's
  reduction axis, so every tensor is quantized twice along different axes through a bf16
  transposed copy: input and gradient: a kernel reading bf16 (2 bytes, free when fused into
  the producer under compile) and writing the FP8 rows (1) and a bf16 transposed copy (2),
  then one reading that copy (2) and writing its FP8 (1): 6 bytes compiled, 8 eager; weight
  3 + 4 (the transpose) + 3 = 10 (the same roofline).
  Its backward GEMMs run as cuBLAS tensorwise GEMMs with the row scales applied after
  (torchao PR #1325: the CUTLASS rowwise kernel without fast accumulation is too slow): one
  more pass reading and writing each backward GEMM's bf16 output (4 bytes per element of the
  data and weight gradients).
* ``rowwise_with_gw_hp`` (torchao ``Float8LinearRecipeName.ROWWISE_WITH_GW_HP``,
  ``float8/config.py`` at 4fc4068d6): the forward and the data-gradient GEMMs in FP8, the
  weight-gradient GEMM in bf16 (``cast_config_input_for_grad_weight`` and
  ``cast_config_grad_output_for_grad_weight`` with scaling disabled: ``input_t_hp @
  grad_output_hp``). The input and the output gradient are each quantized once, along their
  rows (axiswise dim 0: read 2, free when fused into the producer under compile, write 1):
  1 byte compiled, 3 eager, one kernel, no transposed copy (the weight gradient takes them in
  bf16). The weight twice: axiswise for the forward (read 2, write 1) and tensorwise for the
  data gradient (an amax reading 2, a cast-transpose reading 2 and writing 1): 8 bytes, three
  kernels. The data gradient's GEMM takes the output gradient's row scales with the weight's
  one scale repeated along its columns (``float8_ops.preprocess_addmm``), so it runs as
  rowwise's do, a cuBLAS tensorwise GEMM without fast accumulation and the rescale pass after
  (4 bytes per element of the data gradient, fused as rowwise's: ``rescale_fused``); the
  weight gradient needs none. Its backward GEMMs are priced apart
  (``models.pricing.mixed_backward_seconds``: the data gradient at the FP8 rate, the weight
  gradient at the 16-bit one). TorchTitan runs it as rowwise: no float8 TP
  (parallelize.py at 2c8b594, ``float8_is_rowwise`` for both), the separate linears each
  quantizing their shared input (``ROWWISE_RECIPES``).

**Sequence parallelism under Transformer Engine** (``delayed``, ``current``, ``mxfp8`` with
TP > 1 and SP). The operand that sequence parallelism all-gathers (a column-parallel layer's
input in the forward, a row-parallel layer's output gradient in the backward) is quantized on
the GPU's own ``1/t`` of the tokens and gathered in FP8, not cast after the gather
(transformer_engine/pytorch/module/linear.py at v2.8, ``_Linear.forward``: "Cast local input
tensor if needed" before ``gather_along_first_dim`` or ``fill_userbuffers_buffer_for_all_gather``
with the quantizer, current scaling's amax reduced over the TP group, ``with_amax_reduction``;
``TransformerEngineBaseModule.grad_output_preprocess`` in base.py likewise for the gradient).
FP8 per-tensor data is gathered row-wise only ("All-gather is not supported with FP8
column-wise data"), so Hopper's transposed copy for the weight-gradient GEMM is made from the
gathered FP8 tensor (``update_usage(columnwise_usage=True)``: read 1, write 1 byte per element
of the whole tensor). Per element of the gathered tensor: ``delayed`` (2 + 1) / t + 2,
``current`` (2 + 2 + 1) / t + 2, ``mxfp8`` its row- and column-wise quantization of the shard,
(2 + 2 x (1 + 1/32)) / t (block scales need no transpose); against 4, 6 and 4.06 cast after a
gather. The other operands (and every operand without SP) are cast as below. Current scaling
needs the gathered tensor's amax before the shards are cast: one FP32 all-reduce over the TP
group per gathered operand (``Linear._customize_quantizers_float8_current_scaling``:
``with_amax_reduction``, ``amax_reduction_group = tp_group`` for a column-parallel input and a
row-parallel output gradient under SP), two per layer forward and two backward
(``amax_reductions``; ``job.compute.layer_costs`` prices them on the TP group, blocking).

**Separate linears sharing an input** (``separate_linears``). The zoo prices a layer's QKV
projection and a gated FFN's gate and up projections each as one GEMM; TorchTitan's Llama runs
them as separate ``nn.Linear`` modules (``wq``, ``wk``, ``wv``; ``w1``, ``w3``:
torchtitan/models/llama3/model.py), each a ``Float8Linear`` of its own. With tensorwise
scaling under TP TorchTitan casts the attention's and the FFN's input once, before the
sequence-parallel all-gather, for all of them (``PrepareFloat8ModuleInput`` with
``Float8ColwiseParallel``, ``enable_float8_tensorwise_tp``); with rowwise it does not
(torchtitan parallelize_llama.py at 820504e: "For rowwise recipes, we use regular TP and
all-gather happens in high precision", ``enable_float8_tensorwise_tp = enable_float8_linear
and not float8_is_rowwise``), so every linear quantizes the shared input itself, and every
linear's data gradient, the input's full width, gets its own rescaling pass: 3 for the QKV
projection, 2 for a gated FFN's input projection (``SPLIT_LINEARS``). Eager, each linear's
input casts run (``linears`` of them); under ``torch.compile`` they are one: the casts are the
same ops on the same tensor, and AOTAutograd's common-subexpression elimination
(``torch._functorch.config.cse``, on by default; ``fx_graph_cse`` on the joint graph) merges
them. Read off the forward graph AOTAutograd hands Inductor (torch 2.13 CPU,
``benchmarks/inductor_rowwise_casts.py``: three linears as torchao's rowwise
``matmul_with_hp_or_float8_args`` runs them, each ``autograd.Function`` casting its input
along -1 in the forward and saving the bf16 input for its weight gradient's cast along 0):
one ``abs`` and one ``amax(-1)`` of the input feed all three ``mm``, one ``amax(0)`` all
three weight gradients; the weights' and the output gradients' casts stay one per linear
(different tensors). The data-gradient rescales are of different tensors and stay per
linear eager; compiled, Inductor fuses each into the kernel that consumes the data gradient
where that is a kernel it generates (``rescale_fused``): the sum of the separate linears'
input gradients (one kernel reading the unscaled GEMM outputs, rescaling and adding them:
``benchmarks/inductor_rowwise_casts.py``'s stand-in with the rescale, torch 2.13 CPU, the
backward's ``..._add_..._mul_...`` kernel), and FC2's, whose data gradient feeds the
activation's backward (pointwise). The projection's feeds SDPA's backward (an extern kernel)
and a lone QKV or FC1's the sequence-parallel reduce-scatter or the norm: a pass of their own,
as are the weight gradients' (graph outputs). The measured cost: TorchTitan
issue #1207 (Llama 3.1 70B, 256 H100s, FSDP 32 x TP 8) found the small ``wk`` / ``wv``
linears about 40% slower in rowwise FP8 than in bf16, enough to cancel rowwise's gain, and
leaving them in bf16 (torchao PR #2410's auto filter, torchtitan PR #1319) gave +10% tokens/s
over bf16 with vanilla TP. Tensorwise keeps one cast per op (the prepared input, or without TP
Inductor's common-subexpression elimination of identical casts of one tensor, assumed).
Their GEMMs, each its own ``_scaled_mm`` at its own shape (``wk`` and ``wv`` 128 columns wide
per rank at TP 8, memory-bound, each reading the whole FP8 input), are priced beyond the
zoo's fused ones by ``layer_costs.separate_linears_seconds`` wherever the layer is
TorchTitan's (``layer_costs.torch_linears``), every recipe; an FP8 GEMM's operand bytes are
``models.pricing.fp8_gemm_bytes`` (FP8 in, bf16 out).

The FP8 GEMMs run at the calibrated GPU's FP8 GEMM rate (``efficiency.gemm.fp8`` of
``peak.fp8``, the same kernels ``dlsched compute`` prices in fp8), operands 1 byte. Rowwise's
forward CUTLASS kernel is taken at the tensorwise rate (pytorch/pytorch#147971: with fast
accumulation most shapes run at 90-100% of the tensorwise cuBLAS kernel). MXFP8's GEMMs at the
FP8 rate (NVIDIA's Blackwell datasheet gives MXFP8 and FP8 the same dense rate).

**FSDP float8 all-gather** (torchao ``enable_fsdp_float8_all_gather``, tensorwise only):
FSDP2 gathers the weights' FP8 copies (1 byte per parameter instead of 2) cast on each rank's
shard before the gather (``weight_shards``: the cast of the weight then reads and writes only
the shard; the column-major copy for the backward is written after the gather, read 1 write 1
byte per element).

**TP all-gathers in FP8** (``tp_gather_fraction``, tensorwise only): with float8 linears
TorchTitan's ``apply_tp`` (``torchtitan/parallelisms/parallelize_llama.py`` at 9dec370; at
820504e ``enable_float8_tensorwise_tp``, not for rowwise) wraps the attention and the FFN in
torchao's ``PrepareFloat8ModuleInput`` and their column-parallel linears in
``Float8ColwiseParallel``: the sequence-sharded input is cast to FP8 before the
sequence-parallel all-gather, so the forward's two all-gathers (and their reruns under
recomputation) move 1 byte per element; and ``Float8RowwiseParallel._prepare_output_fn``
(torchao ``float8/float8_tensor_parallel.py``, the same at 4f8021f (2024-12) and 6243040
(2025-06), the versions of the two benchmark files) applies ``NoopFwToFloat8BwDynamic`` after
the output's redistribute, so in the backward the row-parallel linears' output gradient is
cast to FP8 (e5m2) on its sequence shard before the redistribute's backward all-gathers it:
the backward's two all-gathers (the projection's and FC2's output gradients) move 1 byte per
element too. The reduce-scatters (the row-parallel outputs forward, the column-parallel input
gradients backward) stay 16-bit.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dlsched.errors import ConfigError, check_choice
from dlsched.job.compute import nvfp4
from dlsched.job.run_choices import FP8_RECIPES, TE_FP8_RECIPES, TE_RECIPES
from dlsched.models.compute import CalibratedCompute
from dlsched.models.ops import Op
from dlsched.models.pricing import COLUMN_PARALLEL, mixed_backward_seconds, product_seconds
from dlsched.models.timeline import Work

# torchao's recipes with row scales, which TorchTitan runs without float8 TP (parallelize.py at
# 2c8b594: float8_is_rowwise), and the one whose weight gradient stays 16-bit.
ROWWISE_RECIPES = ("rowwise", "rowwise_with_gw_hp")
HP_WEIGHT_GRADIENT = ("rowwise_with_gw_hp",)
FP8_LINEARS = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
# TorchTitan's Llama: the QKV projection as wq, wk, wv; a gated FFN's input projection as w1,
# w3 (torchtitan/models/llama3/model.py); ``separate_linears``.
SPLIT_LINEARS = {"attn.c_attn": 3, "mlp.c_fc": 2}
MX_BLOCK = 32  # OCP Microscaling: one E8M0 scale per 32 elements
# Presets with Blackwell's block-scaled tensor cores (MXFP8 and NVFP4 GEMMs): Blackwell
# (compute capability 10.0) and Blackwell Ultra (10.3, sm_103: b300, gb300); TE's
# check_nvfp4_support also needs 10.0 or higher (pytorch/quantization.py at v2.12), and these
# are the presets with a peak.fp4.
MXFP8_GPUS = ("b200", "gb200", "b300", "gb300")
HOPPER_RECIPES = tuple(name for name in FP8_RECIPES if name not in ("mxfp8", "nvfp4"))
"""The recipes FP8 tensor cores without block scaling run (what mxfp8 and nvfp4 fall back to
off Blackwell)."""
NON_TN_FP8_GPUS = MXFP8_GPUS
"""GPUs whose FP8 GEMMs take every operand layout (compute capability 10.x, the same presets as
``MXFP8_GPUS``: TE's test is (10, 0) <= capability < (12, 0), so Blackwell Ultra's 10.3 too),
so Transformer Engine's per-tensor FP8 tensors keep no transpose: TE's
``is_non_tn_fp8_gemm_supported`` (``transformer_engine/pytorch/utils.py``, since
NVIDIA/TransformerEngine c7702309f, 2025-04) and
``Float8CurrentScalingQuantizer.inner_tensor_specs`` ("on non-TN-capable archs (Blackwell+) a
single ``_data`` buffer backs both row- and column-wise usage and no separate transpose is
materialized", d0067d0da). MXFP8's two copies carry differently blocked scales and stay."""
BF16, FP8 = 2.0, 1.0  # bytes per element


@dataclass(frozen=True)
class CastCost:
    """Bytes moved per element (module docstring) and kernels launched per microbatch, for
    one operand of an FP8 linear."""

    bytes_per_element: float
    kernels: float


def _tensor(recipe: str, compiled: bool) -> CastCost:
    """An activation operand's cast (the input, or the output gradient)."""
    amax = 0.0 if compiled else BF16  # torchao: fused into the producing kernel when compiled
    return {"delayed": CastCost(BF16 + 2 * FP8, 1),
            "current": CastCost(BF16 + BF16 + 2 * FP8, 3),
            "mxfp8": CastCost(BF16 + 2 * FP8 * (1 + 1 / MX_BLOCK), 1),
            "nvfp4": CastCost(nvfp4.ACTIVATION_CAST_BYTES, nvfp4.ACTIVATION_CAST_KERNELS),
            "tensorwise": CastCost(amax + BF16 + 2 * FP8, 2 if compiled else 3),
            "rowwise": CastCost(amax + FP8 + BF16 + (BF16 + FP8), 2),
            "rowwise_with_gw_hp": CastCost(amax + FP8, 1)}[recipe]


def _weight(recipe: str, shards: int) -> CastCost:
    """The weight's casts over one forward and backward (before caching: ``cast_weight``)."""
    if recipe == "tensorwise" and shards > 1:  # FP8 all-gather: cast on the shard
        return CastCost((BF16 + BF16 + FP8) / shards + 2 * FP8, 3)
    return {"delayed": CastCost(BF16 + 2 * FP8, 1),
            "current": CastCost(BF16 + BF16 + 2 * FP8, 3),
            "mxfp8": CastCost(BF16 + 2 * FP8 * (1 + 1 / MX_BLOCK), 1),
            "nvfp4": CastCost(nvfp4.WEIGHT_CAST_BYTES, nvfp4.WEIGHT_CAST_KERNELS),
            "tensorwise": CastCost(BF16 + 2 * (BF16 + FP8), 4),
            "rowwise": CastCost((BF16 + FP8) + 2 * BF16 + (BF16 + FP8), 3),
            "rowwise_with_gw_hp": CastCost((BF16 + FP8) + BF16 + (BF16 + FP8), 3)}[recipe]


def check_fp8(precision: str, recipe: str | None, gpu_name: str, peaks: dict[str, object],
              moe: bool = False) -> str | None:
    """The recipe when ``precision`` is fp8 (None otherwise); ConfigError naming the field
    when the recipe is missing, unknown, given without fp8, or not run by the GPU."""
    if precision != "fp8":
        if recipe is not None:
            raise ConfigError(f"{recipe} needs --precision fp8 (got {precision})", "fp8_recipe")
        return None
    if recipe is None:
        raise ConfigError("needed with --precision fp8; accepted: "
                          + ", ".join(FP8_RECIPES), "fp8_recipe")
    check_choice("fp8_recipe", recipe, FP8_RECIPES)
    if "fp8" not in peaks:
        raise ConfigError(f"fp8 needs FP8 tensor cores (Hopper or later); "
                          f"{gpu_name} has none; accepted: bf16, fp16", "precision")
    if recipe == "mxfp8" and gpu_name not in MXFP8_GPUS:
        raise ConfigError(f"mxfp8 needs Blackwell's block-scaled tensor cores "
                          f"({', '.join(MXFP8_GPUS)}), not {gpu_name}; accepted: "
                          f"{', '.join(HOPPER_RECIPES)}", "fp8_recipe")
    if recipe == "nvfp4" and "fp4" not in peaks:
        raise ConfigError(f"nvfp4 needs Blackwell's FP4 tensor cores (peak.fp4: "
                          f"{', '.join(MXFP8_GPUS)}), not {gpu_name}; accepted: "
                          f"{', '.join(HOPPER_RECIPES)}", "fp8_recipe")
    if moe and recipe not in TE_FP8_RECIPES:  # no grouped NVFP4 GEMM priced
        raise ConfigError(f"MoE experts run FP8 as Transformer Engine's grouped "
                          f"GEMMs (job.compute.moe_fp8; NVFP4's are not priced); accepted: "
                          f"{', '.join(TE_FP8_RECIPES)} (got {recipe})", "fp8_recipe")
    return recipe


def is_fp8_linear(op: Op) -> bool:
    """Whether ``op`` is one of a layer's four linear layers (``FP8_LINEARS``)."""
    return op.kind == "gemm" and bool(op.shape) and op.label.endswith(FP8_LINEARS)


def operand_elements(op: Op, batch: float, tp: int) -> tuple[float, float, float]:
    """Elements of the input, the weight and the output gradient of FP8 linear ``op`` on one
    GPU of a TP group of ``tp`` for ``batch`` samples (module docstring)."""
    tokens, fan_out, fan_in, _ = op.shape
    rows = tokens * batch
    if op.label.endswith(COLUMN_PARALLEL):
        return rows * fan_in, fan_in * fan_out / tp, rows * fan_out / tp
    return rows * fan_in / tp, fan_in * fan_out / tp, rows * fan_out


def tp_gather_fraction(recipe: str | None) -> float:
    """Bytes of a layer's sequence-parallel all-gathers (the column-parallel linears' inputs
    forward, the row-parallel linears' output gradients backward) against 16 bits under
    ``recipe`` (module docstring): 1/2 for tensorwise, NVFP4's 0.5625 / 2 for nvfp4
    (``job.compute.nvfp4``: TE gathers the NVFP4 data and scales), else 1."""
    if recipe == "nvfp4":
        return nvfp4.GATHER_FRACTION
    return FP8 / BF16 if recipe == "tensorwise" else 1.0


def separate_linears(op: Op, recipe: str, gated: bool) -> int:
    """How many times FP8 linear ``op``'s shared input is quantized and its data gradient
    rescaled (module docstring, separate linears): rowwise runs TorchTitan's separate linears
    each on its own (``SPLIT_LINEARS``; the FFN's only when ``gated``), every other recipe
    once."""
    if recipe not in ROWWISE_RECIPES:
        return 1
    label = next((name for name in SPLIT_LINEARS if op.label.endswith(name)), None)
    if label is None or (label == "mlp.c_fc" and not gated):
        return 1
    return SPLIT_LINEARS[label]


AMAX_BYTES = 4.0  # one FP32 amax per tensor


def amax_reductions(recipe: str | None, tp: int, sequence_parallel: bool) -> tuple[int, int]:
    """All-reduces of one amax over the TP group per layer, forward and backward (module
    docstring): current scaling and NVFP4 under SP reduce QKV's and FC1's inputs' and the
    projection's and FC2's output gradients' amax (``job.compute.nvfp4``); no other recipe or
    layout reduces one per layer."""
    if recipe not in ("current", "nvfp4") or tp == 1 or not sequence_parallel:
        return 0, 0
    return 2, 2


def _gathered(recipe: str, tp: int) -> CastCost:
    """Transformer Engine's cast of an operand sequence parallelism gathers, per element of
    the gathered tensor (module docstring): the shard quantized, the gathered copy transposed
    (per-tensor scaling on Hopper)."""
    return {"delayed": CastCost((BF16 + FP8) / tp + 2 * FP8, 2),
            "current": CastCost((BF16 + BF16 + FP8) / tp + 2 * FP8, 3),
            "mxfp8": CastCost((BF16 + 2 * FP8 * (1 + 1 / MX_BLOCK)) / tp, 1),
            "nvfp4": CastCost(nvfp4.ACTIVATION_CAST_BYTES / tp,
                              nvfp4.ACTIVATION_CAST_KERNELS)}[recipe]


def _activation(op: Op, recipe: str, compiled: bool, tp: int, sequence_parallel: bool,
                backward: bool) -> CastCost:
    """The cast of ``op``'s activation operand of the pass (the input forward, the output
    gradient backward): Transformer Engine's ``_gathered`` one when sequence parallelism
    gathers it, else ``_tensor``; rowwise's of a gathered operand with its amax read even
    compiled (``producer_fused``)."""
    column = op.label.endswith(COLUMN_PARALLEL)
    gathered = sequence_parallel and tp > 1 and column != backward
    if gathered and recipe in TE_RECIPES:
        return _gathered(recipe, tp)
    return _tensor(recipe, compiled and producer_fused(recipe, gathered))


def producer_fused(recipe: str, gathered: bool) -> bool:
    """Whether a compiled cast's amax is fused into the kernel that produced its operand.
    Not for rowwise's operands that sequence parallelism gathers (a column-parallel linear's
    input, a row-parallel one's output gradient): TorchTitan gathers them in bf16 (no float8
    TP for rowwise, parallelize_llama.py at 820504e) and the cast reads the collective's
    output, which no Inductor kernel writes (``all_gather_into_tensor`` is a collective
    Inductor calls, not a kernel it generates): the amax pass reads 2 bytes per element.
    Tensorwise casts these on the shard before the gather (float8 TP), in the norm's or the
    residual gradient's kernel."""
    return not (recipe in ROWWISE_RECIPES and gathered)


def cast_bytes(op: Op, batch: float, tp: int, recipe: str, backward: bool, compiled: bool,
               microbatches: int = 1, weight_shards: int = 1, linears: int = 1,
               sequence_parallel: bool = False) -> float:
    """Bytes the casts of FP8 linear ``op`` move in one microbatch's forward or ``backward``
    (module docstring): the forward casts the input (once per of the ``linears`` sharing it;
    on its shard under Transformer Engine with ``sequence_parallel``; once compiled:
    ``input_casts``) and the weight (a cached
    weight once per ``microbatches``), the backward the output gradient (and rowwise's
    rescaled outputs, the data gradient once per linear)."""
    x, w, g = operand_elements(op, batch, tp)
    cast = _activation(op, recipe, compiled, tp, sequence_parallel, backward).bytes_per_element
    if backward:
        moved = g * cast
        if recipe in ROWWISE_RECIPES:  # the weight gradient rescaled only when FP8 too
            rescaled = 0 if rescale_fused(op, compiled, linears) else linears * x
            moved += 2 * BF16 * (rescaled + (0 if recipe in HP_WEIGHT_GRADIENT else w))
        return moved
    weight = w * _weight(recipe, weight_shards).bytes_per_element
    if recipe in TE_RECIPES:
        weight /= microbatches
    return input_casts(linears, compiled) * x * cast + weight


def rescale_fused(op: Op, compiled: bool, linears: int) -> bool:
    """Whether rowwise's rescale of FP8 linear ``op``'s data gradient (torchao's
    ``addmm_float8_unwrapped``: the backward GEMMs run without fast accumulation as cuBLAS
    tensorwise ones, ``output *= post_inverse_scale`` after) is fused by Inductor into the
    kernel consuming it (module docstring, separate linears): compiled, for separate linears
    (the summed input gradient) and FC2 (the activation's backward)."""
    return compiled and (linears > 1 or op.label.endswith("mlp.c_proj"))


def input_casts(linears: int, compiled: bool) -> int:
    """How many times the input ``linears`` separate linears share is quantized: once each
    eager, once under ``torch.compile`` (AOTAutograd's CSE of the identical casts: module
    docstring, separate linears)."""
    return 1 if compiled else linears


def cast_kernels(recipe: str, backward: bool, compiled: bool, microbatches: int = 1,
                 weight_shards: int = 1, linears: int = 1, op: Op | None = None, tp: int = 1,
                 sequence_parallel: bool = False) -> float:
    """Kernels the casts of one FP8 linear launch per microbatch's forward or ``backward``
    (``linears``, ``op``, ``tp``, ``sequence_parallel``: as in ``cast_bytes``)."""
    tensor = (_tensor(recipe, compiled) if op is None else
              _activation(op, recipe, compiled, tp, sequence_parallel, backward)).kernels
    if backward:
        if recipe not in ROWWISE_RECIPES:
            return tensor
        fused = op is not None and rescale_fused(op, compiled, linears)
        weight_rescale = 0 if recipe in HP_WEIGHT_GRADIENT else 1
        return tensor + (0 if fused else linears) + weight_rescale
    weight = _weight(recipe, weight_shards).kernels
    return (input_casts(linears, compiled) * tensor
            + (weight / microbatches if recipe in TE_RECIPES else weight))


def fp8_linear_work(op: Op, batch: float, fp8: CalibratedCompute, recipe: str, backward: bool,
                    compiled: bool, microbatches: int = 1, weight_shards: int = 1,
                    gated: bool = False) -> Work:
    """GPU seconds and kernels of FP8 linear ``op`` (module docstring) on ``batch`` samples:
    its GEMMs on ``fp8`` (the GPU in fp8 at the layout's TP degree) and its casts at the
    memory rate (``gated``: the layer's FFN is gated, ``separate_linears``)."""
    gemm = fp8_gemm_seconds(op, batch, fp8, recipe, backward)
    linears = separate_linears(op, recipe, gated)
    tp, sp = fp8.tensor_parallel, fp8.sequence_parallel
    moved = cast_bytes(op, batch, tp, recipe, backward, compiled, microbatches, weight_shards,
                       linears, sp)
    launches = (op.launches_backward if backward else op.kernels) + cast_kernels(
        recipe, backward, compiled, microbatches, weight_shards, linears, op, tp, sp)
    return Work(gemm + moved / fp8.gpu.memory_rate, launches)


def fp8_gemm_seconds(op: Op, batch: float, fp8: CalibratedCompute, recipe: str,
                     backward: bool) -> float:
    """Seconds of FP8 linear ``op``'s GEMMs alone (no casts) on ``batch`` samples, forward or
    ``backward``: every GEMM at ``fp8``'s rate (nvfp4's at the GPU's FP4 rate, operands
    NVFP4), but a ``HP_WEIGHT_GRADIENT`` recipe's backward, whose weight gradient runs in bf16
    (module docstring)."""
    if recipe == "nvfp4":
        return product_seconds(replace(fp8, precision="fp4"), op, batch, backward)
    if backward and recipe in HP_WEIGHT_GRADIENT:
        return mixed_backward_seconds(fp8, replace(fp8, precision="bf16"), op, batch)
    return product_seconds(fp8, op, batch, backward)


def fp8_weight_bytes(recipe: str, parameters: float, gpu: str = "") -> float:
    """Bytes per GPU of the FP8 weight copies kept besides the 16-bit weights of
    ``parameters`` FP8-linear parameters: TE keeps the cached FP8 weight and its transpose
    (``delayed``, ``current``; on ``NON_TN_FP8_GPUS`` no transpose; ``mxfp8`` its rowwise and
    columnwise copies with their scales; ``nvfp4`` its two NVFP4 copies,
    ``nvfp4.WEIGHT_COPY_BYTES``); torchao keeps nothing past a layer's backward (its casts
    are transient, ``0``)."""
    if recipe == "nvfp4":
        return nvfp4.WEIGHT_COPY_BYTES * parameters
    if recipe in ("delayed", "current"):
        return (1 if gpu in NON_TN_FP8_GPUS else 2) * FP8 * parameters
    if recipe == "mxfp8":
        return 2 * FP8 * (1 + 1 / MX_BLOCK) * parameters
    return 0.0
