"""Multi-head latent attention (MLA; DeepSeek-AI, "DeepSeek-V2", 2024, Sec. 2.1; "DeepSeek-V3
Technical Report", 2024, Sec. 2.1.1): its parameters, FLOP, ops, training stash and TP exchange.

A spec is MLA when ``kv_lora_rank`` > 0. Per layer and token ``x`` (``h`` wide):

- queries: ``c_q = RMSNorm(x W_dq)`` (``q_lora_rank`` wide; no compression when
  ``q_lora_rank`` is 0: ``x`` itself), ``q = c_q W_uq`` (``heads x head_dim``), each head's
  last ``qk_rope_head_dim`` elements rotated (the decoupled rotary part);
- keys and values: ``[c_kv, k_r] = x W_dkv`` (``kv_lora_rank + qk_rope_head_dim``: the latent
  and the one rotary key all heads share), ``c_kv`` RMSNormed, ``[k_c, v] = c_kv W_ukv``
  (``heads x (head_dim - qk_rope_head_dim + v_head_dim)``); each head's key is ``[k_c, k_r]``
  (``head_dim`` = ``qk_nope_head_dim + qk_rope_head_dim`` wide), its value ``v_head_dim``;
- the attention core: scores ``2 s heads head_dim`` and context ``2 s heads v_head_dim`` FLOP
  per token (no causal discount, as ``Model.model_flops_per_token``);
- the output projection ``heads x v_head_dim -> h``. No biases (``attention_bias`` false).

DeepSeek-V3 (its released config.json: hidden 7168, 128 heads, q_lora_rank 1536, kv_lora_rank
512, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128): 187,107,328 attention weights
per layer (``mla_parameters``, norms included).

**Tensor parallelism as Megatron-Core runs it** (``megatron/core/transformer/
multi_latent_attention.py``, ``MLASelfAttention``, read at NVIDIA/Megatron-LM 003b4ce): with
Transformer Engine's spec the down projections ``linear_q_down_proj`` and
``linear_kv_down_proj`` are ``TELinear`` with ``parallel_mode='duplicated'``: **replicated** on
every TP rank, applied to the rank's own tokens (``s / t`` of them under sequence parallelism,
all ``s`` without), as are ``q_layernorm`` and ``kv_layernorm``; the up projections
(``linear_q_up_proj``, ``linear_kv_up_proj``) are column-parallel (heads split) and
``linear_proj`` row-parallel. Under sequence parallelism the exchange entering the attention is
therefore not the ``h``-wide layer input but the latents: the up projections all-gather ``c_q``
and ``c_kv`` and ``k_r`` is all-gathered (``gather_from_sequence_parallel_region``):
``q_lora_rank + kv_lora_rank + qk_rope_head_dim`` elements per token (2,112 for DeepSeek-V3
against 7,168); the exit is the usual ``h``-wide reduce-scatter. Without sequence parallelism
the exchanges stay ``h``-wide all-reduces (``attention_exchange_width``).

**Context parallelism**: after the up projections MLA is multi-head attention with ``heads``
key/value heads, keys ``head_dim`` and values ``v_head_dim`` wide; the ring passes those
(``job.context_parallel``), not the latent.

**Training stash** (16-bit elements per token, beside the layer input and norm a dense layer
keeps): ``c_q`` before and after its norm (``2 q_lora_rank``: the norm's and ``W_uq``'s inputs),
``c_kv`` likewise (``2 kv_lora_rank``), all replicated over TP without sequence parallelism and
split with it, then the queries, keys (``heads head_dim`` each), values and the core's output
(``heads v_head_dim`` each) split over TP. No KV cache (training).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from dlsched.errors import ConfigError
from dlsched.models.layer import Layer
from dlsched.models.layer_builder import LayerBuilder
from dlsched.models.ops import Op, attention_core, elementwise
from dlsched.models.zoo import TransformerModel

if TYPE_CHECKING:
    from dlsched.job.model_spec import Model


def is_mla(spec: Model) -> bool:
    """Whether ``spec``'s attention is multi-head latent attention."""
    return spec.kv_lora_rank > 0


def nope_dim(spec: Model) -> int:
    """Each head's query/key elements without rotation (``qk_nope_head_dim``)."""
    return spec.head_dim - spec.qk_rope_head_dim


def projections(spec: Model) -> list[tuple[str, int, int, bool]]:
    """MLA's weight matrices in forward order: (name, fan in, fan out, split over TP)."""
    h, heads = spec.hidden, spec.heads
    q = spec.heads * spec.head_dim
    out: list[tuple[str, int, int, bool]] = []
    if spec.q_lora_rank:
        out += [("q_down", h, spec.q_lora_rank, False), ("q_up", spec.q_lora_rank, q, True)]
    else:
        out.append(("q", h, q, True))
    out += [("kv_down", h, spec.kv_lora_rank + spec.qk_rope_head_dim, False),
            ("kv_up", spec.kv_lora_rank, heads * (nope_dim(spec) + spec.v_head_dim), True),
            ("proj", heads * spec.v_head_dim, h, True)]
    return out


