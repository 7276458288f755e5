"""Where a chain comes from: a zoo model by name (coarsened into blocks) or a chain file.

A chain file (YAML/JSON) lists blocks with per-microbatch costs::

    name: my-net
    input_grad_fraction: 0.5          # optional; omit to forbid split backwards
    split_backward_factor: 1.0        # optional: (I + W) / B, a split backward's cost
    state_factor: 4                   # optional: static state = 4 x params bytes
    blocks:
      - {name: embed, forward_flops: 2e12, backward_flops: 4e12, activation: 8 MB,
         params: 200 MB, stash: 64 MB,
         selective_stash: 48 MB, input: 8 MB, recompute_flops: 1e11}   # last three optional:
         # stash under selective / full recomputation, FLOP re-run by selective recomputation
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from dlsched.config import load_document, validate
from dlsched.errors import ConfigError
from dlsched.pipeline.chains.chain import Chain, chain_from_model
from dlsched.pipeline.chains.memory_model import MemoryModel
from dlsched.validation import MAX_LAYERS, ByteSize, FlopCount


class BlockSpec(BaseModel):
    """One block: FLOP per microbatch, bytes of output activation, parameters and stash."""

    model_config = ConfigDict(extra="forbid")
    name: str
    forward_flops: FlopCount
    backward_flops: FlopCount | None = None
    activation: ByteSize = 0
    params: ByteSize = 0
    stash: ByteSize = 0
    selective_stash: ByteSize | None = None
    input: ByteSize | None = None
    recompute_flops: FlopCount = 0.0


class ChainSpec(BaseModel):
    """A chain file."""

    model_config = ConfigDict(extra="forbid")
    name: str = "chain"
    input_grad_fraction: float | None = 0.5
    split_backward_factor: float = Field(default=1.0, ge=0.1, le=10, allow_inf_nan=False)
    state_factor: float = Field(default=4.0, ge=0, le=1e3, allow_inf_nan=False)
    blocks: list[BlockSpec] = Field(min_length=1, max_length=MAX_LAYERS)

    @model_validator(mode="after")
    def _some_compute(self) -> ChainSpec:
        if not any(b.forward_flops > 0 for b in self.blocks):
            raise ValueError("blocks: every forward_flops is 0; accepted: at least one block "
                             "with forward_flops > 0")
        return self

    def build(self) -> Chain:
        """The validated chain (backward defaults to 2 x forward)."""
        blocks = self.blocks
        backward = [b.backward_flops if b.backward_flops is not None else 2 * b.forward_flops
                    for b in blocks]
        return Chain(self.name, tuple(b.name for b in blocks),
                     np.array([b.forward_flops for b in blocks]), np.array(backward),
                     np.array([b.activation for b in blocks]), np.array([b.params for b in blocks]),
                     np.array([b.stash for b in blocks]), self.input_grad_fraction,
                     self.state_factor, _optional([b.selective_stash for b in blocks]),
                     _optional([b.input for b in blocks]),
                     np.array([b.recompute_flops for b in blocks]), memory_note="chain file",
                     split_backward_factor=self.split_backward_factor)


def _optional(values: list[int | None]) -> np.ndarray | None:
    """The per-block values when every block gives one, else None (the chain's default)."""
    return None if any(v is None for v in values) else np.array(values, dtype=float)


def load_chain(name_or_path: str | Path, microbatch_size: int,
               memory: MemoryModel | None = None) -> Chain:
    """A chain file by path, or the zoo model ``name`` at ``microbatch_size`` samples under
    ``memory`` (default ``MemoryModel()``; chain files carry their own bytes and take only the
    runtime reserve from ``memory``)."""
    key = str(name_or_path)
    memory = memory or MemoryModel()
    if Path(key).suffix.lower() in {".yaml", ".yml", ".json"}:
        chain = validate(ChainSpec, load_document(key), key).build()
        return replace(chain, samples=microbatch_size, reserve_bytes=float(memory.reserve_bytes),
                       fragmentation=memory.fragmentation)
    try:
        from dlsched.models.zoo import get_model
    except ImportError as error:
        raise ConfigError(f"model: {key!r} is not a .yaml/.json chain file and the model zoo "
                          "is not available") from error
    return chain_from_model(get_model(key), microbatch_size, memory=memory)
