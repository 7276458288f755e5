"""What Transformer Engine's FP8 linears keep for the backward in place of the 16-bit inputs
``job.memory.per_gpu`` (Korthikanti et al.) and ``job.memory.moe`` count: bytes one layer keeps
less per microbatch on one GPU under ``delayed``, ``current``, ``mxfp8`` or ``nvfp4``
(``job.compute.fp8.TE_RECIPES``; torchao's recipes keep their own saves, not priced here).

**A linear saves its quantized input, not the 16-bit one** (Transformer Engine v2.9 / v2.12 /
v2.16, the 25.11 / 26.02 / 26.04 containers' versions: ``pytorch/module/linear.py``,
``layernorm_linear.py``, ``grouped_linear.py``, ``_Linear.forward`` / ``_LayerNormLinear.
forward`` / ``_GroupedLinear.forward``, "Cache state for backward pass"): under FP8 the input
is cast by the module's input quantizer and the cast tensor is what ``save_for_backward``
keeps (``saved_inputmat``, ``ln_out``, ``inputmats``), with only the usage the weight-gradient
GEMM needs: the column-wise data (``update_usage(rowwise_usage=False)``), or for per-tensor FP8
under sequence parallelism the row-wise data (1 byte either way: "All-gather is not supported
with FP8 column-wise data", the backward re-gathers and transposes it). Per element
(``saved_bytes``): 1 byte for ``delayed`` and ``current`` (``Float8Tensor``'s uint8 data);
``1 + 1/32`` for ``mxfp8`` (``MXFP8Tensor``'s column-wise data and its E8M0 scale per 32
elements; the scales' padding to 128 x 4 tiles not counted); ``0.5 + 1/16`` for ``nvfp4``
(the column-wise NVFP4 copy, ``job.compute.nvfp4``: NVFP4 is gathered column-wise too, so no
row-wise copy is kept under SP). ``LayerNormLinear`` keeps the
norm's 16-bit input beside it (the layer input Korthikanti counts already). Which inputs
(``p`` bytes each in the 16-bit stash):

* a dense layer's QKV projection and FC1 (``TELayerNormColumnParallelLinear``): the norm's
  output, ``s b h`` (over ``t`` with sequence parallelism: the rank's shard is saved and
  re-gathered), and FC2 (``TERowParallelLinear``): SwiGLU's or GeLU's output, ``s b f / t``;
  the activation keeps its own 16-bit input (FC1's output), unchanged;
* MLA (``job.compute.mla``): ``linear_q_down_proj`` and ``linear_kv_down_proj`` are two
  ``TELinear`` modules on the same norm output, **each** saving its FP8 copy (2 x 1 byte
  against the one 16-bit tensor counted: more, not less); the up projections
  (``column_parallel_layer_norm_linear``, Megatron-Core's MLA spec with ``qk_layernorm``)
  save the normed latents in FP8 (``q_lora_rank + kv_lora_rank`` per token);
* the output projection: Megatron-Core sets ``save_original_input`` on ``linear_proj`` for
  FP8 recipes other than ``delayed`` with TE >= 2.6 (``megatron/core/transformer/
  attention.py`` and ``multi_latent_attention.py``, at NVIDIA/Megatron-LM 92c8482, 8f1c2f8,
  4415119 and 24bad8e, the 25.11 to 26.08 containers' Megatron-LM: "the output of the fused
  core_attn is saved by itself, and linear_proj also saves the quantized tensor of this
  output"): ``current`` and ``mxfp8`` keep only the 16-bit output the attention saved (as
  counted); ``delayed`` keeps an FP8 copy beside it (``heads x v_head_dim`` per token over
  ``t``: more);
* an MoE layer (``TEGroupedMLP``, ``GroupedLinear``): the routed tokens fc1 reads, ``R h``
  (``job.memory.moe``'s ``R`` tokens at the rank), and the activation's output fc2 reads,
  ``R f_e / e``; shared experts: their FC2's input ``s b shared f_e / t``, and their FC1
  saves an FP8 copy of the layer's normed input (the router keeps the 16-bit one): ``s b h``
  (over ``t`` with SP) more.

**Recomputed inputs are not kept at all** (``job.memory.recompute_modules`` frees them):
``layernorm`` frees the QKV's and the FFN's inputs (Megatron-Core then sets
``save_original_input`` on the QKV projections, ``set_for_recompute_input_layernorm``, so the
saved tensor is the discarded norm output), ``mlp`` the dense FFN's, ``moe_act`` fc2's input
(``save_original_input`` on ``linear_fc2``, ``experts.py``), ``moe`` and ``shared_experts``
their stashes, ``mla_up_proj`` the up projections' (their checkpoint keeps the latents before
the norm); ``full`` recomputation keeps the layer input only. Their FP8 discount is then none.
"""

