"""A zoo of real architectures: one Layer per parameter tensor, in ``named_parameters()`` order.

Parameter counts equal the reference implementations (torchvision for VGG and ResNet, Hugging
Face ``BertModel`` and ``GPT2Model`` for the transformers). Each layer carries the forward FLOP
of its operation per sample (the whole op on its weight tensor; biases and norms count their
elementwise work), the bytes of the op's output activation per sample, and ``block``, the
enclosing module, so planners can coarsen tensors into blocks. Inputs: 224x224 images,
sequence length 128 for BERT, 1024 for GPT-2 and 2048 for the GPT-3-like model. A GPT's tied
LM head (logits = hidden x wte^T) is counted on its final layer norm, where that matmul runs.

Each layer also lists the ops it runs (``models.ops``: kind, FLOP, memory traffic, kernels) as
the reference implementation runs them in training mode: torchvision's modules, Hugging Face's
``BertModel``/``GPT2Model`` with PyTorch SDPA attention (GPT-2's ``gelu_new`` is eight
elementwise kernels), and for GPT-3 175B, Transformer-1T and ``megatron_gpt`` models
Megatron-LM's fused kernels (fused layer norm, scale-mask-softmax, bias-GELU and
bias-dropout-add) with its unfused attention products. A module's ops sit on its weight layer;
per block, the ops' FLOP equal the layers' ``forward_flops``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

from pydantic import BaseModel, ConfigDict, Field

from dlsched.errors import ConfigError
from dlsched.models.layer import Model
from dlsched.models.layer_builder import LayerBuilder
from dlsched.models.megatron_loss import megatron_cross_entropy
from dlsched.models.ops import Op, attention_core, conv, elementwise, matmul, norm


@dataclass(frozen=True)
class TransformerShape:
    """What activation memory depends on in a zoo transformer: sequence length (tokens per
    sample), hidden size, attention heads, and the vocabulary of its LM head (0: none)."""

    seq: int
    hidden: int
    heads: int
    vocab: int = 0


@dataclass(frozen=True)
class TransformerModel(Model):
    """A zoo transformer: its layers and its ``shape`` (``TransformerShape``)."""

    shape: TransformerShape | None = None


VGG_CONFIGS = {
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
              512, 512, 512, "M"],
    "vgg19": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
              512, 512, 512, 512, "M"],
}


def vgg(name: str, dtype_bytes: int = 4) -> Model:
    """torchvision VGG-16/19 (no batch norm): 3x3 convolutions then three linear layers."""
    out = LayerBuilder(dtype_bytes)
    channels, side, index = 3, 224, 0
    for item in VGG_CONFIGS[name]:
        if item == "M":
            out.attach(elementwise("maxpool", channels * side * side * 1.25, passes=1))
            side //= 2
            index += 1
            continue
        width = int(item)
        block = f"features.{index}"
        maps = width * side * side
        out.add(f"{block}.weight", 9 * channels * width, 2 * 9 * channels * width * side * side,
                maps, block, (conv(block, channels, width, 3, side, side,
                                   first=index == 0),))
        out.add(f"{block}.bias", width, maps, maps, block,
                (elementwise("bias", maps, 2, maps), elementwise("relu", maps)))
        channels, index = width, index + 2
    out.attach(elementwise("avgpool", 2 * 25088, passes=1))
    for position, (fan_in, fan_out) in zip((0, 3, 6), ((25088, 4096), (4096, 4096), (4096, 1000)),
                                           strict=True):
        out.linear(f"classifier.{position}", fan_in, fan_out, 1, f"classifier.{position}")
        if fan_out == 4096:
            out.attach(elementwise("relu", fan_out), elementwise("dropout", fan_out, 2.5))
    return Model(name, tuple(out.layers), dtype_bytes)


def _conv(out: LayerBuilder, names: tuple[str, str], c_in: int, c_out: int, kernel: int,
          sides: tuple[int, int], block: str, relu: bool = True) -> None:
    """A bias-free convolution ``names[0]`` from a ``sides[0]`` to a ``sides[1]`` square map,
    then its BatchNorm ``names[1]`` (and a ReLU when ``relu``); the stem's convolution casts
    the FP32 image under autocast."""
    conv_name, norm_name = names
    elements = c_out * sides[1] * sides[1]
    out.add(f"{conv_name}.weight", kernel * kernel * c_in * c_out,
            2 * kernel * kernel * c_in * elements, elements, block,
            (conv(conv_name, c_in, c_out, kernel, *sides, first=block == "stem"),))
    out.norm(norm_name, c_out, elements, block, layer_norm=False)
    if relu:
        out.attach(elementwise("relu", elements))


RESNET_DEPTHS = {"resnet50": (3, 4, 6, 3), "resnet101": (3, 4, 23, 3), "resnet152": (3, 8, 36, 3)}


def resnet(name: str, dtype_bytes: int = 4) -> Model:
    """torchvision ResNet-50/101/152 (v1.5: the stride sits on the 3x3 convolution)."""
    out = LayerBuilder(dtype_bytes)
    _conv(out, ("conv1", "bn1"), 3, 64, 7, (224, 112), "stem")
    out.attach(elementwise("maxpool", 64 * 112 * 112 * 1.25, passes=1))
    inplanes, side = 64, 56
    for stage, (blocks, planes) in enumerate(zip(RESNET_DEPTHS[name], (64, 128, 256, 512),
                                                 strict=True), start=1):
        for index in range(blocks):
            block = f"layer{stage}.{index}"
            stride = 2 if stage > 1 and index == 0 else 1
            out_side = side // stride
            _conv(out, (f"{block}.conv1", f"{block}.bn1"), inplanes, planes, 1, (side, side),
                  block)
            _conv(out, (f"{block}.conv2", f"{block}.bn2"), planes, planes, 3, (side, out_side),
                  block)
            _conv(out, (f"{block}.conv3", f"{block}.bn3"), planes, planes * 4, 1,
                  (out_side, out_side), block, relu=False)
            if index == 0:
                _conv(out, (f"{block}.downsample.0", f"{block}.downsample.1"), inplanes,
                      planes * 4, 1, (side, out_side), block, relu=False)
            maps = planes * 4 * out_side * out_side
            out.attach(_add("residual", maps, fp32=False), elementwise("relu", maps))
            inplanes, side = planes * 4, out_side
    out.linear("fc", 2048, 1000, 1, "fc")
    out.attach(elementwise("avgpool", 2048 * 50, passes=1))
    return Model(name, tuple(out.layers), dtype_bytes)


BERT_SHAPES = {"bert-base": (768, 12), "bert-large": (1024, 24)}
BERT_HEADS = {"bert-base": 12, "bert-large": 16}
BERT_VOCAB, BERT_POSITIONS, BERT_SEQUENCE = 30522, 512, 128


def bert(name: str, dtype_bytes: int = 4, sequence: int = BERT_SEQUENCE) -> TransformerModel:
    """Hugging Face BertModel (embeddings, encoder, pooler) at ``sequence`` tokens per sample
    (default 128, at most the 512 positions)."""
    if not 1 <= sequence <= BERT_POSITIONS:
        raise ConfigError(f"sequence: {sequence} must be in 1..{BERT_POSITIONS}")
    hidden, depth = BERT_SHAPES[name]
    seq, out = sequence, LayerBuilder(dtype_bytes)
    sh = seq * hidden
    for table, rows in (("word", BERT_VOCAB), ("position", BERT_POSITIONS), ("token_type", 2)):
        out.add(f"embeddings.{table}_embeddings.weight", rows * hidden, sh, sh, "embeddings",
                (_gather(sh),))
    out.attach(elementwise("add", sh, 3, kernels=2, fp32=True, backward_kernels=0))
    out.norm("embeddings.LayerNorm", hidden, sh, "embeddings")
    out.attach(elementwise("dropout", sh, 2.5, fp32=True))
    for index in range(depth):
        block = f"encoder.layer.{index}"
        attention = 2 * 2 * seq * seq * hidden  # scores QK^T and the weighted sum
        out.linear(f"{block}.attention.self.query", hidden, hidden, seq, block,
                   extra_flops=attention, cast_input=True, summed_grads=2)
        out.attach(attention_core("sdpa", seq, hidden, BERT_HEADS[name], causal=False),
                   elementwise("merge-heads", sh))
        out.linear(f"{block}.attention.self.key", hidden, hidden, seq, block, cast_input=True)
        out.linear(f"{block}.attention.self.value", hidden, hidden, seq, block,
                   cast_input=True)
        out.linear(f"{block}.attention.output.dense", hidden, hidden, seq, block)
        out.attach(elementwise("dropout", sh, 2.5), _add("residual", sh))
        out.norm(f"{block}.attention.output.LayerNorm", hidden, sh, block)
        out.linear(f"{block}.intermediate.dense", hidden, 4 * hidden, seq, block,
                   cast_input=True)
        out.attach(elementwise("gelu", 4 * sh))
        out.linear(f"{block}.output.dense", 4 * hidden, hidden, seq, block)
        out.attach(elementwise("dropout", sh, 2.5), _add("residual", sh))
        out.norm(f"{block}.output.LayerNorm", hidden, sh, block)
    out.linear("pooler.dense", hidden, hidden, 1, "pooler", cast_input=True)
    out.attach(elementwise("tanh", hidden))
    return TransformerModel(name, tuple(out.layers), dtype_bytes,
                            TransformerShape(seq, hidden, BERT_HEADS[name]))


GPT_SHAPES = {  # hidden, layers, sequence length
    "gpt2": (768, 12, 1024), "gpt2-medium": (1024, 24, 1024), "gpt2-large": (1280, 36, 1024),
    "gpt2-xl": (1600, 48, 1024), "gpt3-175b": (12288, 96, 2048),
    "transformer-1t": (25600, 128, 2048),
}
GPT_HEADS = {"gpt2": 12, "gpt2-medium": 16, "gpt2-large": 20, "gpt2-xl": 25, "gpt3-175b": 96,
             "transformer-1t": 160}
GPT_VOCAB = 50257
# Megatron-LM's 1T configuration (Narayanan et al., SC 2021, Table 1) pads its vocabulary
# to 51,200 entries: 1,008,038,758,400 parameters.
GPT_VOCABS = {"transformer-1t": 51200}
# Trained with Megatron-LM's fused kernels rather than Hugging Face's modules.
MEGATRON_STYLE = ("gpt3-175b", "transformer-1t")
ATTENTION_KERNELS = ("flash", "fused", "unfused")
# GPT-2's gelu_new as Hugging Face writes it: pow, 3 multiplies, 2 additions, tanh, multiply
# (8 kernels; element passes: 2 per unary kernel, 3 per binary one); its backward: 2 + 1 + 1
# + 1 + 1 multiplies (the products and constants), tanh's, pow's 2 and 2 gradient additions
# where x is used three times, 10 kernels.
GELU_NEW = elementwise("gelu_new", 1, passes=18, kernels=8, backward_kernels=10)


def gpt(name: str, dtype_bytes: int = 4, lm_head: bool = True) -> TransformerModel:
    """Hugging Face GPT2Model shape (Conv1D layers, tied LM head); GPT-3 175B uses the same
    block structure with d_model 12288, 96 layers and a 2048-token context, and the Themis
    paper's Transformer-1T that of Megatron-LM's 1T model (d_model 25600, 128 layers, 2048
    tokens, vocabulary 51200). ``lm_head=False`` leaves out the tied head's logits (as
    ``GPT2Model`` runs)."""
    hidden, depth, seq = GPT_SHAPES[name]
    return gpt_model(name, hidden, depth, GPT_HEADS[name], seq, GPT_VOCABS.get(name, GPT_VOCAB),
                     dtype_bytes, megatron=name in MEGATRON_STYLE, lm_head=lm_head)


class DecoderShape(BaseModel):
    """How a decoder's layers depart from GPT-2's (the defaults): the FFN's hidden size
    (``ffn_hidden``, 0: 4 x hidden), ``kv_heads`` of grouped-query attention (0: one per
    head), a gated FFN (``gated_ffn``, SwiGLU: gate and up projections fused into one of 2 x
    FFN width, the product of SiLU(gate) and up, then down; Shazeer 2020, as Llama runs it),
    ``bias``es on the linear layers and norms, RMSNorm instead of LayerNorm (``rms_norm``: a
    weight, no bias), ``learned_positions`` (False: rotary embeddings, no position table) and
    ``tied_embeddings`` (False: the output projection has its own matrix) and ``head_dim`` (0:
    hidden / heads; Qwen3's 128 at any hidden: queries and the output projection's input are
    ``heads x head_dim`` wide, keys and values ``kv_heads x head_dim``) and ``glu_clamp`` (0:
    none; a gated FFN's inputs clamped to it before the activation, GPT-OSS's ``swiglu_limit``
    7.0, priced for the routed experts as Megatron-Core runs it:
    ``job.compute.moe_costs.expert_eager_ops``); sizes in elements.

    This is the base shape the job planner's one model type extends: ``job.model_spec.Model``
    (what is trained, the bundled LLMs and every model file) is a ``DecoderShape`` with its
    sizes, MoE and attention fields added, so a zoo decoder built from a ``Model`` reads these
    fields from it unchanged. The zoo's own GPT/BERT entries (``GPT_SHAPES``) are the default
    shape with their sizes given to ``gpt_model`` directly."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    ffn_hidden: int = Field(default=0, ge=0, le=10_000_000)
    kv_heads: int = Field(default=0, ge=0, le=100_000)
    gated_ffn: bool = False
    bias: bool = True
    rms_norm: bool = False
    learned_positions: bool = True
    tied_embeddings: bool = True
    head_dim: int = Field(default=0, ge=0, le=100_000)
    glu_clamp: float = Field(default=0.0, ge=0.0, le=1e6)


