"""Activations Megatron-Core's per-module recomputation frees (``job.compute.module_recompute``
prices its time and FLOP): the bytes one layer no longer keeps per microbatch on one GPU, each
module's tensors counted as ``job.memory.per_gpu`` (Korthikanti et al.'s stash of a dense
layer) and ``job.memory.moe`` (an MoE layer's) count them, so the stash with the modules is
the stash without them less these (``core_attn`` is the selective stash itself:
``per_gpu.layer_activations``).

With ``s`` the CP rank's tokens, ``b`` the microbatch, ``h`` the hidden size, ``t`` the TP
degree, ``p`` bytes per element:

* ``layernorm``: both norms' outputs, the QKV projection's input and the FFN's: ``p s b h``
  each, over ``t`` with sequence parallelism (whole on every TP rank without it); an MoE
  layer's FFN input is the router's, per local token (``job.memory.moe``);
* ``mla_up_proj``: the queries, keys and values the up projections make, ``p s b (heads
  head_dim + kv_heads (head_dim + v_head_dim)) / t`` (``job.compute.mla``'s widths), and the
  normed latents the up projections read, ``p s b (q_lora_rank + kv_lora_rank)`` (over ``t``
  with SP): Megatron-Core's MLA spec fuses the latent norms into the up projections
  (``column_parallel_layer_norm_linear`` with ``qk_layernorm``, ``q_layernorm`` /
  ``kv_layernorm`` ``IdentityOp``, gpt_layer_specs.py at NVIDIA/Megatron-LM 8f1c2f8), so the
  output-discarding checkpoint's input is the latents before the norm and the norm's output
  is not kept (``CheckpointWithoutOutput`` runs its function without autograd);
* ``mlp`` (dense layers): the FFN's hidden stash, ``matrices p s b f / t``;
* ``moe`` (MoE layers): the layer's stash beyond its input (``job.memory.moe``'s terms but the
  router's input): scores, dispatched tokens, fc1 and activation outputs, combined outputs
  (or the activation's probabilities: ``job.memory.moe.combine_stash``), shared experts;
* ``moe_act``: the activation's output, fc2's input: ``p R f_e / e`` (``R`` the routed tokens
  at the rank, ``e`` the expert TP);
* ``shared_experts``: the shared FFN's stash, ``p s b shared (up + f_e) / t``.
"""

from __future__ import annotations

from dlsched.job.communication.context_parallel import local_tokens
from dlsched.job.compute.module_recompute import modules_of
from dlsched.job.compute.moe_costs import load_factor
from dlsched.job.execution import Execution
from dlsched.job.memory.moe import combine_stash
from dlsched.job.model_spec import Model

SCORE_BYTES = 4  # the router's scores in FP32 (job.memory.moe)


def layer_saving(spec: Model, layout: Execution, p: int, moe: bool) -> float:
    """Bytes one layer (an MoE layer when ``moe``) no longer keeps per microbatch per GPU under
    ``layout.recompute``'s modules (module docstring); 0 without modules."""
    modules = modules_of(layout.recompute)
    if not modules:
        return 0.0
    s, b, h, t = local_tokens(spec, layout.cp), layout.microbatch_size, spec.hidden, layout.tp
    split = t if layout.sequence_parallel else 1
    saved = 0.0
    if "layernorm" in modules:
        saved += p * s * b * h / split + p * s * b * h / (t if moe else split)
    if "mla_up_proj" in modules and spec.kv_lora_rank:
        widths = spec.heads * spec.head_dim + spec.kv_heads * (spec.head_dim + spec.v_head_dim)
        saved += p * s * b * widths / t  # and the normed latents the checkpoint discards:
        saved += p * s * b * (spec.q_lora_rank + spec.kv_lora_rank) / split
    if not moe:
        return saved + (spec.ffn_matrices * p * s * b * spec.ffn_hidden / t
                        if "mlp" in modules else 0.0)
    fe, e = spec.expert_ffn_hidden, layout.etp
    up = (spec.ffn_matrices - 1) * fe
    local = b * s / t
    routed = local * e * spec.top_k * load_factor(spec)
    shared = p * b * s * spec.shared_experts * (up + fe) / t
    if "moe" in modules:
        return saved + (SCORE_BYTES * local * spec.experts + p * routed * h
                        + p * routed * (up + fe) / e + combine_stash(layout, p, routed, h)
                        + shared)
    saved += p * routed * fe / e if "moe_act" in modules else 0.0
    return saved + (shared if "shared_experts" in modules else 0.0)
