"""What is trained: a decoder-only transformer's shape (the job planner's first input).

A ``TransformerSpec`` holds what the cost, memory and parameter counts depend on: ``layers``,
``hidden`` size, ``heads`` (and ``kv_heads`` for grouped-query attention), the FFN's hidden size
(``ffn_hidden``; 4 x hidden by default, as GPT-2/3) and whether it is gated (``gated_ffn``: SwiGLU's
three matrices), ``vocab``ulary, ``seq``uence length in tokens, whether the input embedding and the
output projection share one matrix (``tied_embeddings``, as GPT-2/3 and Megatron-LM's GPT do),
``bias``es, RMSNorm (``rms_norm``) and learned positions (False: rotary). Llama 3 8B/70B/405B are
bundled with their published shapes. Bundled specs: GPT-3 175B (Brown et al. 2020, Table 2.1), the
ten models of Megatron-LM SC21 Table 1 and the four of Korthikanti et al. 2022 Table 3; a YAML/JSON
file with the same fields gives any other.

Parameters (``parameters``): per layer ``12 h^2 + 13 h`` for a GPT layer (QKV 3h^2 + 3h, projection
h^2 + h, MLP 8h^2 + 5h, two layer norms 4h) in general ``h (h + 2 kv d) + (h + 2 kv d) + h^2 + h + 2
h f + f + h + 4 h`` with head size ``d = h / heads``; the embedding ``V h`` (plus ``V h`` again when
untied), learned positions ``s h`` and the final norm ``2 h``: 174.6B for GPT-3 175B (the paper's
"175B"); a gated FFN has ``3 h f`` weights, an RMSNorm ``h``: 8,030,261,248 for Llama 3 8B and
70,553,706,496 for 70B (their model cards' 8.03B and 70.6B).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from dlsched.config import load_document, validate
from dlsched.errors import ConfigError


@dataclass(frozen=True)
class TransformerSpec:
    """A decoder-only transformer (see the module docstring; sizes in elements, ``seq`` in
    tokens)."""

    name: str
    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int
    ffn_hidden: int = 0
    kv_heads: int = 0
    tied_embeddings: bool = True
    gated_ffn: bool = False
    bias: bool = True
    rms_norm: bool = False
    learned_positions: bool = True

    def __post_init__(self) -> None:
        for field in ("layers", "hidden", "heads", "seq", "vocab"):
            if getattr(self, field) < 1:
                raise ConfigError(f"model: {field} must be >= 1 (got {getattr(self, field)})")
        if self.hidden % self.heads:
            raise ConfigError(f"model: hidden {self.hidden} must be a multiple of heads "
                              f"{self.heads}")
        if self.ffn_hidden == 0:
            object.__setattr__(self, "ffn_hidden", 4 * self.hidden)
        if self.kv_heads == 0:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.heads % self.kv_heads:
            raise ConfigError(f"model: heads {self.heads} must be a multiple of kv_heads "
                              f"{self.kv_heads}")

    @property
    def head_dim(self) -> int:
        """Elements per attention head."""
        return self.hidden // self.heads

    @property
    def qkv_width(self) -> int:
        """Output width of the fused QKV projection: queries plus keys and values."""
        return self.hidden + 2 * self.kv_heads * self.head_dim

    @property
    def ffn_matrices(self) -> int:
        """Weight matrices of ``h x ffn_hidden`` in the FFN: 3 gated (gate, up, down), else 2."""
        return 3 if self.gated_ffn else 2

    def _norm_parameters(self) -> int:
        return self.hidden if self.rms_norm or not self.bias else 2 * self.hidden

    def layer_parameters(self) -> int:
        """Parameters of one transformer layer (weights, biases, two norms)."""
        h, f, q = self.hidden, self.ffn_hidden, self.qkv_width
        weights = h * q + h * h + self.ffn_matrices * h * f
        up = (self.ffn_matrices - 1) * f
        biases = q + h + up + h if self.bias else 0
        return weights + biases + 2 * self._norm_parameters()

    def embedding_parameters(self) -> int:
        """Word embedding and learned positions (the input side)."""
        positions = self.seq * self.hidden if self.learned_positions else 0
        return self.vocab * self.hidden + positions

    def head_parameters(self) -> int:
        """Final norm and, when untied, the output projection."""
        untied = 0 if self.tied_embeddings else self.vocab * self.hidden
        return self._norm_parameters() + untied

    def parameters(self) -> int:
        """All parameters."""
        return (self.layers * self.layer_parameters() + self.embedding_parameters()
                + self.head_parameters())

    def model_flops_per_token(self) -> float:
        """Training FLOP per token without recomputation (MFU's numerator): the forward's
        matrix products x 3 (forward, and a backward of twice it): per layer 2 x its weight
        matrices' elements plus ``4 s h`` for the attention scores and context (causal mask not
        discounted), and ``2 V h`` for the logits; for a GPT ``72 h^2 + 12 s h`` per layer and
        ``6 V h``, Megatron-LM SC21's Eq. 3 without its recomputation pass."""
        h, s, f = self.hidden, self.seq, self.ffn_hidden
        per_layer = 2 * (h * self.qkv_width + h * h + self.ffn_matrices * h * f) + 4 * s * h
        return 3.0 * (self.layers * per_layer + 2 * self.vocab * h)