GPT2_LAYER = DecoderShape()  # the defaults: GPT-2's layer (gpt_model's shape when none is given)


def gpt_model(name: str, hidden: int, depth: int, heads: int, seq: int, vocab: int,
              dtype_bytes: int = 4, megatron: bool = True,
              lm_head: bool = True, shape: DecoderShape | None = None,
              core: tuple[int, int, int] | None = None,
              attention: str = "unfused") -> TransformerModel:
    """A GPT of any shape (``hidden``, ``depth`` layers, ``heads``, ``seq`` tokens, ``vocab``)
    with GPT-2's layers and parameters, or a Llama-like decoder's (``shape``); ops as
    Megatron-LM (``megatron``) or Hugging Face runs them (see the module docstring).
    ``core``: (queries, keys, heads) of each layer's attention core per sample where they are
    not (seq, seq, heads): under context parallelism the model is one GPU's ``seq`` tokens of a
    longer sequence whose keys its queries attend (Megatron ops only). ``attention``: Megatron's
    attention core as the 2021 unfused products (``unfused``, ``megatron_attention``) or one
    fused kernel: ``flash`` (FlashAttention-2) or ``fused`` (Transformer Engine's cuDNN fused
    attention), Megatron-Core's ``--attention-backend`` names."""
    if attention not in ATTENTION_KERNELS:
        raise ConfigError(f"attention: {attention!r} is not one of "
                          + ", ".join(ATTENTION_KERNELS))
    if (core is not None or attention != "unfused") and not megatron:
        raise ConfigError("core/flash: an attention core of its own shape or kernel needs "
                          "Megatron ops (Hugging Face's already runs SDPA)")
    queries, keys, core_heads = core or (seq, seq, heads)
    shape = shape or GPT2_LAYER
    out = LayerBuilder(dtype_bytes)
    sh = seq * hidden
    ffn = shape.ffn_hidden or 4 * hidden
    width = shape.head_dim or hidden // heads
    qkv = heads * width + 2 * (shape.kv_heads or heads) * width
    norm_bias = shape.bias and not shape.rms_norm
    out.add("wte.weight", vocab * hidden, sh, sh, "embed", (_gather(sh),))
    if shape.learned_positions:
        out.add("wpe.weight", seq * hidden, sh, sh, "embed",
                (_gather(sh), elementwise("add", sh, 3, fp32=True, backward_kernels=0),
                 elementwise("dropout", sh, 2.5, split=False, fp32=True)))
    for index in range(depth):
        block = f"h.{index}"
        out.norm(f"{block}.ln_1", hidden, sh, block, split=False, bias=norm_bias)
        out.linear(f"{block}.attn.c_attn", hidden, qkv, seq, block, bias=shape.bias,
                   extra_flops=2 * 2 * queries * keys * core_heads * width,
                   cast_input=True)
        out.attach(*_attention_ops(queries, keys, width, core_heads,
                                   (shape.kv_heads or heads) * core_heads // heads,
                                   megatron, attention))
        out.linear(f"{block}.attn.c_proj", heads * width, hidden, seq, block, bias=shape.bias)
        out.attach(*_residual(sh, megatron))
        out.norm(f"{block}.ln_2", hidden, sh, block, split=False, bias=norm_bias)
        out.linear(f"{block}.mlp.c_fc", hidden, 2 * ffn if shape.gated_ffn else ffn, seq, block,
                   bias=shape.bias, cast_input=True)
        out.attach(ffn_activation(ffn * seq, shape.gated_ffn, megatron))
        out.linear(f"{block}.mlp.c_proj", ffn, hidden, seq, block, bias=shape.bias)
        out.attach(*_residual(sh, megatron))
    logits = 2 * hidden * vocab * seq if lm_head else 0
    loss = (megatron_cross_entropy(seq * vocab) if megatron
            else elementwise("cross-entropy", seq * vocab, 3, kernels=4))
    head = (matmul("lm_head", hidden, vocab, seq, bias=False, cast_input=True),
            loss) if lm_head else ()
    out.add("ln_f.weight", hidden, 5 * sh + logits, seq * vocab if lm_head else sh, "ln_f",
            (norm("ln_f", hidden, sh, split=False), *head))
    if norm_bias:
        out.add("ln_f.bias", hidden, 0, sh, "ln_f")
    if not shape.tied_embeddings:
        out.add("lm_head.weight", vocab * hidden, 0, seq * vocab if lm_head else sh, "ln_f")
    return TransformerModel(name, tuple(out.layers), dtype_bytes,
                            TransformerShape(seq, hidden, heads, vocab if lm_head else 0))


