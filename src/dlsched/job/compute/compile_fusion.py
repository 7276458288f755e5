"""torch.compile's fusions of a transformer layer's memory-bound ops (``--compile``).

TorchInductor (PyTorch 2's compiler; Ansel et al., "PyTorch 2", ASPLOS 2024, Sec. 5) lowers
the graph to loops and fuses a producer into its consumers when their iteration spaces
match: pointwise ops with pointwise ops, and a pointwise op into a reduction over the rows it
produces (a norm's statistics over the hidden dimension run as one "persistent reduction"
whose row stays in registers). Matrix products and SDPA stay library calls (``aten.mm`` to
cuBLAS, the flash kernel) and bound the fusion groups. In the decoder priced here (the zoo's
Megatron-style ops, ``models.zoo.gpt_model``, whose norms, SwiGLU and bias-dropout-add are
already single kernels) that changes:

* every run of consecutive memory-bound ops between two GEMMs or attention kernels becomes one
  kernel in each pass. In a layer that is the residual addition after a projection with the
  next norm (the last one of a layer with the next layer's first norm: the layer's ops are taken
  cyclically), the RMSNorm / LayerNorm then reading its input from registers instead of twice
  from memory (``norm``: 3 passes, 2 of them reads); SwiGLU's ``silu(gate) * up`` stays one
  kernel. Traffic of a group: the ops' own, less the norm's reads of what the addition wrote;
  one kernel per group forward, one per group plus the norm's weight-gradient reduction backward;
* the loss: ``cross_entropy(logits.float())`` becomes a reduction that reads the 16-bit logits
  twice (maximum, then the sum of exponentials; the FP32 upcast is in registers) and a backward
  reading them once and writing the gradient: 8 bytes per logit over both passes (Megatron's
  eager FP32 path: 52, ``models.megatron_loss.megatron_cross_entropy``), two kernels forward,
  one back.

Not modelled: the host's cheaper launches from a compiled graph (the GPU's kernel overhead
stays the eager one; the plans priced here are GPU-bound), rotary embeddings (not among the
zoo's ops, eager or compiled), and fusions into GEMM epilogues (Inductor keeps ``aten.mm`` as a
cuBLAS call by default, ``max_autotune`` off). A job whose ops are TorchTitan's eager modules
(``Job.ops`` ``eager``) is compiled from those instead (``job.compute.eager_ops``: RMSNorm,
rotary, ``repeat_kv``, SwiGLU and the additions as Inductor groups them); only its loss is
compiled here.
"""

from __future__ import annotations

from collections.abc import Sequence

from dlsched.models.ops import Op, elementwise

NORM_LABELS = ("ln_1", "ln_2", "ln_f")
NORM_READS = 2 / 3  # of a norm's elements: its two reads of the input (models.ops.norm)
LOSS_LABEL = "cross-entropy"
# Compiled loss, in the zoo's convention (the backward moves twice the forward): 8 bytes per
# 16-bit logit over both passes = 6 x passes x 2 bytes, passes = 2/3 x 2.
LOSS_PASSES = 4 / 3


def _fusible(op: Op) -> bool:
    return op.kind == "elementwise" and op.label != LOSS_LABEL


def _fused(group: list[Op]) -> Op:
    """One kernel of ``group``'s ops (module docstring); a lone op as it is."""
    if len(group) == 1:
        return group[0]
    saved = sum(NORM_READS * op.elements for op in group[1:] if op.label.endswith(NORM_LABELS))
    norms = sum(op.label.endswith(NORM_LABELS) for op in group)
    return Op("elementwise", sum(op.flops for op in group),
              sum(op.elements for op in group) - saved, sum(op.weights for op in group),
              kernels=1, split=group[0].split, label="+".join(op.label for op in group),
              fp32=any(op.fp32 for op in group), backward_kernels=1.0 + norms)


def compiled_loss(op: Op) -> Op:
    """The compiled cross-entropy of the zoo's loss ``op`` (module docstring)."""
    logits = op.elements / (13 / 3) if op.upcast else op.elements / 3
    return elementwise(LOSS_LABEL, logits, LOSS_PASSES, kernels=2, backward_kernels=1,
                       split=op.split)


def compiled_ops(ops: Sequence[Op], cyclic: bool) -> tuple[Op, ...]:
    """``ops`` as Inductor runs them: runs of memory-bound ops with the same TP split fused
    into one op each (module docstring), ``cyclic`` when the sequence repeats (a transformer
    layer: its last run joins its first), the loss compiled."""
    items = list(ops)
    if cyclic and len(items) > 1 and _fusible(items[0]) and _fusible(items[-1]):
        tail = 0
        while tail < len(items) and _fusible(items[-1 - tail]):
            tail += 1
        if tail < len(items):
            items = items[-tail:] + items[:-tail]
    out: list[Op] = []
    group: list[Op] = []
    for op in items:
        if _fusible(op) and (not group or group[0].split == op.split):
            group.append(op)
            continue
        if group:
            out.append(_fused(group))
        group = [op] if _fusible(op) else []
        if not _fusible(op):
            out.append(compiled_loss(op) if op.label == LOSS_LABEL else op)
    if group:
        out.append(_fused(group))
    return tuple(out)
