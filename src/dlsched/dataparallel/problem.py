"""A data-parallel iteration to schedule: per-layer times and gradient sizes, and the network.

Layers are in forward order (0 nearest the input). Backward runs L-1 -> 0, so layer l's
gradient is ready at ``ready[l] = sum of backward[j] for j >= l`` seconds after backward starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

from dlsched.dataparallel.comm import CommModel
from dlsched.errors import ConfigError
from dlsched.models.layer import Model


class LayerTimes(Protocol):
    """A compute model: a device's (``models.compute``) or the US-Byte authors' times
    (``authors_times.ParamsProportional``)."""

    def layer_times(self, model: Model, batch_size: int) -> tuple[list[float], list[float]]:
        """Forward and backward seconds of every layer, in forward order."""
        ...


@dataclass(frozen=True)
class DPProblem:
    """Forward/backward seconds and gradient bytes per layer, the all-reduce cost model, and
    ``in_flight``: how many all-reduces the network can carry at once, sharing its bandwidth
    (1: the serial network of the US-Byte reference model)."""

    forward: tuple[float, ...]
    backward: tuple[float, ...]
    grad_bytes: tuple[int, ...]
    comm: CommModel
    names: tuple[str, ...] = ()
    model: str = "custom"
    in_flight: int = 1

    def __post_init__(self) -> None:
        size = len(self.grad_bytes)
        if size == 0 or len(self.forward) != size or len(self.backward) != size:
            raise ConfigError("layers: forward, backward and grad_bytes need one entry per "
                              f"layer (got {len(self.forward)}, {len(self.backward)}, {size})")
        for field, values in (("forward", self.forward), ("backward", self.backward),
                              ("grad_bytes", self.grad_bytes)):
            bad = [i for i, v in enumerate(values) if not 0 <= v < math.inf]
            if bad:
                raise ConfigError(f"{field}[{bad[0]}]: must be finite and >= 0 (got "
                                  f"{values[bad[0]]!r})")
        if not 1 <= self.in_flight <= 1024:
            raise ConfigError(f"in_flight: must be between 1 and 1024 messages (got "
                              f"{self.in_flight!r})")
        if not self.names:
            object.__setattr__(self, "names", tuple(f"layer{i}" for i in range(size)))

    @property
    def num_layers(self) -> int:
        """Number of layers."""
        return len(self.grad_bytes)

    @cached_property
    def ready(self) -> tuple[float, ...]:
        """Seconds after backward starts at which each layer's gradient is ready."""
        ready, total = [0.0] * self.num_layers, 0.0
        for layer in reversed(range(self.num_layers)):
            total += self.backward[layer]
            ready[layer] = total
        return tuple(ready)

    @property
    def backward_end(self) -> float:
        """Seconds of the whole backward pass."""
        return self.ready[0]


def problem_from_model(model: Model, compute: LayerTimes, batch_size: int,
                       comm: CommModel, in_flight: int = 1) -> DPProblem:
    """Times from ``compute`` at ``batch_size`` samples per worker; gradients from the model;
    ``in_flight``: messages the network carries at once."""
    if batch_size < 1:
        raise ConfigError(f"batch_size: must be >= 1 sample per worker (got {batch_size})")
    forward, backward = compute.layer_times(model, batch_size)
    return DPProblem(tuple(forward), tuple(backward), tuple(model.gradient_bytes()), comm,
                     tuple(layer.name for layer in model.layers), model.name, in_flight)