def ffn_activation(elements: int, gated: bool, megatron: bool) -> Op:
    """The FFN's activation on ``elements`` FFN-width elements per sample: Megatron-LM's fused
    bias-GELU, Hugging Face's eight-kernel ``gelu_new``, or SwiGLU's fused kernel (reads the
    gate and up halves, writes their product: three passes)."""
    if gated:
        return elementwise("swiglu", elements, 3)
    if megatron:
        return elementwise("bias-gelu", elements)
    return replace(GELU_NEW, elements=GELU_NEW.elements * elements)


def _attention_ops(queries: int, keys: int, width: int, heads: int, kv_heads: int,
                   megatron: bool, attention: str) -> tuple[Op, ...]:
    """One layer's attention core per sample: Megatron-LM's unfused products, or one fused
    causal kernel (``flash``: FlashAttention-2, or ``fused``: cuDNN's, see ``gpt_model``;
    Hugging Face's SDPA, which also merges the heads back in a copy of its own)."""
    if megatron and attention == "unfused":
        return megatron_attention(queries, keys, width, heads)
    fused = attention_core("flash-attention" if megatron else "sdpa", queries, width * heads,
                           heads, causal=True, keys=keys, kv_hidden=width * kv_heads,
                           kind="fused_attention" if attention == "fused" else "attention")
    return (fused,) if megatron else (fused, elementwise("merge-heads", queries * width * heads))


