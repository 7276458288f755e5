"""What a layer runs: ops with a kind, FLOP, memory traffic, kernel launches and a shape.

Units per op, for the forward pass: ``flops`` FLOP per sample, ``elements`` activation
elements read plus written per sample, ``weights`` weight elements read once per pass (not per
sample), ``kernels`` kernel launches per pass. Bytes follow from the precision the op runs in
(``hardware.gpu.ELEMENT_BYTES``; under ``torch.autocast`` an op marked ``fp32`` — LayerNorm,
the FP32 residual stream of a transformer — moves 4 bytes per element). The backward of every
op costs twice its forward in FLOP and traffic (a product's input and weight gradients; an
elementwise op reads the gradient and its saved input and writes the input gradient) and
launches ``backward_kernels`` kernels (default: twice ``kernels``); an elementwise op whose
backward moves another amount says so in ``backward_elements`` (elements read plus written per
sample by its backward: eager PyTorch's decomposed ops, ``job.compute.eager_ops``).

``shape`` says what the kernel is, for pricing by shape (``models.kernels``):

* ``gemm``: ``(m, n, k, groups)``: with ``groups`` 0, one GEMM of (``m`` x batch) x ``n`` x
  ``k`` (tokens flattened with the batch); otherwise ``groups`` x batch independent ``m`` x
  ``n`` x ``k`` GEMMs in one batched kernel (attention scores per head);
* ``conv``: ``(c_in, c_out, kernel, side_in, side_out)``, run as cuDNN's implicit GEMM;
* ``attention`` and ``fused_attention``: ``(queries, keys, heads, causal)``, one fused attention
  kernel (``attention``: PyTorch's scaled-dot-product attention, FlashAttention-2;
  ``fused_attention``: Transformer Engine's cuDNN fused attention): ``queries`` attending
  ``keys`` (both the sequence, except under context parallelism) per head. ``executed``:
  the share of the layer's tiles the kernel computes, 1 for a full (or full causal) layer and
  a sliding window's or chunk's ``job.attention_layers.window_ratio`` below it; ``flops``
  stays the full layer's, so the head dimension (``flops / (4 queries keys heads)``) and the
  kernel's work per query tile (``models.fused_attention``) are the layer's own.

``cast_input``: under autocast the product first casts its FP32 input to 16 bits (an input
coming from a LayerNorm, which autocast runs in FP32). ``upcast``: an elementwise op that runs
in FP32 whatever the precision (4 bytes per element in 16-bit runs with or without autocast:
Megatron-LM's cross-entropy on logits it casts with ``.float()``). ``input_grad`` False: the
op's input needs no gradient (a network's first convolution, on the images), so its backward is the
weight gradient alone.

``split`` says how tensor parallelism (Megatron-LM) treats the op: True when its work is
divided across the group (the matrix products, the attention of each head, the MLP's
activation), False when every GPU of the group repeats it (layer norms, dropout and residual
additions on the full hidden state) unless sequence parallelism splits those too.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("gemm", "attention", "fused_attention", "conv", "elementwise")
ATTENTION_KINDS = ("attention", "fused_attention")
BACKWARD_FACTOR = 2.0
ATTENTION_BACKWARD = 2.5  # a fused attention backward's FLOP over its forward's (attention_core)
SHAPE_LENGTHS = {"gemm": 4, "conv": 5, "attention": 4, "fused_attention": 4}


@dataclass(frozen=True)
class Op:
    """One op of a layer (see the module docstring for units)."""

    kind: str
    flops: float = 0.0
    elements: float = 0.0
    weights: float = 0.0
    kernels: float = 1.0
    split: bool = True
    label: str = ""
    shape: tuple[int, ...] = ()
    fp32: bool = False
    cast_input: bool = False
    upcast: bool = False
    backward_kernels: float | None = None
    input_grad: bool = True
    backward_elements: float | None = None
    executed: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"op kind: {self.kind!r} is not one of {', '.join(KINDS)}")
        for field in ("flops", "elements", "weights", "kernels"):
            if not getattr(self, field) >= 0:
                raise ValueError(f"op {field}: must be >= 0 (got {getattr(self, field)!r})")
        if self.backward_elements is not None and (
                self.kind != "elementwise" or not self.backward_elements >= 0):
            raise ValueError("op backward_elements: only for an elementwise op, >= 0 (got "
                             f"{self.backward_elements!r} on a {self.kind} op)")
        if not 0 < self.executed <= 1 or (self.executed < 1
                                           and self.kind not in ATTENTION_KINDS):
            raise ValueError(f"op executed: a share in (0, 1], below 1 only for an attention "
                             f"kernel (got {self.executed!r} on a {self.kind} op)")
        if self.shape and len(self.shape) != SHAPE_LENGTHS.get(self.kind, -1):
            raise ValueError(f"op shape: {self.shape!r} does not fit a {self.kind} op")

    @property
    def launches_backward(self) -> float:
        """Kernels launched by this op's backward."""
        if self.backward_kernels is None:
            return BACKWARD_FACTOR * self.kernels
        return self.backward_kernels


