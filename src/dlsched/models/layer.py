"""What is trained: a model is an ordered chain of layers (forward order, input first).

Units: parameters are counted in elements; ``forward_flops`` is FLOP per sample;
``activation_bytes`` is the layer's output activation per sample in bytes (at the model's
``dtype_bytes``); profiled times are seconds for the stated ``batch_size``; ``ops`` lists
what the layer runs (``models.ops``: kind, FLOP, memory traffic, kernels) for the calibrated
compute model.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlsched.models.ops import Op


@dataclass(frozen=True)
class Layer:
    """One layer; in the zoo, one parameter tensor (``block`` names its enclosing module, e.g.
    ``encoder.layer.3`` or ``layer2.1``, so planners can coarsen layers into blocks)."""

    name: str
    params: int
    forward_flops: float = 0.0
    activation_bytes: int = 0
    block: str = ""
    forward_time: float | None = None
    backward_time: float | None = None
    ops: tuple[Op, ...] = ()


@dataclass(frozen=True)
class Model:
    """An ordered chain of layers; gradients are ``params x dtype_bytes`` bytes per layer."""

    name: str
    layers: tuple[Layer, ...]
    dtype_bytes: int = 4

    @property
    def num_params(self) -> int:
        """Total parameter count."""
        return sum(layer.params for layer in self.layers)

    def gradient_bytes(self) -> list[int]:
        """Gradient size of each layer in bytes, in forward order."""
        return [layer.params * self.dtype_bytes for layer in self.layers]
