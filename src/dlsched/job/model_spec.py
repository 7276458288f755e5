"""What is trained: a decoder-only transformer's shape (the job planner's first input).

A ``Model`` holds what the cost, memory and parameter counts depend on: ``layers``,
``hidden`` size, ``heads`` (and ``kv_heads`` for grouped-query attention), the FFN's hidden size
(``ffn_hidden``; 4 x hidden by default, as GPT-2/3) and whether it is gated (``gated_ffn``: SwiGLU's
three matrices), ``vocab``ulary, ``seq``uence length in tokens, whether the input embedding and the
output projection share one matrix (``tied_embeddings``, as GPT-2/3 and Megatron-LM's GPT do),
``bias``es, RMSNorm (``rms_norm``) and learned positions (False: rotary). The bundled models are
the entries of presets/models.yaml, each with its source; Llama 3 8B/70B/405B are there with
their published shapes. Bundled specs: GPT-3 175B (Brown et al. 2020, Table 2.1), the
ten models of Megatron-LM SC21 Table 1 and the four of Korthikanti et al. 2022 Table 3; a YAML/JSON
file with the same fields gives any other.

Parameters (``parameters``): per layer ``12 h^2 + 13 h`` for a GPT layer (QKV 3h^2 + 3h, projection
h^2 + h, MLP 8h^2 + 5h, two layer norms 4h) in general ``h (h + 2 kv d) + (h + 2 kv d) + h^2 + h + 2
h f + f + h + 4 h`` with head size ``d = h / heads``; the embedding ``V h`` (plus ``V h`` again when
untied), learned positions ``s h`` and the final norm ``2 h``: 174.6B for GPT-3 175B (the paper's
"175B"); a gated FFN has ``3 h f`` weights, an RMSNorm ``h``: 8,030,261,248 for Llama 3 8B and
70,553,706,496 for 70B (their model cards' 8.03B and 70.6B).

Mixture of experts (``experts`` > 0): every ``moe_layer_freq``-th layer (layer ``i`` with ``i %
moe_layer_freq == 0``, Megatron-Core's ``--moe-layer-freq``) replaces its FFN by a router (an
``h x experts`` matrix, no bias), ``experts`` FFNs of width ``expert_ffn_hidden`` (each as the
dense FFN: gated or not, with biases or not) of which each token uses ``top_k``, and
``shared_experts`` FFNs of that width every token uses. ``capacity_factor`` caps the tokens an
expert takes at that multiple of the mean (None: dropless, Megatron-Core's default);
``router_imbalance`` is the busiest expert's tokens over the mean (1.0: a balanced router, the
assumption of a load-balancing loss that reached its target; see ``job.moe_costs``); ``router``
the score function (``softmax``: Mixtral, Switch; ``sigmoid``: DeepSeek-V3). Mixtral 8x7B
(Jiang et al. 2024, "Mixtral of Experts", Table 1: 32 layers, dim 4096, FFN 14336, 32 heads, 8
KV heads, vocabulary 32,000, 8 experts, top 2; SwiGLU, RMSNorm, rotary, untied as Mistral 7B):
46,702,792,704 parameters, 12,879,925,248 active (the paper's 46.7B / 12.9B, "13B active");
Mixtral 8x22B (Mistral AI's config.json of Mixtral-8x22B-v0.1: 56 layers, hidden 6144, FFN 16384,
48 heads, 8 KV heads, vocabulary 32,000, 8 experts, top 2): 140,620,634,112 and 39,152,031,744
(Mistral AI's announcement "Cheaper, Better, Faster, Stronger", 2024: 141B, 39B active).

Head size independent of hidden (``head_dim``; 0: ``hidden / heads``): the queries and the
attention's output are ``a = heads x head_dim`` wide (the QKV projection ``h x (a + 2 kv d)``, the
output projection ``a x h``, the attention core ``4 s a`` FLOP per token), keys and values
``kv_heads x head_dim``; ``qk_norm`` adds the per-head RMSNorms of queries and keys (``2 d``
weights per layer). Qwen3 dense, from Qwen's released config.json of Qwen/Qwen3-8B (checked
here: hidden 4096, 36 layers, 32 heads, 8 KV heads, head_dim 128, intermediate 12288,
vocabulary 151,936, tie_word_embeddings false, attention_bias false, SiLU, RMSNorm, rope) and
Qwen/Qwen3-32B (hidden 5120, 64 layers, 64 heads, 8 KV heads, head_dim 128, intermediate 25600,
vocabulary 151,936, untied; checked against the model card's figures as third-party pages
quote them and a Qwen3-32B fine-tune's config.json, not the original file): 8,190,735,360 and
32,762,123,264 parameters (the model cards' 8.2B and 32.8B).

Attention per layer (``attention_pattern``, ``attention_window``: ``job.attention_layers``;
GPT-OSS ``SF`` 128, Llama 4 ``CCCF`` 8192), ``attention_sinks`` (GPT-OSS: one learned logit per
head, ``heads`` parameters a layer, its FLOP negligible and not counted), the router's bias
with ``bias``; ``bias_dropout_fusion`` False: Megatron-Core's bias-dropout-add eager, as
Megatron-Bridge's GPT-OSS provider runs it (``job.compute.bias_dropout``); ``rope_fusion``
False: the rotary embedding eager, as Megatron-Bridge runs YaRN (``job.compute.unfused_rope``);
``attention_dropout`` the attention probabilities' dropout rate (Megatron-LM's and
Megatron-Core's default 0.1; at 0 the unfused core launches no dropout kernel,
``job.compute.attention_dropout``); ``hidden_dropout`` the rate of the dropouts after the
attention, the FFN and the embedding (Megatron-Core's default 0.1; at 0 no mask is kept,
``job.memory.dropout_masks``);
``moe_layer_offset`` shifts the MoE layers (Llama 4 Maverick: layers 1, 3, ...);
``router_groups`` / ``router_group_topk`` limit a token's experts to groups (DeepSeek-V3's
``n_group`` 8 / ``topk_group`` 4: node-limited routing, ``job.communication.moe_dispatch``).
GPT-OSS 20B / 120B: 20,914,757,184 / 116,829,156,672 parameters, 3,608,307,264 / 5,132,849,472
active without the input embedding (the card's 20.9B / 3.6B, 116.8B / 5.1B); Llama 4 Scout /
Maverick text models: 107,769,861,120 / 400,711,848,960, 17.17B / 17.18B active (tests/job/
test_today_models.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from dlsched.config import (
    bundled_presets,
    config_error,
    load_document,
    own_error,
    validate_document,
)
from dlsched.errors import ConfigError
from dlsched.job.attention_layers import check_pattern, kind_counts, mfu_keys
from dlsched.job.compute.mla import check_shape, mla_matmul_elements, mla_parameters
from dlsched.job.compute.mtp import mtp_forward_flops, mtp_parameters
from dlsched.models.zoo import DecoderShape

ROUTERS = ("softmax", "sigmoid")
# The sources' spellings a model document may use for two of its fields (the ledger's rows
# print them so): ``norm`` for ``rms_norm`` and ``position_embedding`` for
# ``learned_positions`` (None: not published, priced as rotary, i.e. no position table).
SPELLINGS: dict[str, tuple[str, dict[object, bool]]] = {
    "norm": ("rms_norm", {"layernorm": False, "rmsnorm": True}),
    "position_embedding": ("learned_positions", {"learned": True, "rope": False, None: False}),
}


# The fields a model takes by position, in order (``Model("gpt", 24, 2304, 24, 2048, 51200)``).
POSITIONAL = ("name", "layers", "hidden", "heads", "seq", "vocab")


class Model(DecoderShape):
    """What is trained: a decoder-only transformer (see the module docstring; sizes in
    elements, ``seq`` in tokens, ``params_published`` a parameter count, not billions). The
    one type of a model: a model file, an entry of presets/models.yaml, a ledger row's
    ``model`` section and the evaluator's input are all this class. It is the zoo's
    ``DecoderShape`` (FFN width, KV heads, gated FFN, biases, norm, positions, tied
    embeddings, head size) with its sizes, MoE layers and attention kinds added.

    Validated at the edge: field bounds by pydantic (``Model.load`` names the file), the
    relations between fields by ``_check`` (ConfigError ``model: FIELD ...``, raised as it is
    also from a direct ``Model(...)``); a field left 0 takes its default (``head_dim`` hidden /
    heads, ``ffn_hidden`` 4 x hidden, ``kv_heads`` heads, ``expert_ffn_hidden`` ffn_hidden,
    ``v_head_dim`` head_dim). ``source`` says where the shape is published; ``params_published``
    (optional) the parameter count the source states, kept to check the shape against;
    ``router_balance`` (MoE) how the measured run balanced its router: ``forced``
    (Megatron-Core's ``--moe-router-force-load-balancing``) or ``learned`` (the trained
    router); ``aux_loss`` (MoE) whether training computes the router's load-balancing loss
    (Megatron-Core's ``--moe-router-load-balancing-type aux_loss`` with a coefficient > 0: its
    kernels' launches, ``job.compute.moe_host``); ``norm`` / ``position_embedding`` are
    accepted as the sources' spellings of ``rms_norm`` / ``learned_positions``
    (``SPELLINGS``)."""

    name: str = "custom"
    layers: int = Field(ge=1, le=10_000)
    hidden: int = Field(ge=1, le=1_000_000)
    heads: int = Field(ge=1, le=100_000)
    seq: int = Field(ge=1, le=10_000_000)
    vocab: int = Field(ge=1, le=10_000_000)
    experts: int = Field(default=0, ge=0, le=100_000)
    top_k: int = Field(default=2, ge=1, le=100_000)
    expert_ffn_hidden: int = Field(default=0, ge=0, le=10_000_000)
    shared_experts: int = Field(default=0, ge=0, le=1_000)
    capacity_factor: float | None = Field(default=None, gt=0, le=1_000)
    moe_layer_freq: int = Field(default=1, ge=1, le=10_000)
    router: str = "softmax"
    router_imbalance: float = Field(default=1.0, ge=1.0, le=1_000)
    qk_norm: bool = False
    v_head_dim: int = Field(default=0, ge=0, le=100_000)
    q_lora_rank: int = Field(default=0, ge=0, le=1_000_000)
    kv_lora_rank: int = Field(default=0, ge=0, le=1_000_000)
    qk_rope_head_dim: int = Field(default=0, ge=0, le=100_000)
    first_k_dense: int = Field(default=0, ge=0, le=10_000)
    mtp_layers: int = Field(default=0, ge=0, le=100)
    attention_window: int = Field(default=0, ge=0, le=10_000_000)
    attention_pattern: str = Field(default="", max_length=10_000)
    attention_sinks: bool = False
    bias_dropout_fusion: bool = True
    rope_fusion: bool = True
    attention_dropout: float = Field(default=0.1, ge=0.0, lt=1.0)
    hidden_dropout: float = Field(default=0.1, ge=0.0, lt=1.0)
    moe_layer_offset: int = Field(default=0, ge=0, le=10_000)
    router_groups: int = Field(default=0, ge=0, le=100_000)
    router_group_topk: int = Field(default=0, ge=0, le=100_000)
    router_balance: Literal["forced", "learned"] | None = None
    aux_loss: bool = False
    params_published: float | None = Field(default=None, gt=0)
    source: str = ""

    def __init__(self, *sizes: Any, **data: Any) -> None:
        if len(sizes) > len(POSITIONAL):
            raise ConfigError(f"model: at most {len(POSITIONAL)} positional fields ("
                              + ", ".join(POSITIONAL) + f"); got {len(sizes)}")
        data.update(zip(POSITIONAL, sizes, strict=False))
        try:
            super().__init__(**data)
        except ValidationError as error:  # a check's own one-line error, else the fields'
            raise (own_error(error) or config_error(error, "model", type(self))) from None

    @classmethod
    def load(cls, document: object, source: str) -> Model:
        """A model from a file's document (``source`` names it in a field's error; a
        relation between fields is refused with its own ``model: ...`` line)."""
        return validate_document(cls, document, source, "model")

    def replace(self, **changes: Any) -> Model:
        """This model with ``changes`` (validated again, as a new model is)."""
        return type(self)(**{**self.model_dump(), **changes})

    @model_validator(mode="before")
    @classmethod
    def _spellings(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not set(SPELLINGS) & set(data):
            return data
        data = dict(data)
        for spelling, (field, values) in SPELLINGS.items():
            if spelling not in data:
                continue
            value = data.pop(spelling)
            if field in data:
                raise ConfigError(f"model: {spelling} and {field} name one field; give one")
            if value not in values:
                raise ConfigError(f"model: {spelling} {value!r} is not accepted; accepted: "
                                  + ", ".join(str(v) for v in values if v is not None))
            data[field] = values[value]
        return data

    @model_validator(mode="after")
    def _check(self) -> Model:
        if self.head_dim == 0:
            if self.hidden % self.heads:
                raise ConfigError(f"model: hidden {self.hidden} must be a multiple of heads "
                                  f"{self.heads} (or head_dim given)")
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        if self.ffn_hidden == 0:
            object.__setattr__(self, "ffn_hidden", 4 * self.hidden)
        if self.kv_heads == 0:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.heads % self.kv_heads:
            raise ConfigError(f"model: heads {self.heads} must be a multiple of kv_heads "
                              f"{self.kv_heads}")
        if self.experts:
            self._check_moe()
        check_shape(self)  # v_head_dim, MLA, first_k_dense, mtp_layers: job.compute.mla
        check_pattern(self.attention_pattern, self.attention_window)  # job.attention_layers
        return self

    def _check_moe(self) -> None:
        if not 1 <= self.top_k <= self.experts:
            raise ConfigError(f"model: top_k must be in 1..experts = {self.experts} (got "
                              f"{self.top_k})")
        if self.router_groups and (self.experts % self.router_groups
                                   or not 1 <= self.router_group_topk <= self.router_groups):
            raise ConfigError(f"model: router_groups must divide the {self.experts} experts and "
                              f"router_group_topk be in 1..router_groups (got "
                              f"{self.router_groups}, {self.router_group_topk})")
        if not 0 <= self.moe_layer_offset < self.moe_layer_freq:
            raise ConfigError(f"model: moe_layer_offset must be in 0..moe_layer_freq - 1 = "
                              f"{self.moe_layer_freq - 1} (got {self.moe_layer_offset})")
        if self.router not in ROUTERS:
            raise ConfigError(f"model: router {self.router!r} is not accepted; accepted: "
                              + ", ".join(ROUTERS))
        if self.expert_ffn_hidden == 0:
            object.__setattr__(self, "expert_ffn_hidden", self.ffn_hidden)

    @property
    def attention_width(self) -> int:
        """Width of the queries and of the attention's output (the output projection's
        input): ``heads x head_dim`` (``hidden`` unless ``head_dim`` is set otherwise)."""
        return self.heads * self.head_dim

    @property
    def value_width(self) -> int:
        """Width of the attention's output (the output projection's input): ``heads x
        v_head_dim``."""
        return self.heads * self.v_head_dim

    @property
    def qkv_width(self) -> int:
        """Output width of the fused QKV projection: queries plus keys and values."""
        return self.attention_width + self.kv_heads * (self.head_dim + self.v_head_dim)

    def attention_core_flops(self) -> float:
        """Forward FLOP per token of the attention core, per layer: scores ``2 s heads
        head_dim`` and context ``2 s heads v_head_dim`` (``4 s a`` when values are as wide as
        keys), ``s`` the keys of a full layer; averaged over the layers' attention kinds, a
        sliding or chunked layer counting ``min(w, s)`` keys (``job.attention_layers``)."""
        counts = kind_counts(self.attention_pattern, 0, self.layers)
        keys = sum(n * mfu_keys(kind, self.seq, self.attention_window)
                   for kind, n in counts.items()) / self.layers
        return 2.0 * keys * self.heads * (self.head_dim + self.v_head_dim)

    @property
    def ffn_matrices(self) -> int:
        """Weight matrices of ``h x ffn_hidden`` in the FFN: 3 gated (gate, up, down), else 2."""
        return 3 if self.gated_ffn else 2

    def norm_parameters(self) -> int:
        """One norm's parameters: RMSNorm's (or a bias-free LayerNorm's) scale, or LayerNorm's
        scale and shift."""
        return self.hidden if self.rms_norm or not self.bias else 2 * self.hidden

    @property
    def moe_layers(self) -> int:
        """Layers whose FFN is a mixture of experts."""
        return self.moe_layers_in(0, self.layers)

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer ``index`` (0 = first) is an MoE layer: from ``first_k_dense`` on,
        every ``moe_layer_freq``-th (DeepSeek-V3's ``first_k_dense_replace``: ``layer_idx >=
        first_k_dense_replace and layer_idx % moe_layer_freq == 0``)."""
        return self.experts > 0 and index >= self.first_k_dense and \
            index % self.moe_layer_freq == self.moe_layer_offset

    def moe_layers_in(self, start: int, stop: int) -> int:
        """MoE layers among layers ``start .. stop - 1``: the multiples of ``moe_layer_freq``
        from ``max(start, first_k_dense)`` on, ``moe_layer_offset`` past them (Llama 4's
        ``interleave_moe_layer_step`` 2: layers 1, 3, ...)."""
        start = max(start, self.first_k_dense)
        if not self.experts or stop <= start:
            return 0
        freq, offset = self.moe_layer_freq, self.moe_layer_offset
        return -(-(stop - offset) // freq) - -(-(start - offset) // freq)

    def ffn_parameters(self, width: int) -> int:
        """One FFN of hidden size ``width``: its matrices and (with ``bias``) biases."""
        biases = (self.ffn_matrices - 1) * width + self.hidden if self.bias else 0
        return self.ffn_matrices * self.hidden * width + biases

    def attention_parameters(self) -> int:
        """A layer's attention (QKV, projection, their biases), its two norms and (``qk_norm``)
        the per-head RMSNorms of queries and keys (``2 head_dim``)."""
        h, q, a = self.hidden, self.qkv_width, self.value_width
        qk = 2 * self.head_dim if self.qk_norm else 0
        qk += self.heads if self.attention_sinks else 0  # GPT-OSS: one logit per head
        if self.kv_lora_rank:  # multi-head latent attention: job.compute.mla
            return mla_parameters(self) + 2 * self.norm_parameters() + qk
        return h * q + a * h + (q + h if self.bias else 0) + 2 * self.norm_parameters() + qk

    def router_parameters(self) -> int:
        """The router's ``h x experts`` matrix of an MoE layer (0 for a dense model), and
        its bias with ``bias`` (GPT-OSS's router is a biased linear layer)."""
        return (self.hidden + self.bias) * self.experts

    def expert_parameters(self) -> int:
        """The routed experts of one MoE layer (what expert parallelism shards)."""
        return self.experts * self.ffn_parameters(self.expert_ffn_hidden)

    def layer_parameters(self, moe: bool = False) -> int:
        """Parameters of one transformer layer (weights, biases, two norms); ``moe``: an MoE
        layer's (router, routed and shared experts)."""
        if not moe:
            return self.attention_parameters() + self.ffn_parameters(self.ffn_hidden)
        return (self.attention_parameters() + self.router_parameters()
                + self.expert_parameters()
                + self.shared_experts * self.ffn_parameters(self.expert_ffn_hidden))

    def _layers_parameters(self, moe_layer: int) -> int:
        moe = self.moe_layers
        return (self.layers - moe) * self.layer_parameters() + moe * moe_layer

    def embedding_parameters(self) -> int:
        """Word embedding and learned positions (the input side)."""
        positions = self.seq * self.hidden if self.learned_positions else 0
        return self.vocab * self.hidden + positions

    def head_parameters(self) -> int:
        """Final norm and, when untied, the output projection."""
        untied = 0 if self.tied_embeddings else self.vocab * self.hidden
        return self.norm_parameters() + untied

    def parameters(self) -> int:
        """All parameters of the main model (without the MTP modules, as model cards count:
        ``mtp_parameters`` adds theirs)."""
        return (self._layers_parameters(self.layer_parameters(moe=True))
                + self.embedding_parameters() + self.head_parameters())

    def mtp_parameters(self, active: bool = False) -> int:
        """The MTP modules' own parameters (``job.compute.mtp``; ``active``: a token's)."""
        return mtp_parameters(self, active)

    def active_parameters(self) -> int:
        """Parameters one token uses: an MoE layer's ``top_k`` routed experts, not all."""
        routed = self.top_k * self.ffn_parameters(self.expert_ffn_hidden)
        active = self.layer_parameters(moe=True) - self.expert_parameters() + routed
        return (self._layers_parameters(active) + self.embedding_parameters()
                + self.head_parameters())

    def layer_matmul_elements(self, moe: bool = False) -> int:
        """Weight elements one token multiplies by in a layer (the ``top_k`` routed experts,
        the shared ones and the router of an MoE layer)."""
        h, q = self.hidden, self.qkv_width
        attention = (mla_matmul_elements(self) if self.kv_lora_rank
                     else h * q + self.value_width * h)
        if not moe:
            return attention + self.ffn_matrices * h * self.ffn_hidden
        experts = (self.top_k + self.shared_experts) * self.ffn_matrices * h * \
            self.expert_ffn_hidden
        return attention + experts + self.router_parameters()

    def model_flops_per_token(self) -> float:
        """Training FLOP per token without recomputation (MFU's numerator): the forward's
        matrix products x 3 (forward, and a backward of twice it): per layer 2 x its weight
        matrices' elements plus ``4 s a`` for the attention scores and context (causal mask not
        discounted; ``a = heads x head_dim``, ``h`` unless ``head_dim`` says otherwise), and
        ``2 V h`` for the logits; for a GPT ``72 h^2 + 12 s h`` per layer and
        ``6 V h``, Megatron-LM SC21's Eq. 3 without its recomputation pass; an MoE layer counts
        the experts a token uses (``layer_matmul_elements``)."""
        h, moe = self.hidden, self.moe_layers
        core = self.attention_core_flops()
        dense = 2 * self.layer_matmul_elements() + core
        sparse = 2 * self.layer_matmul_elements(moe=True) + core
        return 3.0 * ((self.layers - moe) * dense + moe * sparse + 2 * self.vocab * h
                      + mtp_forward_flops(self))


# The model's name before it was one type (kept importable: the same class, not a second type).


def bundled_specs() -> dict[str, Model]:
    """Every bundled model by name: the entries of presets/models.yaml (each a model file's
    fields with its ``source``)."""
    return {name: Model.load({**document, "name": name}, f"presets/models.yaml: {name}")
            for name, document in bundled_presets("models.yaml").items()}


def load_spec(name: str) -> Model:
    """A bundled model by name, or a spec file (.yaml/.yml/.json) by path; ConfigError of
    field ``model`` otherwise, or with the file's own error (the CLI names its option)."""
    specs = bundled_specs()
    if name in specs:
        return specs[name]
    if name.lower().endswith((".yaml", ".yml", ".json")):
        if not Path(name).is_file():
            raise ConfigError(f"no such file {name!r}", "model")
        try:
            return Model.load(load_document(name), name)
        except ConfigError as error:  # the file's own error, named by the field too
            raise ConfigError(str(error), "model") from None
    raise ConfigError(f"unknown model {name!r}; accepted: {', '.join(specs)} or a spec file "
                      "(.yaml/.json)", "model")