from __future__ import annotations

from dlsched.job.communication.context_parallel import local_tokens
from dlsched.job.compute.fp8 import MX_BLOCK, TE_RECIPES
from dlsched.job.compute.mla import is_mla
from dlsched.job.compute.module_recompute import modules_of
from dlsched.job.compute.moe_costs import load_factor
from dlsched.job.compute.nvfp4 import SAVED_BYTES
from dlsched.job.execution import Execution
from dlsched.job.model_spec import Model

FP8_BYTES = 1.0  # Float8Tensor / MXFP8Tensor data: one uint8 per element


def saved_bytes(recipe: str | None) -> float | None:
    """Bytes per element of a TE FP8 linear's saved input under ``recipe`` (module
    docstring); None when the recipe is not Transformer Engine's (or no FP8)."""
    if recipe not in TE_RECIPES:
        return None
    if recipe == "nvfp4":  # the columnwise NVFP4 copy alone (job.compute.nvfp4)
        return SAVED_BYTES
    return FP8_BYTES * (1 + 1 / MX_BLOCK) if recipe == "mxfp8" else FP8_BYTES


def _held(layout: Execution) -> frozenset[str] | None:
    """The modules recomputed (empty for none or ``selective``); None when nothing but the
    layer input is kept (``full``) or the run is not TE FP8."""
    if saved_bytes(layout.run.fp8_recipe) is None or layout.recompute == "full":
        return None
    return modules_of(layout.recompute)


def dense_discount(spec: Model, layout: Execution, p: float) -> tuple[float, float]:
    """(attention, FFN) bytes a dense layer keeps less per microbatch on one GPU than its
    16-bit stash of ``p``-byte elements (module docstring; negative: more); (0, 0) but under
    a TE FP8 recipe."""
    modules, q = _held(layout), saved_bytes(layout.run.fp8_recipe)
    if modules is None or q is None:
        return 0.0, 0.0
    s, b, h, t = local_tokens(spec, layout.cp), layout.microbatch_size, spec.hidden, layout.tp
    split = t if layout.sequence_parallel else 1
    attention = 0.0
    if "layernorm" not in modules:  # the QKV input: one LayerNormLinear, or MLA's two downs
        attention += (p - (2 * q if is_mla(spec) else q)) * s * b * h / split
    if is_mla(spec) and "mla_up_proj" not in modules:  # the normed latents the ups read
        attention += (p - q) * s * b * (spec.q_lora_rank + spec.kv_lora_rank) / split
    if layout.run.fp8_recipe == "delayed":  # linear_proj's FP8 copy beside the core's output
        attention -= q * s * b * spec.heads * spec.v_head_dim / t
    ffn = 0.0
    if "layernorm" not in modules:
        ffn += (p - q) * s * b * h / split
    if "mlp" not in modules:
        ffn += (p - q) * s * b * spec.ffn_hidden / t
    return attention, ffn


def moe_discount(spec: Model, layout: Execution, p: float) -> float:
    """Bytes an MoE layer's FFN (routed and shared experts) keeps less per microbatch on one
    GPU than ``job.memory.moe``'s 16-bit stash (module docstring); 0 but under a TE FP8
    recipe."""
    modules, q = _held(layout), saved_bytes(layout.run.fp8_recipe)
    if modules is None or q is None or "moe" in modules:
        return 0.0
    s, b, h, t = local_tokens(spec, layout.cp), layout.microbatch_size, spec.hidden, layout.tp
    e, fe = layout.etp, spec.expert_ffn_hidden
    routed = b * s / t * e * spec.top_k * load_factor(spec)
    saved = (p - q) * routed * h
    if "moe_act" not in modules:
        saved += (p - q) * routed * fe / e
    if spec.shared_experts and "shared_experts" not in modules:
        split = t if layout.sequence_parallel else 1
        saved += (p - q) * s * b * spec.shared_experts * fe / t - q * s * b * h / split
    return saved