def latent_norm_parameters(spec: Model) -> int:
    """The RMSNorms of the query and key-value latents (replicated over TP)."""
    return spec.q_lora_rank + spec.kv_lora_rank


def mla_matmul_elements(spec: Model) -> int:
    """Weight elements one token multiplies by in MLA's projections."""
    return sum(fan_in * fan_out for _, fan_in, fan_out, _ in projections(spec))


def mla_parameters(spec: Model) -> int:
    """MLA's parameters in one layer: projections and latent norms (the layer's two
    ``h``-wide norms are the caller's)."""
    return mla_matmul_elements(spec) + latent_norm_parameters(spec)


def replicated_matmul_elements(spec: Model) -> int:
    """The down projections' weights, whole on every TP rank (module docstring)."""
    return sum(fan_in * fan_out for _, fan_in, fan_out, split in projections(spec)
               if not split)


def attention_exchange_width(spec: Model, sequence_parallel: bool) -> int:
    """Elements per token of the TP collective entering the attention: the latents under
    sequence parallelism for MLA (module docstring), else ``hidden``."""
    if not is_mla(spec) or not sequence_parallel:
        return spec.hidden
    return (spec.q_lora_rank or spec.hidden) + spec.kv_lora_rank + spec.qk_rope_head_dim


def stash_widths(spec: Model) -> tuple[int, int]:
    """(elements per token kept whole on every TP rank without sequence parallelism, elements
    split over TP) of MLA's stash beyond the layer input (module docstring)."""
    latent = 2 * (spec.q_lora_rank + spec.kv_lora_rank)
    split = 2 * spec.heads * spec.head_dim + 2 * spec.heads * spec.v_head_dim
    return latent, split


def core_ops(spec: Model, queries: int, keys: int, heads: int,
             attention: str) -> tuple[Op, ...]:
    """The attention core per sample of ``heads`` heads, ``queries`` attending ``keys``:
    keys ``head_dim`` and values ``v_head_dim`` wide. The fused kernel is priced on the mean
    width ``(head_dim + v_head_dim) / 2`` (its FLOP ``2 q k heads (head_dim + v_head_dim)`` and
    its traffic exact); the unfused products at their own widths."""
    d, dv = spec.head_dim, spec.v_head_dim
    if attention == "unfused":
        scores = heads * queries * keys
        q, k, v = queries * heads * d, keys * heads * d, keys * heads * dv
        return (Op("gemm", 2 * queries * keys * heads * d, q + k + scores, label="scores",
                   shape=(queries, keys, d, heads)),
                elementwise("softmax", scores), elementwise("attention-dropout", scores, 2.5),
                Op("gemm", 2 * queries * keys * heads * dv, scores + v + queries * heads * dv,
                   label="context", shape=(queries, dv, keys, heads)),
                elementwise("merge-heads", queries * heads * dv))
    width = heads * (d + dv) // 2
    return (attention_core("flash-attention", queries, width, heads, causal=True, keys=keys,
                           kv_hidden=width,
                           kind="fused_attention" if attention == "fused" else "attention"),)


def with_mla(model: TransformerModel, spec: Model, queries: int, keys: int,
             heads: int, attention: str) -> TransformerModel:
    """``model`` (the zoo's decoder of ``spec``'s shape, ``models.zoo.gpt_model``) with each
    layer's QKV and output projections replaced by MLA's (``queries``, ``keys``, ``heads``: its
    attention core's shape per sample, as the zoo's ``core``). The down projections and the
    latent norms are not split over TP (``Op.split`` False: repeated on every TP rank, divided
    under sequence parallelism, as Megatron-Core's duplicated ``TELinear`` on sequence-parallel
    tokens)."""
    tokens = model.shape.seq if model.shape else spec.seq
    layers: list[Layer] = []
    for layer in model.layers:
        block = layer.block
        if layer.name == f"{block}.attn.c_attn.weight":
            layers += _mla_layers(spec, block, tokens, queries, keys, heads, attention,
                                  model.dtype_bytes)
        elif layer.name == f"{block}.attn.c_proj.weight":
            layers += _projection(spec, block, tokens, layer, model.dtype_bytes)
        else:
            layers.append(layer)
    return replace(model, layers=tuple(layers))


