"""A zoo model's chain priced by the calibrated GPU model instead of FLOP / sustained FLOP/s.

The planner divides a block's "FLOP" by a GPU's FLOP/s. A calibrated chain stores each block's
predicted seconds (``models.compute.CalibratedCompute``: per-op kind, precision, memory traffic
and kernel overhead) times ``rate``, the FLOP/s its device graph gives every GPU, so stage
times come out as the calibrated seconds on a graph of that GPU. Under tensor parallelism the
per-GPU seconds are priced again at the degree (``Op.split`` work divided, the rest repeated
unless ``sequence_parallel``) rather than divided by it, and the group's blocking exchanges are
added as in ``Chain.with_tensor_parallel``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import groupby

import numpy as np

from dlsched.errors import ConfigError
from dlsched.hardware.device_graph import DeviceGraph
from dlsched.models.compute import CalibratedCompute, calibrated
from dlsched.models.layer import Model
from dlsched.pipeline.chains.chain import Chain, chain_from_model
from dlsched.pipeline.chains.memory_model import (
    MemoryModel,
    is_transformer_layer,
    transformer_stash,
)
from dlsched.pipeline.chains.tensor_parallel import transformer_layout


def block_seconds(model: Model, microbatch_size: int,
                  compute: CalibratedCompute) -> tuple[np.ndarray, np.ndarray]:
    """Per block (consecutive layers sharing ``Layer.block``): forward and backward seconds
    of one microbatch on ``compute``, each block run as one of a stage's blocks back to back
    (``CalibratedCompute.repeated_time``)."""
    forward, backward = [], []
    for _, group in groupby(model.layers, key=lambda layer: layer.block or layer.name):
        layers = list(group)
        forward.append(compute.repeated_time(layers, microbatch_size, False))
        backward.append(compute.repeated_time(layers, microbatch_size, True))
    return np.array(forward), np.array(backward)


@dataclass(frozen=True, eq=False)
class CalibratedChain(Chain):
    """A chain whose FLOP are calibrated seconds x ``rate`` (see the module docstring)."""

    model: Model | None = field(default=None, repr=False)
    compute: CalibratedCompute | None = field(default=None, repr=False)
    rate: float = 1.0
    accumulation_per_byte: float = 0.0
    """Bytes the gradient accumulation moves per byte of a block's parameters after each
    microbatch's backward, at the GPU's memory rate (0: fused into the GEMMs;
    ``job.grad_accumulation``)."""


    def with_tensor_parallel(self, t: int, message_s: float, flops: float) -> Chain:
        """This chain per GPU of a TP group of ``t``: bytes and exchanges as ``Chain``'s, the
        blocks' seconds priced at degree ``t``."""
        base = self.base
        if t == base.tensor_parallel:
            return self
        split = Chain.with_tensor_parallel(base, t, message_s, flops)
        forward, backward = block_seconds(self.model, self.samples,
                                          replace(self.compute, tensor_parallel=t))
        messages = np.array(base.tensor_layout.messages, dtype=float) * message_s * flops
        scale = forward * self.rate / np.maximum(base.forward_flops, 1e-300)
        priced = replace(split, forward_flops=forward * self.rate + messages[:, 0],
                         backward_flops=backward * self.rate + messages[:, 1]
                         + _accumulation_flops(split.param_bytes, self.accumulation_per_byte,
                                               self.compute, self.rate),
                         recompute_flops=base.recompute_flops * scale)
        return priced.with_recompute(self.recompute)