SC21_SHAPES = {  # name: (layers, hidden, heads); SC21 Table 1, sequence 2048, vocabulary 51,200
    "gpt-1.7b": (24, 2304, 24), "gpt-3.6b": (30, 3072, 32), "gpt-7.5b": (36, 4096, 32),
    "gpt-18.4b": (40, 6144, 48), "gpt-39.1b": (48, 8192, 64), "gpt-76.1b": (60, 10240, 80),
    "gpt-145.6b": (80, 12288, 96), "gpt-310.1b": (96, 16384, 128),
    "gpt-529.6b": (105, 20480, 128), "gpt-1008b": (128, 25600, 160)}
KORTHIKANTI_SHAPES = {  # Korthikanti et al. 2022, Table 3: sequence 2048, vocabulary 51,200
    "gpt-22b": (48, 6144, 64), "gpt3-175b": (96, 12288, 96), "mt-nlg-530b": (105, 20480, 128),
    "gpt-1t": (128, 25600, 160)}


# Llama 3 (Meta, "The Llama 3 Herd of Models", 2024, Table 3; the model cards' config.json):
# layers, hidden, FFN, heads, KV heads; vocabulary 128,256, 8,192-token pre-training context,
# SwiGLU, RMSNorm, rotary positions, no biases, untied output projection.
LLAMA3_SHAPES = {"llama3-8b": (32, 4096, 14336, 32, 8), "llama3-70b": (80, 8192, 28672, 64, 8),
                 "llama3-405b": (126, 16384, 53248, 128, 8)}


def bundled_specs() -> dict[str, TransformerSpec]:
    """Every bundled model by name."""
    shapes = {**SC21_SHAPES, **KORTHIKANTI_SHAPES}
    specs = {name: TransformerSpec(name, layers, hidden, heads, 2048, 51200)
             for name, (layers, hidden, heads) in shapes.items()}
    for name, (layers, hidden, ffn, heads, kv) in LLAMA3_SHAPES.items():
        specs[name] = TransformerSpec(name, layers, hidden, heads, 8192, 128256, ffn, kv,
                                      tied_embeddings=False, gated_ffn=True, bias=False,
                                      rms_norm=True, learned_positions=False)
    return specs


class TransformerFile(BaseModel):
    """A transformer spec file: the ``TransformerSpec`` fields."""

    model_config = ConfigDict(extra="forbid")
    name: str = "custom"
    layers: int = Field(ge=1, le=10_000)
    hidden: int = Field(ge=1, le=1_000_000)
    heads: int = Field(ge=1, le=100_000)
    seq: int = Field(ge=1, le=10_000_000)
    vocab: int = Field(ge=1, le=10_000_000)
    ffn_hidden: int = Field(default=0, ge=0, le=10_000_000)
    kv_heads: int = Field(default=0, ge=0, le=100_000)
    tied_embeddings: bool = True
    gated_ffn: bool = False
    bias: bool = True
    rms_norm: bool = False
    learned_positions: bool = True


def load_spec(name: str) -> TransformerSpec:
    """A bundled model by name, or a spec file (.yaml/.yml/.json) by path."""
    specs = bundled_specs()
    if name in specs:
        return specs[name]
    if name.lower().endswith((".yaml", ".yml", ".json")):
        if not Path(name).is_file():
            raise ConfigError(f"--model: no such file {name!r}")
        data = validate(TransformerFile, load_document(name), name)
        return TransformerSpec(**data.model_dump())
    raise ConfigError(f"--model: unknown model {name!r}; accepted: {', '.join(specs)} or a "
                      "spec file (.yaml/.json)")
