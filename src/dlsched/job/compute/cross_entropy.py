"""The language-model loss as the framework runs it: Megatron's vocab-parallel cross-entropy on
the head's logits, unfused or fused (``Job.cross_entropy``).

The loss is memory-bound: it streams the ``s x V / t`` logits of a GPU (its vocabulary shard)
a few times. How many bytes per logit depends on the implementation, read in each one's source
(units: bytes per logit element; the logits come out of the head's GEMM in 16 bits):

* ``unfused``: Megatron-LM's ``vocab_parallel_cross_entropy`` on ``output.float()``, one eager
  kernel per tensor op: 13 FP32 passes over forward and backward, the zoo's op
  (``models.megatron_loss.megatron_cross_entropy``: the cast, max, subtract, exp, sum, divide; the
  backward's in-place scaling and cast back), with the small ops over the targets that make
  its kernels 18 forward and 8 backward (``models.megatron_loss.CROSS_ENTROPY_KERNELS``).
  Megatron-LM's and Megatron-Core's default (``cross_entropy_loss_fusion`` False:
  ``megatron/core/model_parallel_config.py`` at ee6737da); what SC21's and Korthikanti et
  al.'s runs used.
* ``native``: Megatron-Core's ``fused_vocab_parallel_cross_entropy``
  (``megatron/core/fusions/fused_cross_entropy.py`` at ee6737da, what
  ``--cross-entropy-loss-fusion`` with ``cross_entropy_fusion_impl`` ``native`` runs; NeMo 2's
  ``GPTConfig`` sets the fusion on: ``nemo/collections/llm/gpt/model/base.py`` at d2b21556,
  ``cross_entropy_loss_fusion: bool = True``). Its four steps are ``jit_fuser`` functions, and
  ``jit_fuser`` is ``torch.compile`` from PyTorch 2.2 on (``megatron/core/jit.py``), so each
  is one generated kernel over the logits: ``calculate_logits_max`` reads the 16-bit logits
  and returns their FP32 copy with its row maxima (read 2, write 4); ``calculate_predicted_
  logits`` subtracts the maximum and exponentiates in place, summing the rows (read 4, write
  4), the target logit gathered beside it; ``calculate_cross_entropy_loss`` divides the
  exponentials by their sum in place, the softmax saved for the backward (read 4, write 4):
  22 B forward. The backward's ``calculate_gradients`` subtracts 1 at the targets (a scatter)
  and scales the saved softmax in place by the output gradient, writing it back (its input is
  mutated) and casting it to bf16 (read 4, write 4 + 2): 10 B. Kernels: four forward (with
  the gather), two backward (with the scatter).
* ``te``: Transformer Engine's ``parallel_cross_entropy`` (``cross_entropy_fusion_impl``
  ``te``; ``transformer_engine/pytorch/triton/cross_entropy.py`` at v2.9, Triton):
  ``online_softmax_kernel`` reads the 16-bit logits once for each row's maximum and sum, then
  ``cross_entropy_kernel`` reads them again and writes the gradient in their place, in 16 bits
  (read 2 + 2, write 2: 6 B); the backward's ``element_mul_kernel`` scales that gradient in
  place by the per-token output gradient (read 2, write 2: 4 B; skipped only when the output
  gradient is the scalar 1, which Megatron's per-token loss is not). Kernels: two forward, one
  backward.

The TP all-reduces of the row maxima and sums (``s`` floats each) are left out, as the zoo's
unfused op leaves them out.
"""

from __future__ import annotations

from dataclasses import replace

from dlsched.errors import ConfigError
from dlsched.job.run_choices import check_setting
from dlsched.models.layer import Layer
from dlsched.models.ops import Op, elementwise
from dlsched.models.zoo import TransformerModel

LOSS_LABEL = "cross-entropy"  # the zoo's label of the head's loss op
FP32_BYTES = 4
HALF_BYTES = 2
# (forward bytes, backward bytes, forward kernels, backward kernels) per logit element
# (module docstring)
FUSED_TRAFFIC = {"native": (2 + 4 + 4 + 4 + 4 + 4, 4 + 4 + 2, 4, 2),
                 "te": (2 + 2 + 2, 2 + 2, 2, 1)}


def loss_op(kind: str, logits: int) -> Op:
    """The fused loss ``kind`` (``native`` or ``te``) over ``logits`` elements per sample (the
    tokens x the vocabulary; split over TP with the head), its bytes as the module docstring
    counts them: elements of 4 bytes (``upcast``) for ``native``, which works in FP32, and of
    the 16-bit training precision for ``te``."""
    if kind not in FUSED_TRAFFIC:
        raise ConfigError(f"{kind!r} is not a fused loss; accepted: "
                          + ", ".join(FUSED_TRAFFIC), "cross_entropy")
    forward, backward, kernels, backward_kernels = FUSED_TRAFFIC[kind]
    unit = FP32_BYTES if kind == "native" else HALF_BYTES
    op = elementwise(LOSS_LABEL, logits, forward / unit, kernels=kernels,
                     backward_kernels=backward_kernels, upcast=kind == "native")
    return replace(op, backward_elements=backward / unit * logits)


def with_cross_entropy(model: TransformerModel, kind: str) -> TransformerModel:
    """``model`` (the zoo's decoder, its head's loss Megatron-LM's unfused op) with its loss run
    as ``kind``: unchanged for ``unfused``, the head's loss op replaced otherwise. The logits
    per sample are the model's tokens x its vocabulary (``TransformerModel.shape``)."""
    if check_setting("cross_entropy", kind) == "unfused" or model.shape is None:
        return model
    fused = loss_op(kind, model.shape.seq * model.shape.vocab)
    layers: list[Layer] = []
    for layer in model.layers:
        ops = tuple(fused if op.label == LOSS_LABEL else op for op in layer.ops)
        layers.append(layer if ops == layer.ops else replace(layer, ops=ops))
    return replace(model, layers=tuple(layers))