def _mla_layers(spec: Model, block: str, tokens: int, queries: int, keys: int,
                heads: int, attention: str, dtype_bytes: int) -> list[Layer]:
    out = LayerBuilder(dtype_bytes)
    ops = core_ops(spec, queries, keys, heads, attention)
    for name, fan_in, fan_out, split in projections(spec)[:-1]:
        prefix = f"{block}.attn.{name}"
        last = name == "kv_up"
        out.linear(prefix, fan_in, fan_out, tokens, block, bias=False,
                   extra_flops=sum(op.flops for op in ops) if last else 0.0,
                   cast_input=not split)
        if not split:
            out.layers[-1] = replace(out.layers[-1], ops=tuple(
                replace(op, split=False) for op in out.layers[-1].ops))
            width = fan_out - (spec.qk_rope_head_dim if name == "kv_down" else 0)
            out.norm(f"{block}.attn.{name[:-5]}_norm", width, width * tokens, block,
                     split=False, bias=False)
        if last:
            out.attach(*ops)
    return out.layers


def _projection(spec: Model, block: str, tokens: int, zoo: Layer,
                dtype_bytes: int) -> list[Layer]:
    """The output projection from ``heads x v_head_dim`` with the zoo's residual op."""
    out = LayerBuilder(dtype_bytes)
    out.linear(f"{block}.attn.c_proj", spec.heads * spec.v_head_dim, spec.hidden, tokens,
               block, bias=False)
    out.attach(*zoo.ops[1:])
    return out.layers


def check_shape(spec: Model) -> None:
    """Fill ``v_head_dim`` (0: ``head_dim``) and raise ConfigError naming the field when the
    attention's widths, ``first_k_dense`` or ``mtp_layers`` cannot hold."""
    if spec.v_head_dim < 0:
        raise ConfigError(f"model: v_head_dim must be >= 1, or 0 for head_dim (got "
                          f"{spec.v_head_dim})")
    if spec.v_head_dim == 0:
        object.__setattr__(spec, "v_head_dim", spec.head_dim)
    if spec.kv_lora_rank < 0 or spec.q_lora_rank < 0:
        raise ConfigError("model: q_lora_rank and kv_lora_rank must be >= 0 (got "
                          f"{spec.q_lora_rank}, {spec.kv_lora_rank})")
    if not spec.kv_lora_rank and (spec.q_lora_rank or spec.qk_rope_head_dim):
        raise ConfigError("model: q_lora_rank and qk_rope_head_dim need multi-head latent "
                          "attention; accepted: kv_lora_rank > 0, or both 0")
    if spec.kv_lora_rank and not 0 < spec.qk_rope_head_dim < spec.head_dim:
        raise ConfigError(f"model: qk_rope_head_dim must be in 1..head_dim - 1 = "
                          f"{spec.head_dim - 1} with MLA (head_dim is qk_nope_head_dim + "
                          f"qk_rope_head_dim; got {spec.qk_rope_head_dim})")
    if spec.kv_lora_rank and spec.kv_heads != spec.heads:
        raise ConfigError(f"model: kv_heads must equal heads ({spec.heads}) with MLA (each "
                          f"head's key and value come from the latent; got {spec.kv_heads})")
    if not 0 <= spec.first_k_dense <= spec.layers:
        raise ConfigError(f"model: first_k_dense must be in 0..layers = {spec.layers} (got "
                          f"{spec.first_k_dense})")
    if spec.mtp_layers < 0:
        raise ConfigError(f"model: mtp_layers must be >= 0 (got {spec.mtp_layers})")


def replicated_parameters(spec: Model) -> int:
    """Attention parameters whole on every TP rank beyond the layer's norms: MLA's down
    projections and latent norms (module docstring); 0 otherwise."""
    if not is_mla(spec):
        return 0
    return replicated_matmul_elements(spec) + latent_norm_parameters(spec)


def attention_stash_delta(spec: Model) -> int:
    """Elements per token the attention keeps beyond the four ``h``-wide tensors of
    Korthikanti et al.'s derivation (queries, keys, values, the output projection's input),
    split over TP: queries ``heads head_dim``, keys ``kv_heads head_dim``, values ``kv_heads
    v_head_dim``, the core's output ``heads v_head_dim`` (MLA: ``kv_heads = heads``)."""
    return (spec.heads * spec.head_dim + spec.kv_heads * (spec.head_dim + spec.v_head_dim)
            + spec.heads * spec.v_head_dim - 4 * spec.hidden)


def latent_stash(spec: Model) -> int:
    """Elements per token of MLA's latents kept for the backward (``stash_widths``' first),
    whole on every TP rank without sequence parallelism; 0 without MLA."""
    return stash_widths(spec)[0] if is_mla(spec) else 0
