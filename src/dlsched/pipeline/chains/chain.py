"""The model as the pipeline planner sees it: a chain of blocks with per-microbatch costs.

Units: ``forward_flops``/``backward_flops`` FLOP per microbatch, ``activation_bytes`` the
block's output per microbatch (sent to the next stage; its gradient comes back with the same
size), ``param_bytes`` bytes of parameters, ``stash_bytes`` activation memory kept per in-flight
microbatch until its backward. ``state_factor`` x param bytes is the static memory of a block
(weights, gradients, optimizer state). ``input_grad_fraction`` is the share of the backward that
computes the input gradient (``I``; the rest is the weight gradient ``W``) when the backward can
be split as zero-bubble schedules do; ``None`` means it cannot. ``split_backward_factor`` is
what a split backward costs relative to a full one, ``(I + W) / B`` (1: splitting is free; a
measured runtime, e.g. torch's ``stage_backward_input``/``stage_backward_weight`` on CPU,
often needs 1.2-1.5x): ``I = factor x fraction x B`` and ``W = factor x (1 - fraction) x B``.
``samples`` is the number of samples in a microbatch when known: a stage can split its
microbatches across ``r`` replicas only when ``r`` divides it (``can_split``).
``tensor_layout`` (transformers) says how the chain splits under tensor parallelism and
``tensor_parallel`` is the degree this chain is for (``with_tensor_parallel``; its costs are
then per GPU of a TP group, see ``pipeline.tensor_parallel``).

Recomputation (``memory_model``): ``stash_bytes`` and ``backward_flops`` are those of the
``recompute`` mode in force; ``with_recompute(mode)`` derives the chain of another mode from
the per-block stash under selective recomputation (``selective_stash_bytes``, default: the
full stash), the layer inputs kept under full recomputation (``input_bytes``, default: the
previous block's output, 0 for block 0) and the FLOP that selective recomputation runs again
(``recompute_flops``, default 0); full recomputation adds each block's forward to its
backward. While a block's activations are recomputed they are held once more: a stage's
``static_bytes`` counts the largest such transient of its blocks, plus the block's
``workspace_bytes`` (held only while the block runs: the logits beside their FP32 copy at the
loss), default 0.

Runtime reserve: a GPU of ``capacity`` bytes gives the chain ``usable(capacity) = (capacity -
reserve_bytes) x (1 - fragmentation)`` (``pipeline.memory_model``; 0 and 0 by default, the
zoo and the CLI set the documented reserve).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import groupby

import numpy as np

from dlsched.errors import ConfigError
from dlsched.models.layer import Model
from dlsched.pipeline.chains.memory_model import (
    MAX_RESERVE,
    BlockMemory,
    MemoryModel,
    check_recompute,
    embedding_memory,
    head_memory,
    is_transformer_layer,
    layer_memory,
    other_memory,
    replicated_array,
    transformer_shape,
    usable_bytes,
)
from dlsched.pipeline.chains.tensor_parallel import TensorLayout, transformer_layout

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
    selective_stash_bytes: np.ndarray | None = None
    input_bytes: np.ndarray | None = None
    recompute_flops: np.ndarray | None = None
    recompute: str = "none"
    memory_note: str = ""
    split_backward_factor: float = 1.0
    samples: int | None = None
    tensor_layout: TensorLayout | None = None
    tensor_parallel: int = 1
    workspace_bytes: np.ndarray | None = None
    reserve_bytes: float = 0.0
    fragmentation: float = 0.0
    # per block, (forward, backward) seconds of its own communication inside its time that an
    # overlapped F & B pair hides behind the other chunk's compute (DualPipe's expert
    # all-to-alls, ``plans.dualpipe``; the job evaluator's stand-in chains); zeros by default
    overlap_seconds: np.ndarray | None = None
    origin: Chain | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        n = len(self.block_names)
        if n == 0:
            raise ConfigError("model: the chain needs at least one block")
        for name in ("forward_flops", "backward_flops", "activation_bytes", "param_bytes",
                     "stash_bytes"):
            values = np.asarray(getattr(self, name), dtype=float)
            if values.shape != (n,) or (values < 0).any():
                raise ConfigError(f"{name}: expected {n} values >= 0, got {values.tolist()}")
            object.__setattr__(self, name, values)
        defaults = {"selective_stash_bytes": self.stash_bytes,
                    "input_bytes": np.concatenate([[0.0], self.activation_bytes[:-1]]),
                    "recompute_flops": np.zeros(n), "workspace_bytes": np.zeros(n)}
        for name, default in defaults.items():
            given = getattr(self, name)
            values = default if given is None else np.asarray(given, dtype=float)
            if values.shape != (n,) or not np.isfinite(values).all() or (values < 0).any():
                raise ConfigError(f"{name}: expected {n} finite values >= 0, got "
                                  f"{values.tolist()}")
            object.__setattr__(self, name, values)
        hidden = np.zeros((n, 2)) if self.overlap_seconds is None else np.asarray(
            self.overlap_seconds, dtype=float)
        if hidden.shape != (n, 2) or not np.isfinite(hidden).all() or (hidden < 0).any():
            raise ConfigError(f"overlap_seconds: expected {n} (forward, backward) pairs of "
                              "finite seconds >= 0")
        object.__setattr__(self, "overlap_seconds", hidden)
        check_recompute(self.recompute)
        if not 0 <= self.reserve_bytes <= MAX_RESERVE or not 0 <= self.fragmentation < 1:
            raise ConfigError(f"memory reserve: {self.reserve_bytes} B (0..1 TiB) and "
                              f"fragmentation {self.fragmentation} ([0, 1)) are out of range")
        if not np.isfinite(self.state_factor) or self.state_factor < 0:
            raise ConfigError(f"state_factor: {self.state_factor} must be finite and >= 0")
        fraction = self.input_grad_fraction
        if fraction is not None and not 0.0 < fraction < 1.0:
            raise ConfigError(f"input_grad_fraction: {fraction} is outside (0, 1)")
        factor = self.split_backward_factor
        if not np.isfinite(factor) or not 0.1 <= factor <= 10.0:
            raise ConfigError(f"split_backward_factor: {factor} is outside [0.1, 10]")
        if self.samples is not None and self.samples < 1:
            raise ConfigError(f"samples: {self.samples} samples per microbatch must be >= 1")

    def can_split(self, replicas: int) -> bool:
        """Whether a microbatch can be split into ``replicas`` equal parts of whole samples
        (always, when the sample count is unknown)."""
        return self.samples is None or self.samples % replicas == 0

    @property
    def grad_shares(self) -> tuple[float, float]:
        """(I, W) seconds of a split backward as shares of the full backward's: (factor x
        fraction, factor x (1 - fraction)); (1, 0) when the backward cannot be split."""
        if self.input_grad_fraction is None:
            return 1.0, 0.0
        factor = self.split_backward_factor
        return factor * self.input_grad_fraction, factor * (1.0 - self.input_grad_fraction)

    @property
    def num_blocks(self) -> int:
        """Number of blocks (the planner's layers)."""
        return len(self.block_names)

    def static_bytes(self, first: int, last: int) -> float:
        """Memory of blocks ``first..last-1`` that does not depend on the microbatches in
        flight (bytes): weights, gradients, optimizer state and the largest transient of a
        running block (recomputation, workspace); found once per block range."""
        known = self.__dict__.setdefault("_static_bytes", {})
        if (first, last) not in known:
            transient = self.transient_bytes[first:last] + self.workspace_bytes[first:last]
            working = float(transient.max()) if last > first else 0.0
            known[(first, last)] = (float(self.param_bytes[first:last].sum()
                                          * self.state_factor) + working)
        return known[(first, last)]

    def usable(self, capacity: float) -> float:
        """Bytes of a GPU of ``capacity`` bytes this chain may use (the module docstring)."""
        return usable_bytes(capacity, self.reserve_bytes, self.fragmentation)

    @property
    def base(self) -> Chain:
        """The chain without recomputation this one was derived from (itself if none)."""
        return self.origin if self.origin is not None else self

    @property
    def transient_bytes(self) -> np.ndarray:
        """Per block: bytes held again while its activations are recomputed (0 without)."""
        return self.base.stash_bytes - self.stash_bytes

    def with_recompute(self, mode: str) -> Chain:
        """This chain under recomputation ``mode`` (none, selective, full)."""
        base = self.base
        if check_recompute(mode) == base.recompute:
            return base
        stash = {"selective": base.selective_stash_bytes,
                 "full": np.minimum(base.input_bytes, base.stash_bytes)}[mode]
        extra = base.forward_flops if mode == "full" else base.recompute_flops
        fraction, factor = base.input_grad_fraction, base.split_backward_factor
        total, added = float(base.backward_flops.sum()), float(extra.sum())
        if fraction is not None and total > 0:  # recomputation runs before the input gradient
            split = added + factor * total
            fraction = (added + fraction * factor * total) / split
            factor = split / (total + added)
        return replace(base, stash_bytes=stash, backward_flops=base.backward_flops + extra,
                       input_grad_fraction=fraction, split_backward_factor=factor,
                       recompute=mode, origin=base)

    def with_tensor_parallel(self, t: int, message_s: float, flops: float) -> Chain:
        """This chain per GPU of a TP group of ``t`` GPUs, under the same recomputation mode
        (``pipeline.tensor_parallel``): FLOP, parameters and activations divided by ``t``
        (but for the bytes ``tensor_layout.replicated`` keeps whole on every GPU),
        and each block's blocking exchanges (``tensor_layout.messages`` x ``message_s``
        seconds of one all-reduce equivalent on the group) added to its forward and, in the
        input-gradient part, its backward, as seconds x ``flops`` (the GPU's FLOP/s)."""
        base = self.base
        if t == base.tensor_parallel:
            return self
        layout = base.tensor_layout
        if base.tensor_parallel != 1 or layout is None:
            raise ConfigError(f"tensor_parallel: {t} needs a model with a tensor layout "
                              "(the zoo's transformers)")
        messages = np.array(layout.messages, dtype=float) * message_s * flops
        whole = (np.array(layout.replicated, dtype=float) if layout.replicated
                 else np.zeros((base.num_blocks, 3)))
        backward = base.backward_flops / t
        fraction, factor = base.input_grad_fraction, base.split_backward_factor
        total, added = float(backward.sum()), float(messages[:, 1].sum())
        if fraction is not None and total > 0:  # the exchanges run in the input gradient
            split = factor * total + added
            fraction = (fraction * factor * total + added) / split
            factor = split / (total + added)
        tp = replace(base, forward_flops=base.forward_flops / t + messages[:, 0],
                     backward_flops=backward + messages[:, 1],
                     activation_bytes=base.activation_bytes / t,
                     param_bytes=base.param_bytes / t,
                     stash_bytes=whole[:, 0] + (base.stash_bytes - whole[:, 0]) / t,
                     selective_stash_bytes=whole[:, 1] + (base.selective_stash_bytes
                                                          - whole[:, 1]) / t,
                     input_bytes=whole[:, 2] + (base.input_bytes - whole[:, 2]) / t,
                     workspace_bytes=base.workspace_bytes / t,
                     recompute_flops=base.recompute_flops / t,
                     input_grad_fraction=fraction, split_backward_factor=factor,
                     tensor_parallel=t, origin=None)
        return tp.with_recompute(self.recompute)


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


def chain_from_model(model: Model, microbatch_size: int, backward_ratio: float = 2.0,
                     memory: MemoryModel | None = None) -> Chain:
    """Coarsen a model into blocks (consecutive layers sharing ``Layer.block``).

    Per block: forward FLOP = sum of layers' ``forward_flops`` x ``microbatch_size`` (or the
    profiled ``forward_time`` x ``REFERENCE_FLOPS``); backward = ``backward_ratio`` x forward
    unless profiled; output activation = the last layer's, at ``memory.precision``; stash =
    the output of every module (a weight and its bias count once), or for a zoo transformer
    the ``memory_model`` bytes of its embedding, layers (Korthikanti et al.) and output head
    (logits and loss buffer); parameter bytes (the gradients that are all-reduced) at
    ``memory.grad_precision``; static state = ``memory.state_bytes_per_param`` per parameter;
    the runtime reserve of ``memory``.
    """
    if microbatch_size < 1:
        raise ConfigError(f"microbatch_size: {microbatch_size} must be >= 1")
    memory = memory or MemoryModel()
    scale = memory.activation_bytes / model.dtype_bytes
    groups = [(block, list(group)) for block, group in
              groupby(model.layers, key=lambda layer: layer.block or layer.name)]
    names = [block for block, _ in groups]
    fwd = [sum(_forward_flops(x, microbatch_size) for x in layers) for _, layers in groups]
    bwd = [sum(_backward_flops(x, microbatch_size, backward_ratio) for x in layers)
           for _, layers in groups]
    act = [layers[-1].activation_bytes * microbatch_size * scale for _, layers in groups]
    params = [sum(x.params for x in layers) * memory.grad_bytes for _, layers in groups]
    blocks = [_block_memory(model, index, layers, microbatch_size, memory,
                            act[index - 1] if index else 0.0)
              for index, (_, layers) in enumerate(groups)]
    shape = transformer_shape(model)
    layout = None if shape is None else transformer_layout(
        [is_transformer_layer(block) for block in names], shape.seq, microbatch_size,
        shape.hidden, shape.heads, memory.activation_bytes,
        tuple(map(tuple, replicated_array(blocks).tolist())))
    return Chain(model.name, tuple(names), np.array(fwd), np.array(bwd), np.array(act),
                 np.array(params), np.array([b.stash for b in blocks]),
                 state_factor=memory.state_bytes_per_param / memory.grad_bytes,
                 selective_stash_bytes=np.array([b.selective for b in blocks]),
                 input_bytes=np.array([b.input for b in blocks]),
                 recompute_flops=np.array([b.recompute_flops for b in blocks]),
                 memory_note=memory.describe(), samples=microbatch_size, tensor_layout=layout,
                 workspace_bytes=np.array([b.workspace for b in blocks]),
                 reserve_bytes=float(memory.reserve_bytes), fragmentation=memory.fragmentation)


def _block_memory(model: Model, index: int, layers: list, microbatch_size: int,
                  memory: MemoryModel, input_bytes: float) -> BlockMemory:
    """The ``memory_model`` bytes of block ``index``: a transformer's embedding (block 0),
    layers and LM head (the last block, when the shape has a vocabulary); the outputs of its
    modules (a weight and its bias count once) for any other block."""
    shape, p, sp = transformer_shape(model), memory.activation_bytes, memory.sequence_parallel
    block = layers[0].block or layers[0].name
    if shape is not None and is_transformer_layer(block):
        return layer_memory(shape.seq, microbatch_size, shape.hidden, shape.heads, p, sp)
    if shape is not None and index == 0:
        norm = any("LayerNorm" in layer.name for layer in layers)
        return embedding_memory(shape.seq, microbatch_size, shape.hidden, p, norm, sp)
    if shape is not None and shape.vocab and layers[-1] is model.layers[-1]:
        return head_memory(shape.seq, microbatch_size, shape.hidden, shape.vocab, p, sp)
    modules = {layer.name.removesuffix(".weight").removesuffix(".bias"): layer.activation_bytes
               for layer in layers}
    return other_memory(sum(modules.values()) * microbatch_size * p / model.dtype_bytes,
                        input_bytes)


def _forward_flops(layer: object, microbatch_size: int) -> float:
    if layer.forward_time is not None and not layer.forward_flops:
        return layer.forward_time * REFERENCE_FLOPS
    return layer.forward_flops * microbatch_size


def _backward_flops(layer: object, microbatch_size: int, ratio: float) -> float:
    if layer.backward_time is not None:
        return layer.backward_time * REFERENCE_FLOPS
    return ratio * _forward_flops(layer, microbatch_size)
