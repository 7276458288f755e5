"""Building a zoo model layer by layer: one ``Layer`` per parameter tensor with its ops."""

from __future__ import annotations

from dataclasses import replace

from dlsched.models.layer import Layer
from dlsched.models.ops import Op, matmul, norm


class LayerBuilder:
    """Collects a model's layers in forward order; activation bytes are given in elements and
    scaled by ``dtype_bytes`` (bytes per element)."""

    def __init__(self, dtype_bytes: int) -> None:
        self.dtype_bytes = dtype_bytes
        self.layers: list[Layer] = []

    def add(self, name: str, params: int, flops: float, elements: int, block: str,
            ops: tuple[Op, ...] = ()) -> None:
        self.layers.append(Layer(name, params, float(flops), elements * self.dtype_bytes, block,
                                 ops=ops))

    def attach(self, *ops: Op) -> None:
        """Append ``ops`` to the last layer added (what runs after its module)."""
        last = self.layers[-1]
        self.layers[-1] = replace(last, ops=last.ops + ops)

    def norm(self, prefix: str, width: int, elements: int, block: str,
             split: bool = True, layer_norm: bool = True, bias: bool = True) -> None:
        """A LayerNorm (or a BatchNorm: ``layer_norm`` False): weight and bias of ``width``
        (an RMSNorm: ``bias`` False, the weight only); ~5 FLOP per element."""
        self.add(f"{prefix}.weight", width, 5 * elements, elements, block,
                 (norm(prefix, width, elements, split, layer_norm),))
        if bias:
            self.add(f"{prefix}.bias", width, 0, elements, block)

    def linear(self, prefix: str, fan_in: int, fan_out: int, tokens: int, block: str,
               bias: bool = True, extra_flops: float = 0.0, cast_input: bool = False,
               summed_grads: int = 0) -> None:
        """A dense layer applied to ``tokens`` vectors (weight then bias); ``extra_flops`` are
        counted on the weight (the ops that carry them are attached by the caller);
        ``cast_input``: its input is FP32 under autocast (a LayerNorm's output);
        ``summed_grads``: see ``ops.matmul``."""
        self.add(f"{prefix}.weight", fan_in * fan_out, 2 * fan_in * fan_out * tokens + extra_flops,
                 fan_out * tokens, block,
                 (matmul(prefix, fan_in, fan_out, tokens, bias, cast_input, summed_grads),))
        if bias:
            self.add(f"{prefix}.bias", fan_out, fan_out * tokens, fan_out * tokens, block)