def megatron_attention(queries: int, keys: int, width: int, heads: int) -> tuple[Op, ...]:
    """Megatron-LM's attention core (2021) of ``heads`` heads of ``width`` elements, ``queries``
    attending ``keys`` (both the sequence without context parallelism): scores by batched
    product (written out, heads x queries x keys elements), fused scale-mask-softmax, dropout
    on the probabilities, the weighted sum, and the heads merged back."""
    scores, q, k = heads * queries * keys, queries * heads * width, keys * heads * width
    flops = 2 * queries * keys * heads * width
    return (Op("gemm", flops, q + k + scores, label="scores",
               shape=(queries, keys, width, heads)),
            elementwise("softmax", scores), elementwise("attention-dropout", scores, 2.5),
            Op("gemm", flops, scores + k + q, label="context",
               shape=(queries, width, keys, heads)),
            elementwise("merge-heads", q))


def _residual(sh: int, megatron: bool) -> tuple[Op, ...]:
    """Dropout then the residual addition: one fused bias-dropout-add kernel in Megatron-LM,
    two kernels in Hugging Face's modules; repeated on every GPU of a TP group."""
    if megatron:
        return (elementwise("bias-dropout-add", sh, 3.5, split=False),)
    return (elementwise("dropout", sh, 2.5, split=False), _add("residual", sh, split=False))


