"""How a model's training memory is counted: static state per parameter, activations kept per
microbatch (with or without recomputation, tensor and sequence parallelism), the logits and
the loss buffer, and the runtime reserve no model can use.

Static state per parameter (``MemoryModel.state_bytes_per_param``): weights at the training
precision + gradients at ``grad_precision`` + FP32 master weights (16-bit weights only) + Adam's
two FP32 moments (8 B). Megatron-LM's default with BF16 keeps FP32 gradients: 2 + 4 + 4 + 8 =
18 B/param (``megatron/training/theoretical_memory_usage.py``: 18 without the distributed
optimizer; the Hugging Face guide "Model training anatomy": "18 bytes per model parameter" for
mixed precision with AdamW); 16-bit gradients give ZeRO's 2 + 2 + 12 = 16 (Rajbhandari et al.,
SC 2020, Section 3.1); FP32 training 4 + 4 + 8 = 16. Megatron keeps FP16 gradients in an extra
FP32 copy (20 B/param); that copy is not modelled (give ``state_bytes`` 20 for it).

Activations of a transformer layer follow Korthikanti et al., "Reducing Activation
Recomputation in Large Transformer Models" (MLSys 2023, arXiv 2205.05198), Section 4 and
Table 2, per microbatch of ``b`` sequences of ``s`` tokens, hidden size ``h``, ``a`` heads,
``p`` bytes per activation element and 1-byte dropout masks: ``s b h (16 p + 2) + a s^2 b
(2 p + 1)`` bytes, with p = 2 the paper's ``s b h (34 + 5 a s / h)``. Selective recomputation
(the attention core is recomputed) drops the ``a s^2 b`` term; full recomputation keeps only
the layer input ``p s b h``. Under tensor parallelism of degree ``t`` with sequence parallelism
everything is split: ``s b h / t (34 + 5 a s / h)``; without it the layer norms' inputs, the
dropout masks and the inputs of the first linear layers of attention and MLP (``(4 p + 2) s b
h``, with p = 2 the paper's ``10 s b h``) stay whole on every GPU: ``s b h (10 + 24 / t + 5 a s
/ (h t))``, and under full recomputation the layer input ``p s b h`` is not split either.

Around the layers (Korthikanti et al., Section 4.3; Megatron-LM's estimator): the embedding
keeps the token ids (8 B per token) and its dropout mask (``s b h``); the output layer keeps
the inputs of the final layer norm and of the vocabulary projection (``2 p s b h``) and the
FP32 logits the cross-entropy loss needs for its backward (``4 s b v``, split over the TP
group by the vocabulary-parallel loss), together ``4 s b h (1 + v / h)`` at p = 2; while the
loss runs, the logits in activation precision (``p s b v``) sit beside their FP32 copy, a
transient the stage must also hold (``workspace_bytes``). The first pipeline stage of a 1F1B
schedule holds ``p`` microbatches: the simulator counts the stashes of the microbatches in
flight on each GPU.

Runtime reserve (``usable``): a GPU of ``capacity`` bytes gives the model only ``(capacity -
reserve_bytes) x (1 - fragmentation)``. ``reserve_bytes`` defaults to the 1343 MiB the CUDA
context and kernels took in the Hugging Face guide "Model training anatomy" (``torch.ones(1,
1).to("cuda")`` on a V100, read with NVML; the guide says 1-2 GB); ``fragmentation`` defaults to
0.15, the share of GPU memory PyTorch's caching allocator loses to fragmentation in LLM training
on A100-80GB that GMLake (Guo et al., ASPLOS 2024) recovers on average (9.2 GB, up to 25 GB).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from dlsched.errors import ConfigError
from dlsched.models.layer import Model
from dlsched.models.zoo import TransformerModel, TransformerShape

PRECISION_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
RECOMPUTE_MODES = ("none", "selective", "full")
ADAM_MOMENT_BYTES = 8.0
MASTER_WEIGHT_BYTES = 4.0
LOSS_BYTES = 4
TOKEN_ID_BYTES = 8
CONTEXT_BYTES = 1343 * 2**20
FRAGMENTATION = 0.15
MAX_RESERVE = 2**40


@dataclass(frozen=True)
class MemoryModel:
    """Training ``precision`` of weights and activations (fp32, bf16, fp16), ``grad_precision``
    of the gradients, ``sequence_parallel`` (with tensor parallelism), the runtime reserve
    (``reserve_bytes`` per GPU and the ``fragmentation`` share of the rest) and ``state_bytes``,
    a given number of static bytes per parameter that replaces the Adam breakdown."""

    precision: str = "bf16"
    grad_precision: str = "fp32"
    sequence_parallel: bool = True
    reserve_bytes: float = CONTEXT_BYTES
    fragmentation: float = FRAGMENTATION
    state_bytes: float | None = None

    def __post_init__(self) -> None:
        for field, value in (("precision", self.precision),
                             ("grad_precision", self.grad_precision)):
            if value not in PRECISION_BYTES:
                raise ConfigError(f"{field}: {value!r} is not one of " + ", ".join(PRECISION_BYTES))
        if self.state_bytes is not None and not 0 < self.state_bytes < 1e3:
            raise ConfigError(f"state bytes per parameter: {self.state_bytes} must be in "
                              "(0, 1000)")
        if not 0 <= self.reserve_bytes <= MAX_RESERVE:
            raise ConfigError(f"memory reserve: {self.reserve_bytes} B must be in 0..1 TiB")
        if not 0 <= self.fragmentation < 1:
            raise ConfigError(f"memory fragmentation: {self.fragmentation} must be in [0, 1)")

    @property
    def activation_bytes(self) -> int:
        """Bytes per activation element."""
        return PRECISION_BYTES[self.precision]

    @property
    def grad_bytes(self) -> int:
        """Bytes per gradient element (what a data-parallel all-reduce moves)."""
        return PRECISION_BYTES[self.grad_precision]

    def state_breakdown(self) -> dict[str, float]:
        """Static bytes per parameter by part: weights, gradients, FP32 master weights, Adam."""
        weights = float(self.activation_bytes)
        master = MASTER_WEIGHT_BYTES if weights < MASTER_WEIGHT_BYTES else 0.0
        return {f"{self.precision} weights": weights,
                f"{self.grad_precision} gradients": float(self.grad_bytes),
                "fp32 master weights": master, "Adam moments": ADAM_MOMENT_BYTES}

    @property
    def state_bytes_per_param(self) -> float:
        """Static bytes per parameter: ``state_bytes`` when given, else the breakdown's sum."""
        if self.state_bytes is not None:
            return self.state_bytes
        return sum(self.state_breakdown().values())

    def usable(self, capacity: float) -> float:
        """Bytes of a GPU of ``capacity`` bytes the model may use (module docstring)."""
        return usable_bytes(capacity, self.reserve_bytes, self.fragmentation)

    def describe(self) -> str:
        """One line for tables and notes."""
        if self.state_bytes is not None:
            state = f"{self.state_bytes:g} B/param of state (given)"
        else:
            parts = " + ".join(f"{name} {value:g}" for name, value in
                               self.state_breakdown().items() if value)
            state = f"{self.state_bytes_per_param:g} B/param ({parts})"
        sp = "sequence parallel" if self.sequence_parallel else "no sequence parallelism"
        return (f"{self.precision} activations, {state}, {sp}; reserve "
                f"{self.reserve_bytes / 2**20:.0f} MiB + {self.fragmentation:.0%} of the rest")


