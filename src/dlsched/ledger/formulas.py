"""Published counting formulas the ledger's rows are checked with.

* ``parameter_count``: the parameters of a dense (or MoE) decoder-only transformer from its
  shape: token embedding (and an untied output layer), learned position embeddings, attention
  with grouped key/value heads, a plain or gated (SwiGLU) FFN, biases and norms.
* ``sc21_iteration_flops``: Narayanan et al., SC 2021, Eq. 3, ``96 B s l h^2 (1 + s/6h +
  V/16lh)`` FLOP per iteration with full recomputation (the forward counted four times).
* ``sc21_training_days``: the same paper's Eq. 4, end-to-end training time ``8 T P / (n X)``.
* ``korthikanti_model_flops``: Korthikanti et al. 2022, Section 6's model FLOP per iteration,
  ``72 B s l h^2 (1 + s/6h + V/12hl)`` (no recomputation counted; MFU's numerator).
"""

from __future__ import annotations

from dlsched.job.model_spec import Model

SECONDS_PER_DAY = 86400.0


def parameter_count(shape: Model) -> int:
    """Parameters of ``shape`` (the main model: MTP modules not counted, as model cards count):
    embeddings, ``layers`` x (attention + FFN + two norms), and the final norm. Attention
    ``heads x head_dim`` wide (``hidden / heads`` unless ``head_dim`` is given), values
    ``v_head_dim`` wide when given, with ``qk_norm``'s two per-head RMSNorms of ``head_dim``
    and ``attention_sinks``' one logit per head; multi-head latent attention (``kv_lora_rank``
    > 0) as DeepSeek-V2/V3 define it: ``h x q_lora_rank`` and ``q_lora_rank x heads head_dim``
    (or ``h x heads head_dim`` without a query latent), ``h x (kv_lora_rank +
    qk_rope_head_dim)``, ``kv_lora_rank x heads (head_dim - qk_rope_head_dim + v_head_dim)``,
    the output ``heads v_head_dim x h`` and the two latent RMSNorms. Layer ``i`` is an MoE
    layer when ``i >= first_k_dense`` and ``i % moe_layer_freq == moe_layer_offset``: it holds
    ``experts`` routed and ``shared_experts`` FFNs of ``expert_ffn_hidden`` (``ffn_hidden``
    when 0) and a router of ``hidden x experts`` (and a bias per expert with ``bias``); the
    other layers a dense FFN of ``ffn_hidden``."""
    h, f, heads = shape.hidden, shape.ffn_hidden, shape.heads
    head_dim = shape.head_dim or h // heads
    value_dim = shape.v_head_dim or head_dim
    q, kv = heads * head_dim, shape.kv_heads * head_dim
    norm = h if shape.rms_norm else 2 * h  # LayerNorm: scale and shift
    if shape.kv_lora_rank:
        ql, kvl, rope = shape.q_lora_rank, shape.kv_lora_rank, shape.qk_rope_head_dim
        queries = h * ql + ql * q + ql if ql else h * q
        attention = (queries + h * (kvl + rope) + kvl * heads * (head_dim - rope + value_dim)
                     + kvl + heads * value_dim * h)
    else:
        values = shape.kv_heads * value_dim
        attention = h * q + h * kv + h * values + heads * value_dim * h
        attention += (q + kv + values + h) if shape.bias else 0
    attention += 2 * head_dim if shape.qk_norm else 0
    attention += heads if shape.attention_sinks else 0
    inputs = 2 if shape.gated_ffn else 1

    def ffn(width: int) -> int:
        return (inputs + 1) * h * width + ((inputs * width + h) if shape.bias else 0)

    dense = attention + ffn(f) + 2 * norm
    total = 0
    for index in range(shape.layers):
        moe = shape.experts > 0 and index >= shape.first_k_dense and \
            index % shape.moe_layer_freq == shape.moe_layer_offset
        if not moe:
            total += dense
            continue
        width = shape.expert_ffn_hidden or f
        total += (attention + (shape.experts + shape.shared_experts) * ffn(width)
                  + (h + shape.bias) * shape.experts + 2 * norm)
    embeddings = shape.vocab * h * (1 if shape.tied_embeddings else 2)
    if shape.learned_positions:
        embeddings += shape.seq * h
    return embeddings + total + norm


def sc21_iteration_flops(shape: Model, batch: int) -> float:
    """FLOP per iteration of ``batch`` sequences by SC21's Eq. 3 (full recomputation)."""
    b, s, depth, h, v = batch, shape.seq, shape.layers, shape.hidden, shape.vocab
    return 96.0 * b * s * depth * h * h * (1 + s / (6 * h) + v / (16 * depth * h))


def sc21_training_days(params: float, tokens: float, gpus: int, flops_per_gpu: float) -> float:
    """SC21's Eq. 4: days to train ``params`` on ``tokens`` with ``gpus`` GPUs each at
    ``flops_per_gpu`` FLOP/s, ``8 T P / (n X)``."""
    return 8.0 * tokens * params / (gpus * flops_per_gpu) / SECONDS_PER_DAY


def korthikanti_model_flops(shape: Model, batch: int) -> float:
    """Model FLOP per iteration of ``batch`` sequences (Korthikanti et al. 2022), without the
    recomputation: ``72 B s l h^2 (1 + s/6h + V/12hl)``."""
    b, s, depth, h, v = batch, shape.seq, shape.layers, shape.hidden, shape.vocab
    return 72.0 * b * s * depth * h * h * (1 + s / (6 * h) + v / (12 * h * depth))
