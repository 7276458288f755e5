"""Megatron-Core's partial recomputation: ``block:N`` recomputes the first N layers of each
model chunk in full and keeps every other layer's activations.

Megatron-Core's ``--recompute-granularity full --recompute-method block --recompute-num-layers
N`` (``TransformerBlock._checkpointed_forward``, megatron/core/transformer/
transformer_block.py, the ``block`` branch: "Checkpoint the input activation of only a set
number of individual Transformer layers and skip the rest", layer ``l`` of the block
checkpointed when ``l < recompute_num_layers``). A ``TransformerBlock`` is one model chunk: a
pipeline rank's layers, or under interleaving one virtual stage's, so N counts per chunk and a
chunk of fewer than N layers recomputes them all. Between no recomputation and ``full``
(``--recompute-method uniform --recompute-num-layers 1``, every layer), N trades a chunk's
activation memory for its rerun time one layer at a time: what NeMo's and Megatron-Bridge's
recipes set for large models that do not fit without recomputation.

Priced layer by layer (``recomputed_layers``): the first ``min(N, layers)`` layers of each
chunk cost what a layer under ``full`` costs, forward, backward with its rerun, its memory (the
layer's input kept, its activations rebuilt one layer at a time in the backward); the rest
what a layer without recomputation costs. Refused where the layer-by-layer split is not
modelled: MTP modules (Megatron-Core checkpoints them by its own rule), Megatron-Core's EP
overlap (its merged forward-backward steps pair whole stages), and PyTorch runtimes (TorchTitan's
FSDP2, torch.compile), whose checkpointing is another mechanism.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlsched.errors import ConfigError

if TYPE_CHECKING:
    from dlsched.job.execution import Execution
    from dlsched.job.model_spec import Model

PREFIX = "block:"
"""``block:N``: the recomputation setting's spelling (``Execution.recompute``)."""


def block_layers(recompute: str) -> int | None:
    """N of ``block:N``, None for any other recomputation setting; ConfigError naming
    ``recompute`` when N is not a whole number of at least 1."""
    if not recompute.startswith(PREFIX):
        return None
    count = recompute.removeprefix(PREFIX)
    if not (count.isdigit() and int(count) >= 1):
        raise ConfigError(f"{recompute!r}: block:N takes N, the layers of each model chunk "
                          "recomputed, a whole number >= 1", "recompute")
    return int(count)


def recomputed_layers(recompute: str, span: range) -> tuple[range, range]:
    """The layers of the chunk ``span`` recomputed in full and the layers kept as they are:
    ``block:N``'s first ``N`` and the rest; every layer under ``full``, none otherwise."""
    count = block_layers(recompute)
    if count is None:
        return (span, range(span.stop, span.stop)) if recompute == "full" else \
            (range(span.start, span.start), span)
    cut = span.start + min(count, len(span))
    return range(span.start, cut), range(cut, span.stop)


def check_block(spec: Model, layout: Execution) -> None:
    """ConfigError naming ``recompute`` where ``block:N`` is not priced (module docstring)."""
    if block_layers(layout.recompute) is None:
        return
    run = layout.run
    reasons = []
    if spec.mtp_layers:
        reasons.append(f"the model's {spec.mtp_layers} MTP module(s)")
    if run.moe_a2a_overlap:
        reasons.append("Megatron-Core's EP overlap")
    if run.sharding != "zero" or run.compile:
        reasons.append("a PyTorch runtime (FSDP2 sharding or torch.compile)")
    if reasons:
        raise ConfigError(f"{layout.recompute} (Megatron-Core's block recomputation) is not "
                          f"priced with {', '.join(reasons)}; accepted there: none, "
                          "selective, full, modules:<list>", "recompute")