def usable_bytes(capacity: float, reserve_bytes: float, fragmentation: float) -> float:
    """``(capacity - reserve_bytes) x (1 - fragmentation)`` bytes, at least 0."""
    return max(0.0, (capacity - reserve_bytes) * (1.0 - fragmentation))


def check_recompute(mode: str) -> str:
    """``mode`` if it is a recomputation mode, else ConfigError listing the accepted ones."""
    if mode not in RECOMPUTE_MODES:
        raise ConfigError(f"recompute: {mode!r} is not one of " + ", ".join(RECOMPUTE_MODES))
    return mode


def transformer_stash(seq: int, batch: int, hidden: int, heads: int, element_bytes: int,
                      mode: str) -> float:
    """Activation bytes one transformer layer keeps per microbatch (Korthikanti et al.)."""
    sbh = seq * batch * hidden
    if mode == "full":
        return float(element_bytes * sbh)
    linear = sbh * (16 * element_bytes + 2)
    if mode == "selective":
        return float(linear)
    return float(linear + heads * seq * seq * batch * (2 * element_bytes + 1))


def attention_core_flops(seq: int, batch: int, hidden: int) -> float:
    """Forward FLOP of one layer's attention core (scores and weighted sum): what selective
    recomputation runs again before the backward."""
    return 4.0 * batch * seq * seq * hidden


