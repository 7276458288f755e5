"""What PyTorch's FSDP2 (``fully_shard``, as TorchTitan applies it) costs beyond ZeRO 3's
per-block collectives: its two collectives per iteration that nothing hides (the all-gather of
the first units before the first block's forward, the reduce-scatter of the last ones after the
last block's backward: ``fsdp2_ends``) and the copies it runs on the compute stream around each
block's collectives (``copy_seconds``).

Per block, FSDP2 gathers a block's weights while the previous block computes and reduces its
gradients while the next one does (``job.evaluation.replica``'s ZeRO 3 pricing: exposed only
where a block's collectives outlast its compute). At the two ends of the iteration there is no
compute to hide behind, read in ``torch.distributed.fsdp._fully_shard._fsdp_state``
(``FSDPState``) and TorchTitan's ``apply_fsdp`` (``torchtitan/parallelisms/
parallelize_llama.py`` at 9dec370, ``torchtitan/models/llama3/parallelize_llama.py`` at
e7c0cae: each transformer block ``fully_shard``-ed, then the whole model, whose own group, the
root, holds the token embedding, the final norm and the output projection):

* **start.** The root's pre-forward all-gathers the root's parameters and the forward waits for
  them (``wait_for_unshard``); the first block's all-gather is issued at its own pre-forward
  (TorchTitan sets no explicit forward prefetch) on the same all-gather stream, after the
  root's, and the first block waits for it. Before them the GPU ran the optimizer step, which
  the gathers' copy-in must wait for (the sharded parameters it updates). Nothing else runs but
  the embedding lookup (a gather of ``b s`` rows: microseconds, not counted): exposed =
  all-gather(root) + the root's copy-out (below) + all-gather(block 0), in ``param_dtype``
  bf16, the block's linear weights in FP8 with torchao's float8 all-gather
  (``job.memory.sharded_units.layer_unit``; TorchTitan keeps ``output`` out of float8).
* **end.** The first block's reduce-scatter is issued after its backward, when only the
  embedding's backward is left to run. The root's post-backward is not triggered by autograd
  (its forward input, the token ids, needs no gradient): it runs in
  ``_root_post_backward_final_callback`` once the whole backward has run ("Run post-backward in
  case forward inputs did not require gradient so the autograd backward did not run"),
  reduce-scattering the root's gradients after block 0's on the reduce-scatter stream, and on
  the last backward the callback makes the compute stream wait for that reduce-scatter
  (``current_stream().wait_event(reduce_scatter_state.event)``) before the optimizer.
  Exposed = max(reduce-scatter(block 0), embedding backward + the root's copy-in (below)) +
  reduce-scatter(root) - the embedding backward, gradients in ``reduce_dtype`` FP32
  (TorchTitan's default).

FSDP2 never reshards the root after forward (``FSDPState._lazy_init``: "For the root, do not
reshard after forward since for training, the parameters would be freed and all-gathered
immediately") and TorchTitan keeps the last block unsharded ("FSDP would prefetch it
immediately"), so the backward starts without a gather. TorchTitan from 83e6941 (sharding
``fsdp2-split``, ``job.memory.torch_runtime``) makes the embedding a unit of its own and
``[norm, output]`` another: its first unit is the embedding alone, its last reduce-scatter the
embedding's (``[norm, output]``'s runs at the start of the backward, hidden). ``fsdp2_ends``
prices a run without pipeline parallelism; with it, ``pipeline_ends``.

**Under a pipeline schedule** (``pp`` > 1) FSDP2 moves each unit's weights and gradients once
per iteration, not per microbatch, and its ends are each stage's:

* **gathers once.** TorchTitan's ``apply_fsdp`` sets ``reshard_after_forward=False`` for every
  block and the root when PP is enabled ("For PP, do not reshard after forward to avoid
  per-microbatch all-gathers, which can be expensive and non-overlapped": ``parallelize_llama.py``
  at 9dec370; ``get_fsdp_reshard_after_forward_policy``'s ``"default"`` in
  ``torchtitan/distributed/fsdp.py`` at b5bcd76), and the pipeline stage runs every backward
  with ``set_reshard_after_backward(False)`` (below): a unit is all-gathered in its stage's
  first forward only and stays unsharded through the iteration. That first forward runs the
  units' pre-forwards in order (no explicit prefetch): the first unit's all-gather waits for
  nothing to hide behind (the stage's root, holding the embedding on the first stage and the
  final norm and output on the last under ``fsdp2``, then its first block; the embedding
  alone under ``fsdp2-split``), each later unit's all-gather runs during the previous unit's
  forward (exposed: what it outlasts it), and each copy-out runs on the compute stream. The
  first microbatch passes every virtual stage in order before any backward, so each stage's
  exposed start delays the iteration (``start``: their sum; exact for 1F1B, whose fill chain is
  on the critical path, an estimate for the interleaved order).
* **reduce-scatters once.** ``torch.distributed.pipelining``'s ``PipelineStage.
  backward_maybe_with_nosync`` (pytorch/pytorch#127946, #134052, 2024, before the 2024-12 torch
  of the 9dec370 runs; its ``perform_reduce_grad``, the schedule's REDUCE_GRAD action after
  all of a stage's backwards, in later torch) runs every microbatch's backward with
  ``set_requires_gradient_sync(False)`` (FSDP2 accumulates FP32 unsharded gradients:
  ``job.memory.torch_runtime``) and after the stage's last backward calls each unit's
  ``post_backward`` in turn and then ``_root_post_backward_final_callback``. Each
  ``post_backward`` first makes the compute stream wait for the previous unit's reduce-scatter
  (``comm_ctx.reduce_scatter_state.event``), then copies its gradients into the reduce-scatter
  input on the compute stream (the accumulated FP32 gradient read, ``grad_bytes`` written), and
  the final callback makes the compute stream wait for the last one: the stage's units'
  copy-ins and reduce-scatters one after the other with nothing beside them (``end``, per
  rank over the stages it holds; an interleaved rank's earlier stage's burst stalls it in its
  cool-down, counted at its end: an upper bound where the cool-down's idle time would absorb
  part of it).

Megatron-LM's own ZeRO 3, Megatron-FSDP (``--use-megatron-fsdp``, ``optim_grads_params``;
sharding ``zero``), runs otherwise: its ``_post_forward`` hook releases a unit's parameters after
every forward and re-gathers them for the backward, and its gradient hook reduce-scatters on every
backward when gradients are sharded (``grad_reduce_every_bprop`` for ``optim_grads`` and
``optim_grads_params``; ``megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py`` at
d98e8a6, whose v1 accepts PP; v2 refuses it): per layer per microbatch, as
``job.evaluation.replica`` prices sharding ``zero``. DeepSpeed's ZeRO 3 refuses pipeline
parallelism.

**Copies on the compute stream** (``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``):

* the all-gather's copy-out: ``wait_for_unshard`` runs ``foreach_all_gather_copy_out`` on the
  current stream once the all-gather's event is reached, one ``split_with_sizes_copy`` of the
  whole all-gather output into the parameters' unsharded storage (read and write the gathered
  bytes: bf16, or the FP8 weights' bytes with torchao's float8 all-gather, whose output is
  ``uint8``). Each block's forward gathers, and its backward again (resharded after forward;
  TorchTitan keeps the last block unsharded, counted here as resharded: one block's copy per
  iteration too many). A full recomputation's rerun forward gathers nothing more (FSDP2's
  pre-forward returns early in the backward's pre-backward state);
* the reduce-scatter's copy-in: ``foreach_reduce`` casts each unsharded gradient (bf16,
  ``param_dtype``) into the reduce-scatter input in ``reduce_dtype`` (``_chunk_cat``, FP32 for
  TorchTitan) on the current stream since pytorch/pytorch#129721 (2024-06: "Ran reduce-scatter
  copy-in in default stream"; earlier the compute stream waited on its event on the
  reduce-scatter stream), so before the 2024-12 torch of the 9dec370 runs: read 2, write
  ``grad_bytes`` per parameter, once per block backward. The divide by the group size runs on
  the reduce-scatter stream (not counted).

Both are memory traffic at the GPU's achieved memory rate. The root's copy-out joins the
start, its copy-in the end (``fsdp2_ends``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dlsched.job.communication.collective_costs import CollectiveCurve
from dlsched.job.memory.sharded_units import LayerUnit
from dlsched.job.memory.torch_runtime import PARAM_BYTES, REDUCE_BYTES
from dlsched.job.model_spec import Model
from dlsched.job.run_choices import FSDP2_SHARDINGS  # re-exported: the shardings priced here


def root_parameters(spec: Model, tp: int) -> tuple[float, float]:
    """Parameters per GPU of the root's two ends: the token embedding, and the final norm with
    the output projection (the output only when untied). TorchTitan shards the embedding and the
    output over TP (``Rowwise`` / ``ColwiseParallel``) and keeps the norm whole; its vocabulary
    is not padded."""
    matrix = spec.vocab * spec.hidden / tp
    return matrix, spec.norm_parameters() + (0.0 if spec.tied_embeddings else matrix)


def first_unit_parameters(spec: Model, tp: int, sharding: str) -> float:
    """Parameters per GPU of FSDP2's first unit (module docstring): the root's token embedding,
    final norm and output projection (``fsdp2``), or the embedding alone (``fsdp2-split``),
    as ``root_parameters`` counts them."""
    if sharding not in FSDP2_SHARDINGS:
        raise ValueError(f"sharding: {sharding!r} is not FSDP2's; accepted: "
                         + ", ".join(FSDP2_SHARDINGS))
    embedding, head = root_parameters(spec, tp)
    return embedding if sharding == "fsdp2-split" else embedding + head


def copy_seconds(gathered_bytes: float, params: float, grad_bytes: float,
                 memory_rate: float) -> tuple[float, float]:
    """(forward, backward) seconds of FSDP2's copies on the compute stream for one unit
    (module docstring) of ``gathered_bytes`` all-gathered and ``params`` parameters per GPU,
    gradients reduced in ``grad_bytes`` each, at ``memory_rate`` bytes per second: the
    copy-out each way (read and write the gathered bytes), the copy-in backward (read the
    bf16 gradient, write the reduce-scatter input)."""
    copy_out = 2 * gathered_bytes / memory_rate
    return copy_out, copy_out + (PARAM_BYTES + grad_bytes) * params / memory_rate


def fsdp2_ends(spec: Model, tp: int, sharding: str, block: LayerUnit, grad_bytes: float,
               gather: CollectiveCurve, reduce: CollectiveCurve, embedding_backward_s: float,
               memory_rate: float) -> tuple[float, float]:
    """(start, end) seconds of one iteration that FSDP2's first all-gathers and last
    reduce-scatters leave exposed, with the root's copies (module docstring): ``block`` one
    block's parameters, gathered and reduced bytes per GPU (``sharded_units.layer_unit``),
    ``grad_bytes`` per gradient of the root reduced, ``gather`` /
    ``reduce`` the FSDP group's curves, ``embedding_backward_s`` the embedding's backward (what
    block 0's reduce-scatter overlaps), ``memory_rate`` the GPU's achieved bytes per second."""
    first = first_unit_parameters(spec, tp, sharding)
    root_out, root_back = copy_seconds(PARAM_BYTES * first, first, grad_bytes, memory_rate)
    start = (gather.seconds(PARAM_BYTES * first) + root_out
             + gather.seconds(block.gathered))
    # the root's copy-in follows the embedding's backward on the compute stream; its
    # reduce-scatter waits for the copy-in and for block 0's on the reduce-scatter stream
    root_in = root_back - root_out
    end = (max(reduce.seconds(block.reduced), embedding_backward_s + root_in)
           + reduce.seconds(first * grad_bytes))
    return start, end - embedding_backward_s


@dataclass(frozen=True)
class Unit:
    """One FSDP2 unit of a pipeline stage in forward order: ``params`` parameters per GPU,
    ``gathered`` bytes its all-gather delivers to one GPU, ``forward_s`` seconds of its forward
    on one microbatch (what the next unit's all-gather can hide behind)."""

    params: float
    gathered: float
    forward_s: float


def stage_start(units: Sequence[Unit], gather: CollectiveCurve, memory_rate: float) -> float:
    """Seconds FSDP2 adds to a stage's first forward under a pipeline schedule (module
    docstring): the first unit's all-gather, each later one's beyond the previous unit's
    forward (the all-gathers one after another on their stream, each from the previous unit's
    forward on), every copy-out (read and write the gathered bytes) on the compute stream."""
    network = began = ended = 0.0
    for unit in units:
        network = max(network, began) + gather.seconds(unit.gathered)
        began = max(ended, network) + 2 * unit.gathered / memory_rate  # after its copy-out
        ended = began + unit.forward_s
    return ended - sum(unit.forward_s for unit in units)


def stage_end(units: Sequence[Unit], grad_bytes: float, reduce: CollectiveCurve,
              memory_rate: float) -> float:
    """Seconds of a stage's reduce-scatters under a pipeline schedule (module docstring): per
    unit, the copy-in of its accumulated FP32 gradients (read ``REDUCE_BYTES``, write
    ``grad_bytes`` per parameter) then its reduce-scatter, one after the other."""
    return sum((REDUCE_BYTES + grad_bytes) * unit.params / memory_rate
               + reduce.seconds(unit.params * grad_bytes) for unit in units)
