"""A zoo of real architectures: one Layer per parameter tensor, in ``named_parameters()`` order.

Parameter counts equal the reference implementations (torchvision for VGG and ResNet, Hugging
Face ``BertModel`` and ``GPT2Model`` for the transformers). Each layer carries the forward FLOP
of its operation per sample (the whole op on its weight tensor; biases and norms count their
elementwise work), the bytes of the op's output activation per sample, and ``block``, the
enclosing module, so planners can coarsen tensors into blocks. Inputs: 224x224 images,
sequence length 128 for BERT, 1024 for GPT-2 and 2048 for the GPT-3-like model. A GPT's tied
LM head (logits = hidden x wte^T) is counted on its final layer norm, where that matmul runs.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from dlsched.errors import ConfigError
from dlsched.models.layer import Layer, Model


class _Layers:
    """Collects layers; activation bytes are given in elements and scaled by dtype_bytes."""

    def __init__(self, dtype_bytes: int) -> None:
        self.dtype_bytes = dtype_bytes
        self.layers: list[Layer] = []

    def add(self, name: str, params: int, flops: float, elements: int, block: str) -> None:
        self.layers.append(Layer(name, params, float(flops), elements * self.dtype_bytes, block))

    def norm(self, prefix: str, width: int, elements: int, block: str) -> None:
        """A LayerNorm/BatchNorm: weight and bias of ``width``; ~5 FLOP per element."""
        self.add(f"{prefix}.weight", width, 5 * elements, elements, block)
        self.add(f"{prefix}.bias", width, 0, elements, block)

    def linear(self, prefix: str, fan_in: int, fan_out: int, tokens: int, block: str,
               bias: bool = True, extra_flops: float = 0.0) -> None:
        """A dense layer applied to ``tokens`` vectors (weight then bias)."""
        self.add(f"{prefix}.weight", fan_in * fan_out, 2 * fan_in * fan_out * tokens + extra_flops,
                 fan_out * tokens, block)
        if bias:
            self.add(f"{prefix}.bias", fan_out, fan_out * tokens, fan_out * tokens, block)


VGG_CONFIGS = {
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
              512, 512, 512, "M"],
    "vgg19": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
              512, 512, 512, 512, "M"],
}


def vgg(name: str, dtype_bytes: int = 4) -> Model:
    """torchvision VGG-16/19 (no batch norm): 3x3 convolutions then three linear layers."""
    out = _Layers(dtype_bytes)
    channels, side, index = 3, 224, 0
    for item in VGG_CONFIGS[name]:
        if item == "M":
            side //= 2
            index += 1
            continue
        width = int(item)
        block = f"features.{index}"
        out.add(f"{block}.weight", 9 * channels * width, 2 * 9 * channels * width * side * side,
                width * side * side, block)
        out.add(f"{block}.bias", width, width * side * side, width * side * side, block)
        channels, index = width, index + 2
    for position, (fan_in, fan_out) in zip((0, 3, 6), ((25088, 4096), (4096, 4096), (4096, 1000)),
                                           strict=True):
        out.linear(f"classifier.{position}", fan_in, fan_out, 1, f"classifier.{position}")
    return Model(name, tuple(out.layers), dtype_bytes)


def _conv(out: _Layers, names: tuple[str, str], c_in: int, c_out: int, kernel: int, side: int,
          block: str) -> None:
    """A bias-free convolution ``names[0]`` producing a ``side`` x ``side`` map, then its
    BatchNorm ``names[1]``."""
    conv, norm = names
    elements = c_out * side * side
    out.add(f"{conv}.weight", kernel * kernel * c_in * c_out,
            2 * kernel * kernel * c_in * elements, elements, block)
    out.norm(norm, c_out, elements, block)


RESNET_DEPTHS = {"resnet50": (3, 4, 6, 3), "resnet101": (3, 4, 23, 3), "resnet152": (3, 8, 36, 3)}


def resnet(name: str, dtype_bytes: int = 4) -> Model:
    """torchvision ResNet-50/101/152 (v1.5: the stride sits on the 3x3 convolution)."""
    out = _Layers(dtype_bytes)
    _conv(out, ("conv1", "bn1"), 3, 64, 7, 112, "stem")
    inplanes, side = 64, 56
    for stage, (blocks, planes) in enumerate(zip(RESNET_DEPTHS[name], (64, 128, 256, 512),
                                                 strict=True), start=1):
        for index in range(blocks):
            block = f"layer{stage}.{index}"
            stride = 2 if stage > 1 and index == 0 else 1
            out_side = side // stride
            _conv(out, (f"{block}.conv1", f"{block}.bn1"), inplanes, planes, 1, side, block)
            _conv(out, (f"{block}.conv2", f"{block}.bn2"), planes, planes, 3, out_side, block)
            _conv(out, (f"{block}.conv3", f"{block}.bn3"), planes, planes * 4, 1, out_side, block)
            if index == 0:
                _conv(out, (f"{block}.downsample.0", f"{block}.downsample.1"), inplanes,
                      planes * 4, 1, out_side, block)
            inplanes, side = planes * 4, out_side
    out.linear("fc", 2048, 1000, 1, "fc")
    return Model(name, tuple(out.layers), dtype_bytes)


BERT_SHAPES = {"bert-base": (768, 12), "bert-large": (1024, 24)}
BERT_VOCAB, BERT_POSITIONS, BERT_SEQUENCE = 30522, 512, 128


def bert(name: str, dtype_bytes: int = 4) -> Model:
    """Hugging Face BertModel (embeddings, encoder, pooler) at sequence length 128."""
    hidden, depth = BERT_SHAPES[name]
    seq, out = BERT_SEQUENCE, _Layers(dtype_bytes)
    for table, rows in (("word", BERT_VOCAB), ("position", BERT_POSITIONS), ("token_type", 2)):
        out.add(f"embeddings.{table}_embeddings.weight", rows * hidden, seq * hidden,
                seq * hidden, "embeddings")
    out.norm("embeddings.LayerNorm", hidden, seq * hidden, "embeddings")
    for index in range(depth):
        block = f"encoder.layer.{index}"
        attention = 2 * 2 * seq * seq * hidden  # scores QK^T and the weighted sum
        out.linear(f"{block}.attention.self.query", hidden, hidden, seq, block,
                   extra_flops=attention)
        out.linear(f"{block}.attention.self.key", hidden, hidden, seq, block)
        out.linear(f"{block}.attention.self.value", hidden, hidden, seq, block)
        out.linear(f"{block}.attention.output.dense", hidden, hidden, seq, block)
        out.norm(f"{block}.attention.output.LayerNorm", hidden, seq * hidden, block)
        out.linear(f"{block}.intermediate.dense", hidden, 4 * hidden, seq, block)
        out.linear(f"{block}.output.dense", 4 * hidden, hidden, seq, block)
        out.norm(f"{block}.output.LayerNorm", hidden, seq * hidden, block)
    out.linear("pooler.dense", hidden, hidden, 1, "pooler")
    return Model(name, tuple(out.layers), dtype_bytes)


GPT_SHAPES = {  # hidden, layers, sequence length
    "gpt2": (768, 12, 1024), "gpt2-medium": (1024, 24, 1024), "gpt2-large": (1280, 36, 1024),
    "gpt2-xl": (1600, 48, 1024), "gpt3-175b": (12288, 96, 2048),
    "transformer-1t": (25600, 128, 2048),
}
GPT_VOCAB = 50257
# Megatron-LM's 1T configuration (Narayanan et al., SC 2021, Table 1) pads its vocabulary
# to 51,200 entries: 1,008,038,758,400 parameters.
GPT_VOCABS = {"transformer-1t": 51200}


def gpt(name: str, dtype_bytes: int = 4) -> Model:
    """Hugging Face GPT2Model shape (Conv1D layers, tied LM head); GPT-3 175B uses the same
    block structure with d_model 12288, 96 layers and a 2048-token context, and the Themis
    paper's Transformer-1T that of Megatron-LM's 1T model (d_model 25600, 128 layers, 2048
    tokens, vocabulary 51200)."""
    hidden, depth, seq = GPT_SHAPES[name]
    vocab = GPT_VOCABS.get(name, GPT_VOCAB)
    out = _Layers(dtype_bytes)
    out.add("wte.weight", vocab * hidden, seq * hidden, seq * hidden, "embed")
    out.add("wpe.weight", seq * hidden, seq * hidden, seq * hidden, "embed")
    for index in range(depth):
        block = f"h.{index}"
        out.norm(f"{block}.ln_1", hidden, seq * hidden, block)
        out.linear(f"{block}.attn.c_attn", hidden, 3 * hidden, seq, block,
                   extra_flops=2 * 2 * seq * seq * hidden)
        out.linear(f"{block}.attn.c_proj", hidden, hidden, seq, block)
        out.norm(f"{block}.ln_2", hidden, seq * hidden, block)
        out.linear(f"{block}.mlp.c_fc", hidden, 4 * hidden, seq, block)
        out.linear(f"{block}.mlp.c_proj", 4 * hidden, hidden, seq, block)
    logits = 2 * hidden * vocab * seq
    out.add("ln_f.weight", hidden, 5 * seq * hidden + logits, seq * vocab, "ln_f")
    out.add("ln_f.bias", hidden, 0, seq * hidden, "ln_f")
    return Model(name, tuple(out.layers), dtype_bytes)


GNMT_HIDDEN, GNMT_DEPTH, GNMT_VOCAB, GNMT_TOKENS = 1024, 8, 32000, 50


def _lstm(out: _Layers, prefix: str, fan_in: int, hidden: int, tokens: int, block: str,
          directions: int = 1) -> None:
    """A PyTorch LSTM layer (weight_ih, weight_hh, bias_ih, bias_hh per direction) run over
    ``tokens`` steps: 2 x 4h x (in + h) FLOP per token and direction for the gates."""
    for direction in range(directions):
        suffix = "_reverse" if direction else ""
        gates = 4 * hidden
        out.add(f"{prefix}.weight_ih_l0{suffix}", gates * fan_in,
                2 * gates * (fan_in + hidden) * tokens + 10 * hidden * tokens,
                hidden * tokens, block)
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
    out = _Layers(dtype_bytes)
    out.add("encoder.embedder.weight", vocab * h, 0, h * tokens, "encoder.embedder")
    _lstm(out, "encoder.rnn_layers.0", h, h, tokens, "encoder.rnn_layers.0", directions=2)
    _lstm(out, "encoder.rnn_layers.1", 2 * h, h, tokens, "encoder.rnn_layers.1")
    for index in range(2, depth):
        _lstm(out, f"encoder.rnn_layers.{index}", h, h, tokens, f"encoder.rnn_layers.{index}")
    out.add("decoder.embedder.weight", vocab * h, 0, h * tokens, "decoder.embedder")
    _lstm(out, "decoder.att_rnn.rnn", h, h, tokens, "decoder.att_rnn")
    attention = 2 * h * h * tokens * 2 + 5 * h * tokens * tokens
    out.add("decoder.att_rnn.attn.linear_q.weight", h * h, attention, h * tokens,
            "decoder.att_rnn")
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
    out = _Layers(dtype_bytes)
    for index, rows in enumerate(DLRM_TABLE_ROWS):
        out.add(f"emb_l.{index}.weight", rows * DLRM_DIM, 0, DLRM_DIM, "embeddings")
    fan_in = DLRM_DENSE
    for index, width in enumerate(DLRM_BOTTOM):
        out.linear(f"bot_l.{2 * index}", fan_in, width, 1, f"bot_l.{index}")
        fan_in = width
    vectors = len(DLRM_TABLE_ROWS) + 1
    pairs = vectors * (vectors - 1) // 2
    fan_in = DLRM_DIM + pairs
    for index, width in enumerate(DLRM_TOP):
        extra = 2 * pairs * DLRM_DIM if index == 0 else 0.0
        out.linear(f"top_l.{2 * index}", fan_in, width, 1, f"top_l.{index}", extra_flops=extra)
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


def get_model(name: str, dtype_bytes: int = 4) -> Model:
    """The zoo model ``name`` with ``dtype_bytes`` per parameter/activation element."""
    if name not in MODELS:
        raise ConfigError(f"model: unknown model {name!r}; accepted: " + ", ".join(MODELS))
    if dtype_bytes not in (1, 2, 4, 8):
        raise ConfigError(f"dtype_bytes: must be 1, 2, 4 or 8 (got {dtype_bytes!r})")
    return MODELS[name](dtype_bytes)