def matmul(label: str, fan_in: int, fan_out: int, tokens: int, bias: bool = True,
           cast_input: bool = False, summed_grads: int = 0) -> Op:
    """A dense layer on ``tokens`` vectors per sample: 2 x in x out FLOP per token (plus the
    fused bias), reads the input and writes the output; its backward is the input- and
    weight-gradient GEMMs, with a bias the bias gradient's reduction, and ``summed_grads``
    additions where its input's gradient sums those of other consumers (BERT's query, key
    and value projections of one input: 2)."""
    flops = 2 * fan_in * fan_out * tokens + (fan_out * tokens if bias else 0)
    return Op("gemm", flops, (fan_in + fan_out) * tokens, fan_in * fan_out + fan_out * bias,
              label=label, shape=(tokens, fan_out, fan_in, 0), cast_input=cast_input,
              backward_kernels=2.0 + bias + summed_grads)


def conv(label: str, c_in: int, c_out: int, kernel: int, side_in: int, side_out: int,
         first: bool = False) -> Op:
    """A ``kernel`` x ``kernel`` convolution from ``c_in`` channels at ``side_in`` to ``c_out``
    channels at ``side_out`` (square maps); backward: data and weight gradients. The
    network's ``first`` convolution casts the FP32 images under autocast and computes no
    data gradient."""
    out = c_out * side_out * side_out
    return Op("conv", 2 * kernel * kernel * c_in * out, c_in * side_in * side_in + out,
              kernel * kernel * c_in * c_out, label=label,
              shape=(c_in, c_out, kernel, side_in, side_out), cast_input=first,
              input_grad=not first, backward_kernels=2.0 if not first else 1.0)


def elementwise(label: str, elements: float, passes: float = 2.0, flops: float = 0.0,
                kernels: float = 1.0, split: bool = True, fp32: bool = False,
                backward_kernels: float | None = None, upcast: bool = False) -> Op:
    """A memory-bound op over ``elements`` elements per sample, touching each ``passes`` times
    (2: read and write); its backward launches as many kernels unless told otherwise."""
    return Op("elementwise", flops, passes * elements, kernels=kernels, split=split,
              label=label, fp32=fp32, upcast=upcast,
              backward_kernels=kernels if backward_kernels is None else backward_kernels)


def norm(label: str, width: int, elements: int, split: bool = True,
         layer_norm: bool = True) -> Op:
    """A LayerNorm (``layer_norm``, FP32 under autocast; backward: input gradient and the
    affine parameters' gradients, 2 kernels) or a BatchNorm (cuDNN, in the activations'
    precision; one backward kernel) in training: ~5 FLOP per element, reads its input twice
    (the statistics, then the normalization) and writes the output; the ``2 x width`` affine
    parameters are read once."""
    return Op("elementwise", 5 * elements, 3 * elements, 2 * width, split=split, label=label,
              fp32=layer_norm, backward_kernels=2.0 if layer_norm else 1.0)


def attention_core(label: str, seq: int, hidden: int, heads: int, causal: bool,
                   keys: int | None = None, kv_hidden: int | None = None,
                   kind: str = "attention") -> Op:
    """A fused attention kernel (``kind`` ``attention``: FlashAttention-2, PyTorch SDPA's flash
    or memory-efficient kernel; ``fused_attention``: Transformer Engine's cuDNN fused attention,
    priced at the GPU's ``efficiency.fused_attention``) of ``heads`` heads, ``hidden``
    elements wide in all, ``seq`` queries attending ``keys`` keys (default ``seq``): scores and
    weighted sum, 4 x queries x keys x hidden FLOP per sample (half of them skipped when
    ``causal``: the kernel does not compute masked blocks); reads q, k, v (K and V
    ``kv_hidden`` wide: grouped-query attention; default ``hidden``) and writes the output.
    Backward: one kernel (plus its preprocessing) of 2.5x the forward FLOP, as the scores are
    recomputed (Dao, FlashAttention-2, 2023, §3.1)."""
    keys = seq if keys is None else keys
    kv_hidden = hidden if kv_hidden is None else kv_hidden
    return Op(kind, 4 * seq * keys * hidden, 2 * seq * hidden + 2 * keys * kv_hidden,
              label=label, shape=(seq, keys, heads, int(causal)), backward_kernels=2.0)
