"""What PyTorch's own runtime changes in a job's memory per GPU (bytes): FSDP2 as TorchTitan
applies it, and torch.compile's saved activations.

**FSDP2 model states** (``torch.distributed.fsdp.fully_shard``, applied by TorchTitan's
``apply_fsdp``, ``torchtitan/parallelisms/parallelize_llama.py`` at 9dec370 and
``models/llama3/parallelize_llama.py`` at e7c0cae). TorchTitan builds the model in FP32
(``model.to_empty(...); model.init_weights()`` under the default dtype) and shards those FP32
parameters over the FSDP mesh (``dp_shard_cp``: data-parallel x context-parallel ranks);
``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)`` (the defaults of
``--training.mixed_precision_param`` / ``_reduce``) computes in bf16 and reduce-scatters FP32
gradients into FP32 sharded gradients; AdamW keeps two FP32 moments. Per parameter and shard:
4 + 4 + 8 = ``STATE_BYTES`` (no separate master copy: the sharded parameter is it), not ZeRO's
2 + 4 + 12 of Megatron-LM.

**FSDP2 unsharded weights.** ``fully_shard`` frees a unit's all-gathered parameters after its
forward unless told not to. TorchTitan until 83e6941 (2025-07-28, "Improve reshard_after_forward
logic"; sharding ``fsdp2``: the 9dec370 and e7c0cae runs) wraps each block and then the whole
model: it does not reshard the last transformer block ("FSDP would prefetch it immediately")
nor, with pipeline parallelism, any block; and FSDP2 never reshards the root module after
forward (``FSDPState._lazy_init``: "For the root, do not reshard after forward since for
training, the parameters would be freed and all-gathered immediately" sets the root group's
``post_forward_mesh_info = None``, in the torch builds of the 9dec370 and e7c0cae runs, up to
2.8.0a0 of 2025-05-29; pytorch/pytorch#154704 and #155319, June 2025, made an explicit
``reshard_after_forward=True`` reshard it), which holds what no block holds: the embedding, the
final norm and the output projection. From 83e6941 (``fsdp2-split``: ``apply_fsdp`` at 6fc499f)
the embedding, each block and ``[norm, output]`` are units of their own, the embedding and the
blocks resharded after forward (not with PP), ``[norm, output]`` kept (unless "always"); the
root holds no parameter. What is kept stays unsharded from the forward through the backward
(``persistent``): in ``param_dtype`` (2 B), the blocks' linear weights 1 B with torchao's float8
all-gather (``enable_fsdp_float8_all_gather``: the all-gather output is the FP8 weight; norms
stay bf16; TorchTitan keeps ``output`` out of float8, ``filter_fqns``). During a block's
backward (``backward_transient``) FSDP2 also holds the previous block's all-gather (its default
backward prefetch of one), and at the reduce-scatter's copy-in the block's unsharded bf16
gradient beside the FP32 reduce-scatter input (``foreach_reduce`` casts to ``reduce_dtype``):
2 + 4 B per parameter of the block.

**FSDP2 under a pipeline schedule: gradients accumulated unsharded.** ``torch.distributed.
pipelining``'s stage runs every microbatch's backward of an FSDP2 module with
``set_requires_gradient_sync(False)`` and ``set_reshard_after_backward(False)`` and calls the
post-backward (the reduce-scatter) itself after the last microbatch only
(``PipelineStage.backward_maybe_with_nosync``: pytorch/pytorch#127946, 2024-06, and #134052,
2024-08, before the 2024-12-23 torch of the 9dec370 runs). Without the sync FSDP2's
``post_backward`` casts each parameter's fresh unsharded bf16 gradient to ``reduce_dtype`` on
the first microbatch (``FSDPParam.to_accumulated_grad_if_needed``: ``unsharded_accumulated_grad``)
and adds later ones into it (``accumulate_unsharded_grad_if_needed``; pytorch/pytorch#118298,
"gradient accumulation w/o reduction"): an FP32 (``REDUCE_BYTES``) unsharded gradient of every
parameter of a chunk, held from the chunk's first backward to the iteration's last
(``job.memory.in_flight.accumulating_peak`` times it against the stash; when:
``Execution.fsdp2(sharding, pipelined=True)``).

**torch.compile and per-op checkpointing.** TorchTitan compiles each transformer block after
wrapping it in its per-op checkpoint (``job.op_checkpoint``); Inductor's partitioner
(``torch/_functorch/partitioners.py``, ``min_cut_rematerialization_partition``) turns the
policy's ``MUST_SAVE`` into "computed in the forward" (an infinite edge from the source) and
``PREFER_RECOMPUTE`` into "recomputed" (an infinite edge to the sink), then saves only the
forward values on the min cut: those the backward reads. Eager checkpointing caches every
``MUST_SAVE`` output whether or not its backward reads it (``torch/utils/checkpoint.py``,
``_CachingTorchDispatchMode``). In TorchTitan's Llama block the last matmul (``w2``, kept as the
7th) feeds only the residual addition (whose backward is the identity) and, with sequence
parallelism, the reduce-scatter whose output is kept too: compiled, neither is saved
(``dead_saves``). Every other kept output is read by the backward (wq's and wv's by the
attention's, the attention's output and log-sum-exp by its backward and wo's weight gradient,
w1's by SwiGLU's). Under full checkpointing only the block's input is saved, compiled or not.
The float8 casts' ``abs`` outputs (on 9dec370's save list) are read by no backward either: not
saved when compiled (eager they would be; refused there, ``check_runtime``).
"""

