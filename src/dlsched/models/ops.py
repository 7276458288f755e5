"""What a layer runs: ops with a kind, FLOP, memory traffic and kernel launches.

Units per op, for the forward pass: ``flops`` FLOP per sample, ``elements`` activation
elements read plus written per sample, ``weights`` weight elements read once per pass (not per
sample), ``kernels`` kernel launches per pass. Bytes follow from the precision the op runs in
(``hardware.gpu.ELEMENT_BYTES``). The backward of every op is counted as twice its forward in
FLOP, traffic and kernels (a product's input and weight gradients; an elementwise op reads the
gradient and its saved input and writes the input gradient).

``split`` says how tensor parallelism (Megatron-LM) treats the op: True when its work is
divided across the group (the matrix products, the attention of each head, the MLP's
activation), False when every GPU of the group repeats it (layer norms, dropout and residual
additions on the full hidden state) unless sequence parallelism splits those too.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("gemm", "attention", "conv", "elementwise")
BACKWARD_FACTOR = 2.0


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

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"op kind: {self.kind!r} is not one of {', '.join(KINDS)}")
        for field in ("flops", "elements", "weights", "kernels"):
            if not getattr(self, field) >= 0:
                raise ValueError(f"op {field}: must be >= 0 (got {getattr(self, field)!r})")


def matmul(label: str, fan_in: int, fan_out: int, tokens: int, bias: bool = True) -> Op:
    """A dense layer on ``tokens`` vectors per sample: 2 x in x out FLOP per token (plus the
    fused bias), reads the input and writes the output."""
    flops = 2 * fan_in * fan_out * tokens + (fan_out * tokens if bias else 0)
    return Op("gemm", flops, (fan_in + fan_out) * tokens, fan_in * fan_out + fan_out * bias,
              label=label)


def conv(label: str, c_in: int, c_out: int, kernel: int, side_in: int, side_out: int,
         bias: bool = False) -> Op:
    """A ``kernel`` x ``kernel`` convolution from ``c_in`` channels at ``side_in`` to ``c_out``
    channels at ``side_out`` (square maps)."""
    out = c_out * side_out * side_out
    return Op("conv", 2 * kernel * kernel * c_in * out, c_in * side_in * side_in + out,
              kernel * kernel * c_in * c_out, label=label)


def elementwise(label: str, elements: float, passes: float = 2.0, flops: float = 0.0,
                kernels: float = 1.0, split: bool = True) -> Op:
    """A memory-bound op over ``elements`` elements per sample, touching each ``passes`` times
    (2: read and write)."""
    return Op("elementwise", flops, passes * elements, kernels=kernels, split=split,
              label=label)


def norm(label: str, width: int, elements: int, split: bool = True) -> Op:
    """A LayerNorm/BatchNorm in training: ~5 FLOP per element, reads its input twice (the
    statistics, then the normalization) and writes the output; the ``2 x width`` affine
    parameters are read once."""
    return Op("elementwise", 5 * elements, 3 * elements, 2 * width, split=split, label=label)


def attention_core(label: str, seq: int, hidden: int) -> Op:
    """A fused attention kernel (PyTorch SDPA, flash or memory-efficient): scores and weighted
    sum, 4 x seq^2 x hidden FLOP per sample; reads q, k, v and writes the output."""
    return Op("attention", 4 * seq * seq * hidden, 4 * seq * hidden, label=label)