def _add(label: str, elements: int, fp32: bool = True, split: bool = True) -> Op:
    """A residual addition (FP32 under autocast in a transformer's residual stream, in the
    activations' precision in a CNN); its backward is the gradient accumulation where the
    stream forks (one kernel)."""
    return elementwise(label, elements, 3, split=split, fp32=fp32, backward_kernels=1)


def _gather(elements: int) -> Op:
    """An embedding lookup (FP32 weights: FP32 under autocast); its backward sorts the indices
    and accumulates the rows (PyTorch's embedding_dense_backward: about 4 kernels)."""
    return elementwise("gather", elements, 2, elements, fp32=True, backward_kernels=4)


GNMT_HIDDEN, GNMT_DEPTH, GNMT_VOCAB, GNMT_TOKENS = 1024, 8, 32000, 50


def _lstm(out: LayerBuilder, prefix: str, fan_in: int, hidden: int, tokens: int, block: str,
          directions: int = 1) -> None:
    """A PyTorch LSTM layer (weight_ih, weight_hh, bias_ih, bias_hh per direction) run over
    ``tokens`` steps: 2 x 4h x (in + h) FLOP per token and direction for the gates."""
    for direction in range(directions):
        suffix = "_reverse" if direction else ""
        gates = 4 * hidden
        flops = 2 * gates * (fan_in + hidden) * tokens + 10 * hidden * tokens
        out.add(f"{prefix}.weight_ih_l0{suffix}", gates * fan_in, flops, hidden * tokens, block,
                (Op("gemm", flops, (fan_in + gates + 6 * hidden) * tokens,
                    gates * (fan_in + hidden), kernels=2 * tokens, label="lstm",
                    shape=(1, gates, fan_in + hidden, 0)),))
        out.add(f"{prefix}.weight_hh_l0{suffix}", gates * hidden, 0, hidden * tokens, block)
        out.add(f"{prefix}.bias_ih_l0{suffix}", gates, 0, hidden * tokens, block)
        out.add(f"{prefix}.bias_hh_l0{suffix}", gates, 0, hidden * tokens, block)