from __future__ import annotations

from dlsched.job.compute.op_checkpoint import MODE, kept_matmuls, layer_matmuls
from dlsched.job.execution import Execution
from dlsched.job.model_spec import Model
from dlsched.job.run_choices import Runtime

# ZeRO-3 as the ZeRO paper / Megatron-LM, or PyTorch's FSDP2 in TorchTitan's two wrappings
STATE_BYTES = (4.0, 4.0, 8.0)  # FSDP2: FP32 sharded parameter, FP32 gradient, AdamW's 2 moments
PARAM_BYTES = 2  # MixedPrecisionPolicy param_dtype bfloat16 (TorchTitan's default)
REDUCE_BYTES = 4  # MixedPrecisionPolicy reduce_dtype float32: the reduce-scatter input


EAGER = Runtime()  # ZeRO's states, eager blocks: the default of the memory model's functions


def persistent_bytes(sharding: str, block_bytes: float, blocks: int, embedding: float,
                     head: float, pp: int) -> float:
    """Unsharded bytes held from the forward through the backward (module docstring), of a
    rank with ``blocks`` blocks of ``block_bytes`` gathered each and ``embedding`` / ``head``
    (final norm and output) parameters: ``fsdp2`` keeps the root (embedding and head) in bf16
    and the last block, or every block with ``pp`` > 1; ``fsdp2-split`` keeps the head, and
    with ``pp`` > 1 also the embedding and every block."""
    if sharding == "fsdp2-split":
        if pp > 1:
            return PARAM_BYTES * (embedding + head) + blocks * block_bytes
        return PARAM_BYTES * head
    kept = blocks if pp > 1 else min(blocks, 1)
    return PARAM_BYTES * (embedding + head) + kept * block_bytes


def backward_transient(block_bytes: float, block_params: float, pp: int) -> float:
    """Bytes FSDP2 adds during one block's backward: the prefetched previous block (none when
    every block stays unsharded, ``pp`` > 1) and the bf16 gradient beside its FP32 reduce-
    scatter input."""
    prefetched = block_bytes if pp == 1 else 0.0
    return prefetched + block_params * (PARAM_BYTES + REDUCE_BYTES)


def dead_saves(spec: Model, layout: Execution) -> float:
    """Elements per GPU of one layer and microbatch that eager per-op checkpointing keeps and
    compiled blocks do not (module docstring): the last matmul's output when the policy keeps
    it (``s b h``, row-parallel: whole on every TP rank) and, with sequence parallelism, its
    reduce-scatter's (``s b h / t``); 0 under any other recomputation."""
    if layout.recompute != MODE:
        return 0.0
    last = layer_matmuls(spec)[-1]
    if last not in kept_matmuls(spec):
        return 0.0
    tokens, t = spec.seq * layout.microbatch_size / layout.cp, layout.tp
    width = spec.hidden if last.row_parallel else last.fan_out / t
    scattered = spec.hidden / t if layout.sequence_parallel else 0.0
    return tokens * (width + scattered)


def check_runtime(runtime: Runtime, precision: str, recompute: str) -> str | None:
    """Why the memory of a run under ``runtime`` is not modelled (None when it is): torch.compile
    without checkpointing or with Megatron's selective recomputation (the partitioner's own
    saved set is not derived), torchao FP8 under eager per-op checkpointing (its cached
    ``abs`` outputs)."""
    if runtime.compile and recompute not in (MODE, "full"):
        return (f"torch.compile's saved activations under recompute {recompute} (its "
                "partitioner's min cut; derived for per-op and full checkpointing only)")
    if precision == "fp8" and not runtime.compile and recompute == MODE:
        return ("FP8 under eager per-op checkpointing (the policy caches the float8 casts' "
                "abs outputs)")
    return None