def calibrated_chain(model: Model, microbatch_size: int, compute: CalibratedCompute,
                     rate: float, memory: MemoryModel | None = None,
                     heads: int | None = None, seq: int | None = None,
                     accumulation_per_byte: float = 0.0) -> CalibratedChain:
    """The chain of ``model`` at ``microbatch_size`` priced on ``compute`` for a graph whose
    GPUs have ``rate`` FLOP/s, each block's backward with its gradient accumulation
    (``accumulation_per_byte``, ``CalibratedChain``). A transformer the memory model does not
    know (``heads`` and ``seq`` given) gets its tensor layout and Korthikanti et al. stash
    here."""
    memory = memory or MemoryModel()
    chain = chain_from_model(model, microbatch_size, memory=memory)
    forward, backward = block_seconds(model, microbatch_size, compute)
    if chain.tensor_layout is None and heads is not None and seq is not None:
        chain = _with_transformer_layout(chain, model, microbatch_size, heads, seq, memory)
    scale = forward * rate / np.maximum(chain.forward_flops, 1e-300)
    accumulate = _accumulation_flops(chain.param_bytes, accumulation_per_byte, compute, rate)
    return CalibratedChain(**{**_fields(chain), "forward_flops": forward * rate,
                              "backward_flops": backward * rate + accumulate,
                              "recompute_flops": chain.recompute_flops * scale},
                           model=model, compute=compute, rate=rate,
                           accumulation_per_byte=accumulation_per_byte)


def _accumulation_flops(param_bytes: np.ndarray, per_byte: float,
                        compute: CalibratedCompute | None, rate: float) -> np.ndarray:
    """The gradient accumulation's seconds per block (``per_byte`` bytes moved per byte of
    parameters at the GPU's memory rate) in a chain's unit, seconds x ``rate``."""
    if not per_byte:
        return np.zeros_like(param_bytes, dtype=float)
    assert compute is not None
    return param_bytes * per_byte / compute.gpu.memory_rate * rate


def _with_transformer_layout(chain: Chain, model: Model, batch: int, heads: int, seq: int,
                             memory: MemoryModel) -> Chain:
    hidden = next(layer.params for layer in model.layers if layer.name == "ln_f.weight")
    layers = [is_transformer_layer(name) for name in chain.block_names]
    element = memory.activation_bytes
    stash = [transformer_stash(seq, batch, hidden, heads, element, "none") if layer else kept
             for layer, kept in zip(layers, chain.stash_bytes, strict=True)]
    selective = [transformer_stash(seq, batch, hidden, heads, element, "selective") if layer
                 else kept for layer, kept in zip(layers, chain.selective_stash_bytes,
                                                  strict=True)]
    attention = 4.0 * batch * seq * seq * hidden
    return replace(chain, stash_bytes=np.array(stash), selective_stash_bytes=np.array(selective),
                   recompute_flops=np.array([attention if layer else 0.0 for layer in layers]),
                   tensor_layout=transformer_layout(layers, seq, batch, hidden, heads, element))


def _fields(chain: Chain) -> dict:
    """The dataclass fields of a plain chain, to rebuild it as a CalibratedChain."""
    return {name: getattr(chain, name) for name in Chain.__dataclass_fields__}


def zoo_chain_on_gpu(name: str, microbatch_size: int, memory: MemoryModel, gpu: str,
                     graph: DeviceGraph) -> CalibratedChain:
    """The zoo model ``name`` priced on the calibrated GPU ``gpu`` (``a100``, ``h100-tf32``, a
    GPU file; precision: the name's, else ``memory.precision``) for ``graph``: its blocks take
    the calibrated seconds on a GPU of the graph's first GPU's FLOP/s (others scale by their
    FLOP/s), tensor parallelism repeats or splits norms as ``memory.sequence_parallel`` says."""
    from dlsched.models.zoo import get_model

    if name.lower().endswith((".yaml", ".yml", ".json")):
        raise ConfigError(f"--gpu: prices zoo models only; {name!r} is a chain file (its blocks "
                          "carry their own FLOP)")
    precision = None if "-" in gpu and not gpu.endswith((".yaml", ".yml", ".json")) else \
        memory.precision
    compute = calibrated(gpu, precision, sequence_parallel=memory.sequence_parallel)
    return calibrated_chain(get_model(name), microbatch_size, compute, graph.devices[0].flops,
                            memory)
