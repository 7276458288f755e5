"""What is trained: a model is an ordered chain of layers (forward order, input first).

Units: parameters are counted in elements; ``forward_flops`` is FLOP per sample;
``activation_bytes`` is the layer's output activation per sample in bytes (at the model's
``dtype_bytes``); profiled times are seconds for the stated ``batch_size``; ``ops`` lists
what the layer runs (``models.ops``: kind, FLOP, memory traffic, kernels) for the calibrated
compute model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

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


M = TypeVar("M", bound=Model)


def insert_per_block(model: M, ops: tuple[Op, ...], at: Callable[[Layer], int | None]) -> M:
    """``model`` with ``ops`` spliced into the first layer of each block for which ``at`` gives
    an index (inserted before that layer's op of that index; ``len(layer.ops)``: after its
    last); every other layer as it is."""
    layers: list[Layer] = []
    done: set[str] = set()
    for layer in model.layers:
        index = None if layer.block in done else at(layer)
        if index is not None:
            done.add(layer.block)
            layer = replace(layer, ops=(*layer.ops[:index], *ops, *layer.ops[index:]))
        layers.append(layer)
    return replace(model, layers=tuple(layers))
