"""The model as the pipeline planner sees it: a chain of blocks with per-microbatch costs.

Units: ``forward_flops``/``backward_flops`` FLOP per microbatch, ``activation_bytes`` the
block's output per microbatch (sent to the next stage; its gradient comes back with the same
size), ``param_bytes`` bytes of parameters, ``stash_bytes`` activation memory kept per in-flight
microbatch until its backward. ``state_factor`` x param bytes is the static memory of a block
(weights, gradients, optimizer state). ``input_grad_fraction`` is the share of the backward that
computes the input gradient (``I``; the rest is the weight gradient ``W``) when the backward can
be split as zero-bubble schedules do; ``None`` means it cannot.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby

import numpy as np

from dlsched.errors import ConfigError
from dlsched.models.layer import Model

# FLOP/s of the "reference GPU" used to turn profiled per-layer seconds into FLOP.
REFERENCE_FLOPS = 1e12


@dataclass(frozen=True, eq=False)
class Chain:
    """Per-block costs of one microbatch, in forward order (see the module docstring)."""

    name: str
    block_names: tuple[str, ...]
    forward_flops: np.ndarray
    backward_flops: np.ndarray
    activation_bytes: np.ndarray
    param_bytes: np.ndarray
    stash_bytes: np.ndarray
    input_grad_fraction: float | None = 0.5
    state_factor: float = 4.0

    def __post_init__(self) -> None:
        n = len(self.block_names)
        if n == 0:
            raise ConfigError("model: the chain needs at least one block")
        for field in ("forward_flops", "backward_flops", "activation_bytes", "param_bytes",
                      "stash_bytes"):
            values = np.asarray(getattr(self, field), dtype=float)
            if values.shape != (n,) or (values < 0).any():
                raise ConfigError(f"{field}: expected {n} values >= 0, got {values.tolist()}")
            object.__setattr__(self, field, values)
        fraction = self.input_grad_fraction
        if fraction is not None and not 0.0 < fraction < 1.0:
            raise ConfigError(f"input_grad_fraction: {fraction} is outside (0, 1)")

    @property
    def num_blocks(self) -> int:
        """Number of blocks (the planner's layers)."""
        return len(self.block_names)

    def static_bytes(self, first: int, last: int) -> float:
        """Static memory of blocks ``first..last-1`` (bytes)."""
        return float(self.param_bytes[first:last].sum() * self.state_factor)


def synthetic_chain(forward_s: list[float], backward_s: list[float],
                    activation_bytes: list[float], param_bytes: list[float] | None = None,
                    stash_bytes: list[float] | None = None, split: bool = False,
                    name: str = "synthetic") -> Chain:
    """A chain given by seconds on a ``REFERENCE_FLOPS`` GPU (for tests and examples)."""
    n = len(forward_s)
    zeros = [0.0] * n
    return Chain(name, tuple(f"b{i}" for i in range(n)),
                 np.array(forward_s) * REFERENCE_FLOPS, np.array(backward_s) * REFERENCE_FLOPS,
                 np.array(activation_bytes, dtype=float),
                 np.array(param_bytes if param_bytes is not None else zeros, dtype=float),
                 np.array(stash_bytes if stash_bytes is not None else zeros, dtype=float),
                 0.5 if split else None)


def chain_from_model(model: Model, microbatch_size: int, backward_ratio: float = 2.0) -> Chain:
    """Coarsen a model into blocks (consecutive layers sharing ``Layer.block``).

    Per block: forward FLOP = sum of layers' ``forward_flops`` x ``microbatch_size`` (or the
    profiled ``forward_time`` x ``REFERENCE_FLOPS``); backward = ``backward_ratio`` x forward
    unless profiled; output activation = the last layer's; stash = all layers' activations.
    """
    if microbatch_size < 1:
        raise ConfigError(f"microbatch_size: {microbatch_size} must be >= 1")
    names, fwd, bwd, act, params, stash = [], [], [], [], [], []
    for block, group in groupby(model.layers, key=lambda layer: layer.block or layer.name):
        layers = list(group)
        names.append(block)
        forward = sum(_forward_flops(layer, microbatch_size) for layer in layers)
        fwd.append(forward)
        bwd.append(sum(_backward_flops(layer, microbatch_size, backward_ratio)
                       for layer in layers))
        act.append(layers[-1].activation_bytes * microbatch_size)
        params.append(sum(layer.params for layer in layers) * model.dtype_bytes)
        stash.append(sum(layer.activation_bytes for layer in layers) * microbatch_size)
    return Chain(model.name, tuple(names), np.array(fwd), np.array(bwd), np.array(act),
                 np.array(params), np.array(stash))


def _forward_flops(layer: object, microbatch_size: int) -> float:
    if layer.forward_time is not None and not layer.forward_flops:
        return layer.forward_time * REFERENCE_FLOPS
    return layer.forward_flops * microbatch_size


def _backward_flops(layer: object, microbatch_size: int, ratio: float) -> float:
    if layer.backward_time is not None:
        return layer.backward_time * REFERENCE_FLOPS
    return ratio * _forward_flops(layer, microbatch_size)
