"""How a model's training memory is counted: activation precision, optimizer state per
parameter, and activation recomputation.

Defaults follow common practice for mixed-precision training (Megatron-LM, DeepSpeed): 16-bit
(bf16) activations, mixed-precision Adam with 16 bytes of static state per parameter (fp16
weights and gradients, fp32 master weights and two fp32 moments), no recomputation unless the
planner chooses it. Gradients are all-reduced at the model's parameter precision (fp32 in the
zoo, as with Megatron's fp32 gradient accumulation).

Transformer layers follow Korthikanti et al., "Reducing Activation Recomputation in Large
Transformer Models" (2022), section 4, per layer and microbatch of ``b`` sequences of ``s``
tokens, hidden size ``h``, ``a`` heads, ``p`` bytes per activation element (1-byte dropout
masks): ``s b h (16 p + 2) + a s^2 b (2 p + 1)`` bytes without recomputation — with p = 2 the
paper's ``s b h (34 + 5 a s / h)``; selective recomputation (the attention core is recomputed)
keeps ``s b h (16 p + 2)``; full recomputation keeps only the layer input ``p s b h`` and runs
the layer's forward again before its backward.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dlsched.errors import ConfigError

PRECISION_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
RECOMPUTE_MODES = ("none", "selective", "full")

# Attention heads of the zoo's transformers (hidden size, layers and sequence come from the zoo).
TRANSFORMER_HEADS = {"bert-base": 12, "bert-large": 16, "gpt2": 12, "gpt2-medium": 16,
                     "gpt2-large": 20, "gpt2-xl": 25, "gpt3-175b": 96}


@dataclass(frozen=True)
class MemoryModel:
    """Activation ``precision`` (fp32, bf16, fp16) and ``state_bytes_per_param`` (weights,
    gradients and optimizer state, bytes per parameter)."""

    precision: str = "bf16"
    state_bytes_per_param: float = 16.0

    def __post_init__(self) -> None:
        if self.precision not in PRECISION_BYTES:
            raise ConfigError(f"activation precision: {self.precision!r} is not one of "
                              + ", ".join(PRECISION_BYTES))
        if not 0 < self.state_bytes_per_param < 1e3:
            raise ConfigError(f"state bytes per parameter: {self.state_bytes_per_param} must be "
                              "in (0, 1000)")

    @property
    def activation_bytes(self) -> int:
        """Bytes per activation element."""
        return PRECISION_BYTES[self.precision]

    def describe(self) -> str:
        """One line for tables and notes."""
        return (f"{self.precision} activations, {self.state_bytes_per_param:g} B/param of "
                "weights+gradients+optimizer state")


def check_recompute(mode: str) -> str:
    """``mode`` if it is a recomputation mode, else ConfigError listing the accepted ones."""
    if mode not in RECOMPUTE_MODES:
        raise ConfigError(f"recompute: {mode!r} is not one of " + ", ".join(RECOMPUTE_MODES))
    return mode


def transformer_stash(seq: int, batch: int, hidden: int, heads: int, element_bytes: int,
                      mode: str) -> float:
    """Activation bytes one transformer layer keeps per microbatch (Korthikanti et al.)."""
    sbh = seq * batch * hidden
    if mode == "full":
        return float(element_bytes * sbh)
    linear = sbh * (16 * element_bytes + 2)
    if mode == "selective":
        return float(linear)
    return float(linear + heads * seq * seq * batch * (2 * element_bytes + 1))


def attention_core_flops(seq: int, batch: int, hidden: int) -> float:
    """Forward FLOP of one layer's attention core (scores and weighted sum): what selective
    recomputation runs again before the backward."""
    return 4.0 * batch * seq * seq * hidden


_LAYER_NAME = re.compile(r"^(h|encoder\.layer)\.\d+$")


def is_transformer_layer(block: str) -> bool:
    """True for a zoo block that is one transformer layer (``h.3``, ``encoder.layer.3``)."""
    return _LAYER_NAME.match(block) is not None


def transformer_shape(model_name: str) -> tuple[int, int, int] | None:
    """(sequence length, hidden size, heads) of a zoo transformer, None for other models."""
    if model_name not in TRANSFORMER_HEADS:
        return None
    from dlsched.models.zoo import BERT_SEQUENCE, BERT_SHAPES, GPT_SHAPES

    if model_name in GPT_SHAPES:
        hidden, _, seq = GPT_SHAPES[model_name]
    else:
        (hidden, _), seq = BERT_SHAPES[model_name], BERT_SEQUENCE
    return seq, hidden, TRANSFORMER_HEADS[model_name]