def gnmt(name: str = "gnmt", dtype_bytes: int = 4) -> Model:
    """GNMT (Wu et al., 2016): 8 encoder LSTM layers of 1024 (the first bidirectional, the
    second reading both directions), 8 decoder layers (the first feeds normalized Bahdanau
    attention, the others read hidden state + attention context), 32,000-wordpiece
    vocabularies, separate embeddings and a softmax classifier, in the layer layout of the
    MLPerf PyTorch reference; 50 source and 50 target tokens per sample."""
    h, depth, vocab, tokens = GNMT_HIDDEN, GNMT_DEPTH, GNMT_VOCAB, GNMT_TOKENS
    out = LayerBuilder(dtype_bytes)
    gather = (elementwise("gather", h * tokens),)
    out.add("encoder.embedder.weight", vocab * h, 0, h * tokens, "encoder.embedder", gather)
    _lstm(out, "encoder.rnn_layers.0", h, h, tokens, "encoder.rnn_layers.0", directions=2)
    _lstm(out, "encoder.rnn_layers.1", 2 * h, h, tokens, "encoder.rnn_layers.1")
    for index in range(2, depth):
        _lstm(out, f"encoder.rnn_layers.{index}", h, h, tokens, f"encoder.rnn_layers.{index}")
    out.add("decoder.embedder.weight", vocab * h, 0, h * tokens, "decoder.embedder", gather)
    _lstm(out, "decoder.att_rnn.rnn", h, h, tokens, "decoder.att_rnn")
    attention = 2 * h * h * tokens * 2 + 5 * h * tokens * tokens
    out.add("decoder.att_rnn.attn.linear_q.weight", h * h, attention, h * tokens,
            "decoder.att_rnn", (Op("gemm", attention, 4 * h * tokens + 3 * tokens * tokens,
                                   2 * h * h, kernels=6, label="bahdanau"),))
    out.add("decoder.att_rnn.attn.linear_k.weight", h * h, 0, h * tokens, "decoder.att_rnn")
    out.add("decoder.att_rnn.attn.linear_att", h, 0, tokens * tokens, "decoder.att_rnn")
    out.add("decoder.att_rnn.attn.normalize_scalar", 1, 0, 0, "decoder.att_rnn")
    out.add("decoder.att_rnn.attn.normalize_bias", h, 0, 0, "decoder.att_rnn")
    for index in range(1, depth):
        _lstm(out, f"decoder.rnn_layers.{index - 1}", 2 * h, h, tokens,
              f"decoder.rnn_layers.{index - 1}")
    out.linear("decoder.classifier", h, vocab, tokens, "decoder.classifier")
    return Model(name, tuple(out.layers), dtype_bytes)


