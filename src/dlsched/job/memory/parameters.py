"""Parameters per GPU (counts, not bytes) as the memory model and the data-parallel step count
them: the embedding, the head, an MTP module, and each virtual pipeline stage's
(``stage_parameters``), which ``job.memory.per_gpu`` (FSDP2's FP32 unsharded gradients per
chunk under PP), ``job.compute.grad_accumulation`` and ``job.evaluation`` share. A layer's
count is ``job.memory.sharded_units.layer_parameters_per_gpu``'s, an MoE layer's non-expert
part and its routed experts ``job.memory.moe``'s.

**Parameters of a stage.** Megatron-LM puts ``layers / (pp x chunks)`` layers on each virtual
stage, ``chunks`` per rank (virtual stage ``c x pp + s`` is chunk ``c`` of rank ``s``), or with
the embedding and the loss accounted as layers one fewer on the first and the last
(``Execution.pipeline_split``, ``job.pipeline_split``). Under
tensor parallelism of ``t``, a layer's QKV, projection and MLP weights and the column-parallel
biases are split; the two row-parallel biases (projection, second MLP linear: ``RowParallelLinear``
keeps its bias whole) and the two layer norms are replicated on every TP rank, with or without
sequence parallelism (sequence parallelism splits their activations, not their weights): ``6 h``
per layer. The first stage holds the vocabulary-parallel word embedding (``V' h / t``, ``V'``
the vocabulary padded to a multiple of 128 t, Megatron's ``--make-vocab-size-divisible-by``
128) and the learned positions (``s h``, a plain ``torch.nn.Embedding``, replicated); the last
the final norm (``2 h``) and the output matrix ``V' h / t`` when untied, or, tied with
``pp > 1``, Megatron's copy of the word embedding on the last stage (counted in full, with its
own gradients and optimizer state).
"""

from __future__ import annotations

import math

from dlsched.job.compute.mtp import MTP_NORMS, mtp_layer_is_moe
from dlsched.job.execution import Execution
from dlsched.job.memory.moe import experts_per_gpu, moe_dense_delta
from dlsched.job.memory.sharded_units import layer_parameters_per_gpu
from dlsched.job.model_spec import Model

VOCAB_DIVISOR = 128  # Megatron-LM --make-vocab-size-divisible-by default


def padded_vocab(vocab: int, tp: int) -> int:
    """Megatron-LM's padded vocabulary: a multiple of 128 x TP."""
    multiple = VOCAB_DIVISOR * tp
    return math.ceil(vocab / multiple) * multiple


def embedding_parameters_per_gpu(spec: Model, tp: int) -> float:
    """Vocabulary-parallel word embedding plus the replicated learned positions (none with
    rotary embeddings)."""
    positions = spec.seq * spec.hidden if spec.learned_positions else 0
    return padded_vocab(spec.vocab, tp) * spec.hidden / tp + positions


def head_parameters_per_gpu(spec: Model, layout: Execution) -> float:
    """Final norm plus the output matrix when untied, or Megatron's copy of the word embedding
    on the last stage when tied and ``pp > 1``."""
    matrix = padded_vocab(spec.vocab, layout.tp) * spec.hidden / layout.tp
    own_matrix = not spec.tied_embeddings or layout.pp > 1
    return spec.norm_parameters() + (matrix if own_matrix else 0.0)


def mtp_unit_per_gpu(spec: Model, tp: int, module: int) -> float:
    """MTP module ``module``'s parameters per GPU but its routed experts (``job.compute.mtp``):
    its layer as ``layer_parameters_per_gpu``, ``eh_proj`` split over TP (column-parallel in
    Megatron-Core's ``MultiTokenPredictionLayer``), its three norms whole."""
    delta = moe_dense_delta(spec, tp) if mtp_layer_is_moe(spec, module) else 0.0
    return (layer_parameters_per_gpu(spec, tp) + delta + 2 * spec.hidden * spec.hidden / tp
            + MTP_NORMS * spec.norm_parameters())


def stage_parameters(spec: Model, layout: Execution,
                     experts: bool = False) -> list[float]:
    """Parameters on one GPU of each virtual stage, counted as the memory model counts them
    (``job.memory``: split weights over TP with the norms and row-parallel biases whole, the
    vocabulary padded): its layers (an MoE layer's non-expert part as ``job.moe_memory`` counts
    it, and with ``experts`` its routed experts on the GPU), the embedding on the first stage,
    the head on the last (with a copy of the tied embedding when the pipeline has more than one
    rank)."""
    tp = layout.tp
    layer = layer_parameters_per_gpu(spec, tp)
    delta = moe_dense_delta(spec, tp) if spec.experts else 0.0
    routed = experts_per_gpu(spec, layout) if spec.experts and experts else 0.0
    params = [layer * len(span) + (delta + routed) * spec.moe_layers_in(span.start, span.stop)
              for span in layout.stage_layers(spec.layers, spec.mtp_layers)]
    params[0] += embedding_parameters_per_gpu(spec, tp)
    params[-1] += head_parameters_per_gpu(spec, layout)
    for module in range(spec.mtp_layers):  # beside the head (job.compute.mtp)
        params[-1] += mtp_unit_per_gpu(spec, tp, module) + routed * mtp_layer_is_moe(spec,
                                                                                   module)
    return params