@dataclass(frozen=True)
class BlockMemory:
    """Bytes one block keeps per microbatch: ``stash`` (no recomputation), ``selective`` (under
    selective recomputation), ``input`` (kept under full recomputation; equal to ``stash`` for
    a block full recomputation leaves alone), ``replicated`` (the parts of those three that
    tensor parallelism does not split), ``workspace`` (held only while the block runs) and
    ``recompute_flops`` (what selective recomputation runs again)."""

    stash: float
    selective: float
    input: float
    replicated: tuple[float, float, float] = (0.0, 0.0, 0.0)
    workspace: float = 0.0
    recompute_flops: float = 0.0


def layer_memory(seq: int, batch: int, hidden: int, heads: int, element_bytes: int,
                 sequence_parallel: bool) -> BlockMemory:
    """A transformer layer (module docstring)."""
    sbh = seq * batch * hidden
    stash = transformer_stash(seq, batch, hidden, heads, element_bytes, "none")
    selective = transformer_stash(seq, batch, hidden, heads, element_bytes, "selective")
    kept = float(element_bytes * sbh)
    whole = 0.0 if sequence_parallel else float((4 * element_bytes + 2) * sbh)
    replicated = (0.0, 0.0, 0.0) if sequence_parallel else (whole, whole, kept)
    return BlockMemory(stash, selective, kept, replicated,
                       recompute_flops=attention_core_flops(seq, batch, hidden))


def embedding_memory(seq: int, batch: int, hidden: int, element_bytes: int, norm: bool,
                     sequence_parallel: bool) -> BlockMemory:
    """The embedding block: token ids, the dropout mask and, for an embedding with a layer
    norm (BERT), the norm's input; not recomputed."""
    kept = float(TOKEN_ID_BYTES * seq * batch + seq * batch * hidden * (1 + element_bytes * norm))
    whole = 0.0 if sequence_parallel else kept
    return BlockMemory(kept, kept, kept, (whole, whole, whole))


def head_memory(seq: int, batch: int, hidden: int, vocab: int, element_bytes: int,
                sequence_parallel: bool) -> BlockMemory:
    """The output block: final layer norm and vocabulary projection inputs, the FP32 logits of
    the loss, and the logits in activation precision as a transient; not recomputed."""
    inputs = float(2 * element_bytes * seq * batch * hidden)
    kept = inputs + LOSS_BYTES * seq * batch * vocab
    whole = 0.0 if sequence_parallel else inputs
    transient = element_bytes * seq * batch * vocab if element_bytes < LOSS_BYTES else 0
    return BlockMemory(kept, kept, kept, (whole, whole, whole), float(transient))


def other_memory(kept: float, input_bytes: float) -> BlockMemory:
    """Any other block: the outputs of its modules, none split by tensor parallelism."""
    return BlockMemory(kept, kept, input_bytes, (kept, kept, min(input_bytes, kept)))


def replicated_array(blocks: list[BlockMemory]) -> np.ndarray:
    """Per block, the (stash, selective, input) bytes tensor parallelism does not split."""
    return np.array([block.replicated for block in blocks], dtype=float).reshape(-1, 3)


_LAYER_NAME = re.compile(r"^(h|encoder\.layer)\.\d+$")


def is_transformer_layer(block: str) -> bool:
    """True for a zoo block that is one transformer layer (``h.3``, ``encoder.layer.3``)."""
    return _LAYER_NAME.match(block) is not None


def transformer_shape(model: Model) -> TransformerShape | None:
    """The shape of a zoo transformer (sequence, hidden size, heads, LM-head vocabulary),
    None for other models."""
    return model.shape if isinstance(model, TransformerModel) else None