# MLPerf DLRM on Criteo Terabyte (rows per table capped at 40M), 128-wide embeddings.
DLRM_TABLE_ROWS = (
    39884406, 39043, 17289, 7420, 20263, 3, 7120, 1543, 63, 38532951, 2953546, 403346, 10,
    2208, 11938, 155, 4, 976, 14, 39979771, 25641295, 39664984, 585935, 12972, 108, 36,
)
DLRM_DIM, DLRM_DENSE = 128, 13
DLRM_BOTTOM, DLRM_TOP = (512, 256, 128), (1024, 1024, 512, 256, 1)


def dlrm(name: str = "dlrm", dtype_bytes: int = 4) -> Model:
    """DLRM (Naumov et al., 2019) in the MLPerf Criteo-Terabyte configuration: 26 embedding
    tables of width 128 (24.0B parameters), bottom MLP 13-512-256-128, dot interaction of the
    27 vectors (351 pairs) concatenated with the dense vector, top MLP 479-1024-1024-512-256-1.
    Blocks: ``embeddings``, ``bot_l.<i>``, ``top_l.<i>`` (the interaction runs in ``top_l.0``)."""
    out = LayerBuilder(dtype_bytes)
    for index, rows in enumerate(DLRM_TABLE_ROWS):
        out.add(f"emb_l.{index}.weight", rows * DLRM_DIM, 0, DLRM_DIM, "embeddings",
                (elementwise("embedding-bag", DLRM_DIM),))
    fan_in = DLRM_DENSE
    for index, width in enumerate(DLRM_BOTTOM):
        out.linear(f"bot_l.{2 * index}", fan_in, width, 1, f"bot_l.{index}")
        out.attach(elementwise("relu", width))
        fan_in = width
    vectors = len(DLRM_TABLE_ROWS) + 1
    pairs = vectors * (vectors - 1) // 2
    fan_in = DLRM_DIM + pairs
    for index, width in enumerate(DLRM_TOP):
        extra = 2 * pairs * DLRM_DIM if index == 0 else 0.0
        out.linear(f"top_l.{2 * index}", fan_in, width, 1, f"top_l.{index}", extra_flops=extra)
        if extra:
            out.attach(Op("gemm", extra, vectors * DLRM_DIM + pairs, label="interaction",
                          shape=(vectors, vectors, DLRM_DIM, 1)))
        out.attach(elementwise("relu" if index < len(DLRM_TOP) - 1 else "sigmoid", width))
        fan_in = width
    return Model(name, tuple(out.layers), dtype_bytes)


MODELS: dict[str, Callable[[int], Model]] = {
    **{name: partial(vgg, name) for name in VGG_CONFIGS},
    **{name: partial(resnet, name) for name in RESNET_DEPTHS},
    **{name: partial(bert, name) for name in BERT_SHAPES},
    **{name: partial(gpt, name) for name in GPT_SHAPES},
    "gnmt": partial(gnmt, "gnmt"),
    "dlrm": partial(dlrm, "dlrm"),
}


def model_names() -> list[str]:
    """Names accepted by ``get_model``."""
    return list(MODELS)


def get_model(name: str, dtype_bytes: int = 4, lm_head: bool = True) -> Model:
    """The zoo model ``name`` with ``dtype_bytes`` per parameter/activation element;
    ``lm_head=False`` leaves a GPT's tied LM head out (other models have none)."""
    if name not in MODELS:
        raise ConfigError(f"model: unknown model {name!r}; accepted: " + ", ".join(MODELS))
    if dtype_bytes not in (1, 2, 4, 8):
        raise ConfigError(f"dtype_bytes: must be 1, 2, 4 or 8 (got {dtype_bytes!r})")
    if not lm_head:
        if name not in GPT_SHAPES:
            raise ConfigError(f"lm_head: only the GPT models have one to leave out ({name!r} "
                              "has none); accepted: " + ", ".join(GPT_SHAPES))
        return gpt(name, dtype_bytes, lm_head=False)
    return MODELS[name](dtype_bytes)
