"""The embeddings' weight gradients outside the GEMMs: created whole, and a tied one's two summed.

Two passes over an embedding's weight gradient that run on every microbatch whatever its tokens
(units: bytes per microbatch on one GPU; the callers divide by the GPU's memory rate):

* ``embedding_fill_bytes``: ``F.embedding``'s backward (``embedding_dense_backward_cuda``)
  allocates the weight's gradient with ``at::zeros({num_weights, embedding_dim})`` on both of
  its paths (pytorch/pytorch ``aten/src/ATen/native/cuda/Embedding.cu`` at 1c94016e for up to
  3,072 indices; ``embedding_backward_cuda_kernel`` in ``EmbeddingBackwardKernel.cu`` at
  01b9dc56 beyond) and then scatters the tokens' rows into it. Megatron's
  ``VocabParallelEmbedding`` and its learned position table both call it, densely
  (``megatron/core/tensor_parallel/layers.py`` and ``megatron/model/language_model.py`` in
  microsoft/Megatron-DeepSpeed at f4157bea): one write of the rank's padded vocabulary shard
  and of the position table per microbatch, in the weights' precision (FP32 under autocast).
* ``tied_sum_bytes``: with the embedding and the output layer on one stage the tied weight is
  used twice, so autograd's engine gathers both gradients in its ``AccumulateGrad`` node's
  input buffer and adds them (``old_var + var``: both read, the sum written;
  ``torch/csrc/autograd/input_buffer.cpp``, pytorch/pytorch at 00d40e7f) before the
  accumulation adds the sum into ``.grad``. This is the path where weight gradients leave
  autograd as tensors (``grad_accumulation`` ``separate``: DeepSpeed's fp16 engine, under
  which Megatron-DeepSpeed's ``GPTModelPipe`` ties the two through one ``TiedLayerSpec``
  module, ``megatron/model/gpt_model.py`` at f4157bea). With the fusion the head's weight
  gradient goes into the main gradient inside its GEMM and nothing is summed; on more stages
  each copy has one gradient (the copies are all-reduced once per iteration).
"""

from __future__ import annotations

from dlsched.job.compute.grad_accumulation import GRADIENT_BYTES
from dlsched.job.execution import Execution
from dlsched.job.memory.parameters import embedding_parameters_per_gpu
from dlsched.job.model_spec import Model


def embedding_fill_bytes(spec: Model, tp: int, precision: str) -> float:
    """Bytes one GPU of a TP group of ``tp`` writes per microbatch creating the embeddings'
    zeroed dense weight gradients (module docstring): the memory model's count of them (the
    padded vocabulary shard and the position table) at a fresh gradient's bytes in
    ``precision`` (``grad_accumulation.GRADIENT_BYTES``)."""
    return GRADIENT_BYTES.get(precision, 2) * embedding_parameters_per_gpu(spec, tp)


def tied_sum_bytes(spec: Model, layout: Execution) -> float:
    """Bytes one GPU moves per microbatch summing the tied word embedding's two gradients
    (read both, write one; module docstring): zero unless the weight is tied, the model on one
    stage and the accumulation ``separate``."""
    run = layout.run
    if (run.grad_accumulation != "separate" or not spec.tied_embeddings
            or layout.virtual_stages > 1):
        return 0.0
    positions = spec.seq * spec.hidden if spec.learned_positions else 0
    matrix = embedding_parameters_per_gpu(spec, layout.tp) - positions
    return 3 * GRADIENT_BYTES.get(run.precision, 2) * matrix
