"""Memory per GPU of a job plan, by part, for one pipeline stage (bytes).

**Model states per parameter** (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training
Trillion Parameter Models", SC 2020, Sec. 3.1 and 5): mixed precision keeps 16-bit weights
(2 B), gradients, and ``K`` = 12 B of optimizer state (FP32 master weights 4 B + Adam's two FP32
moments 8 B). The paper's gradients are 16-bit (2 + 2 + 12 = 16 B); Megatron-LM accumulates
and all-reduces them in an FP32 ``main_grad`` buffer (``--accumulate-allreduce-grads-in-fp32``,
set automatically for bf16 in ``megatron/training/arguments.py``), 2 + 4 + 12 = 18 B, the
figure of Megatron's own estimator (``megatron/training/theoretical_memory_usage.py``: "18 if
not args.use_distributed_optimizer else 6 + (12 / data_parallel_size)"). ``grad_bytes`` picks 4
(Megatron, the default) or 2 (ZeRO paper). With 16-bit gradients Megatron also casts (its shard
of) the gradients to FP32 for the optimizer step; that transient is not counted. ``fp32`` and
``autocast`` keep FP32 weights and gradients and no master copy (4 + 4 + 8 = 16 B).

ZeRO-DP stages over the ``dp`` replicas (the paper's ``N_d``; Sec. 5.1-5.3): stage 1 divides
the optimizer part by ``dp`` (Megatron's distributed optimizer: 6 + 12/dp), stage 2 the
gradients too, stage 3 the weights too. The paper's Fig. 1 (7.5B parameters, K = 12, N_d = 64):
120 GB -> 31.4 GB -> 16.6 GB -> 1.9 GB (``model_state_bytes`` reproduces it). Stage 3 also needs
the full weights of the layers it computes: all-gathered 16-bit weights of **two** units (the one
in use and the next, prefetched; FSDP's rate limiter allows two all-gathers in flight, Zhao et
al., "PyTorch FSDP", VLDB 2023), and stages 2 and 3 the unsharded gradient of one unit before its
reduce-scatter; a unit is one transformer layer, the embedding or the head (none of this for
``dp`` = 1, where nothing is sharded).

**FP8 weight copies** (``job.compute.fp8.fp8_weight_bytes`` of ``job.memory.fp8_weights``'
linears, routed experts included): Transformer Engine's delayed and current scaling keep each
linear's FP8 weight and its transpose (MXFP8 both with their scales) beside the 16-bit
weights, counted in the weights of the stage's layers; with FP8 primary weights
(``fp8_param_gather``) there is no 16-bit copy of those linears; torchao's casts are
transient. Counted here, so the search's memory check and the plan's memory are one number.

**TE FP8 saved inputs** (``job.memory.te_fp8_stash``): under Transformer Engine's recipes a
linear keeps its input quantized (1 byte, MXFP8 with its scales), not the 16-bit tensor the
stash below counts; the difference comes off each layer's stash.

**Parameters of a stage**: ``job.memory.parameters``.

**Activations** (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
Models", MLSys 2023, Sec. 4, Table 2; formulas in ``pipeline.memory_model``): per layer and
microbatch ``s b h (34 + 5 a s / h)`` bytes at 16 bits, under TP without SP ``s b h (10 + 24 /
t + 5 a s / (h t))``, with SP everything over ``t``; selective recomputation drops the ``5 a s
/ h`` term (recomputed in the backward: a transient of one layer). A fused attention kernel
(``flash`` or ``fused``) never writes the scores out: the stash is the selective one whatever
the recomputation, plus the kernel's FP32 log-sum-exp per query and head (``4 a s b / t``,
saved for its backward; Dao et al., FlashAttention, 2022, Alg. 2), and selective recomputation
saves nothing more; full recomputation keeps the layer input ``2 s b h`` (over ``t`` with SP)
and recomputes one layer at a time (its full activations a transient). TorchTitan's per-op
policy (``selective-op``, ``job.op_checkpoint``) keeps the layer input, every other matmul's
output and the fused kernel's output and log-sum-exp; the rest of the layer's full stash (and
autocast's weight copies, cast again) is the transient of its backward. The derivation's MLP
width ``4 h`` and K/V width ``h`` are replaced by the spec's ``ffn_hidden`` and ``kv_heads x
head_dim`` (GeLU input and second linear input ``p s b f`` each; a gated FFN keeps its gate
and up projections' outputs, the input of SwiGLU's backward, and the down projection's input:
``3 p s b f``; K and V ``p s b kv d`` each; the queries and the output projection's input ``p s b
a`` each, ``a = heads x head_dim``; all split by TP). The embedding keeps token ids
(8 B each, whole on every TP rank) and its
dropout mask (split by SP), the head the inputs of the final norm and the projection and the
FP32 logits of the vocabulary-parallel loss ``4 s b V' / t`` (part ``logits``), beside which
the 16-bit logits ``p s b V' / t`` are a transient.

**Microbatches in flight** (the stash): 1F1B stage ``s`` holds ``min(pp - s, m)`` (Narayanan et
al., SC21, Sec. 2.2; Megatron's warm-up ``pp - s - 1`` forwards plus one), GPipe all ``m``, ZB-H1
as 1F1B (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, Sec. 2.1: its peak is not
above 1F1B's; the deferred weight-gradient inputs of later stages stay under the first stage's
peak). Under ``autocast`` each microbatch also keeps a 16-bit copy of the weights of its layers
and of the output projection: ``torch.autocast`` casts a weight once per autocast region (the
forward of one microbatch) and the linear saves the cast for its backward (under full
recomputation only the recomputed layer's, a transient). Interleaved 1F1B runs Megatron-LM's
order (``megatron/core/pipeline_parallel/schedules.py``: warm-up ``2 (pp - s - 1) + (chunks -
1) pp`` chunk-forwards, groups of ``pp`` microbatches per chunk) and takes the peak of the bytes
held; on the first stage that is ``L (1 + (pp - 1) / (pp chunks))`` layers' worth, Korthikanti
et al. Sec. 4.2.3's interleaving factor. ZB-V, DualPipe and DualPipeV walk their own orders
(``job.unit_walk.held_in_flight``): ``2 pp`` chunks in flight for ZB-V, ``PP + 1`` stages'
worth for DualPipe and DualPipeV (DeepSeek-V3 report Table 2), an overlapped pair's forward
counted before its backward frees; their ranks hold two stages (``unit_walk.held_stages``: the
V's ``k`` and ``2 pp - 1 - k``, embedding and head on rank 0; DualPipe's ``k`` and ``pp - 1 -
k``, twice the parameters).
MoE layers (``job.moe_memory``): their routed experts' state sharded over the expert-data-
parallel group, their stash of routed tokens in place of the dense FFN's.
**Context parallelism** (``job.context_parallel``; Korthikanti et al.'s formula with ``s`` ->
``s / cp``): every token-wise activation, the embedding's and the head's are those of ``s / cp``
tokens; the unfused attention scores (the ``5 a s / h`` term) are the GPU's ``s / cp`` queries
against all ``s`` keys, ``cp`` times the term at ``s / cp``. ZeRO shards over the CP x DP ranks
(Megatron-Core's distributed optimizer over its data-parallel group with context parallelism),
and the CP buffers (the ring's K/V blocks, the all-to-all's Q/K/V buffers) are a transient of
the layer in its backward.
**PyTorch's runtime** (``job.memory.torch_runtime``, the ``runtime`` argument): ZeRO 3 as FSDP2
runs it (FP32 sharded states, 4 + 4 + 8 B per parameter; the root's and the last block's
weights unsharded through the step, part ``gathered``; the previous block's prefetch and the
bf16 gradient beside its FP32 reduce-scatter input in the workspace; under a pipeline each
chunk's FP32 unsharded gradients from its first backward on, part ``gradients``) and compiled
blocks (their partitioner saves no output the backward does not read).
Workspace: the ZeRO transients plus the larger of the recomputation (with the CP buffers) and
the 16-bit logits transients (they do not run together). Reserve: the CUDA context
(``pipeline.memory_model.CONTEXT_BYTES``); fragmentation is the caller's (``usable_bytes``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from dlsched.errors import ConfigError
from dlsched.job.communication.context_parallel import buffer_bytes, local_tokens
from dlsched.job.compute.block_recompute import block_layers, recomputed_layers
from dlsched.job.compute.fp8 import fp8_weight_bytes
from dlsched.job.compute.mla import attention_stash_delta, latent_stash
from dlsched.job.compute.module_recompute import modules_of
from dlsched.job.compute.mtp import mtp_layer_is_moe
from dlsched.job.compute.op_checkpoint import stash_elements
from dlsched.job.evaluation.unit_walk import held_stages
from dlsched.job.execution import Execution
from dlsched.job.memory import torch_runtime as rt
from dlsched.job.memory.dropout_masks import absent_mask_bytes
from dlsched.job.memory.fp8_weights import fp8_linear_parameters, primary_saving
from dlsched.job.memory.in_flight import accumulating_peak, in_flight_peak
from dlsched.job.memory.moe import (
    experts_per_gpu,
    held_mtp_moe,
    layer_indices,
    moe_dense_delta,
    moe_stash_delta,
    stage_moe_layers,
)
from dlsched.job.memory.parameters import (
    embedding_parameters_per_gpu,
    head_parameters_per_gpu,
    mtp_unit_per_gpu,
    padded_vocab,
    stage_parameters,
)
from dlsched.job.memory.pipeline_buffers import stage_buffers
from dlsched.job.memory.recompute_modules import layer_saving
from dlsched.job.memory.sharded_units import (
    gathered_weight_bytes,
    layer_parameters_per_gpu,
    layer_unit,
)
from dlsched.job.memory.te_fp8_stash import dense_discount, moe_discount
from dlsched.job.model_spec import Model
from dlsched.job.run_choices import PRECISIONS
from dlsched.pipeline.chains.memory_model import (
    ADAM_MOMENT_BYTES,
    CONTEXT_BYTES,
    FRAGMENTATION,
    LOSS_BYTES,
    MASTER_WEIGHT_BYTES,
    TOKEN_ID_BYTES,
    BlockMemory,
    embedding_memory,
    head_memory,
    layer_memory,
    usable_bytes,
)

MEMORY_PRECISIONS = (*PRECISIONS, "fp32")  # fp8: bf16 states (job.compute.fp8); fp32 memory too
GRAD_BYTES = (2, 4)
PREFETCHED_UNITS = 2  # ZeRO-3: the unit in use and the next one, all-gathered ahead
AUTOCAST_COPY_BYTES = 2  # torch.autocast's 16-bit cast of a weight, saved by its linear
LSE_BYTES = 4  # a fused attention kernel's FP32 log-sum-exp per query and head


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter on one GPU: ``weights``, ``gradients``, ``optimizer`` (FP32 master
    weights and Adam's moments), after ZeRO's sharding."""

    weights: float
    gradients: float
    optimizer: float

    @property
    def total(self) -> float:
        """All model-state bytes per parameter."""
        return self.weights + self.gradients + self.optimizer


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per GPU of pipeline ``stage`` by part; ``parameters`` held by the GPU before ZeRO
    sharding; ``in_flight`` microbatches of each chunk held at the peak."""

    stage: int
    parameters: float
    weights: float
    gradients: float
    optimizer: float
    activations: float
    logits: float
    workspace: float
    reserve: float
    in_flight: tuple[int, ...]
    gathered: float = 0.0  # FSDP2's weights unsharded through the step (job.memory.torch_runtime)
    buffers: float = 0.0  # torch.distributed.pipelining's (job.memory.pipeline_buffers)

    def parts(self) -> dict[str, float]:
        """The parts by name (bytes)."""
        return {"weights": self.weights, "gradients": self.gradients,
                "optimizer": self.optimizer, "activations": self.activations,
                "logits": self.logits, "workspace": self.workspace, "reserve": self.reserve,
                "gathered": self.gathered, "buffers": self.buffers}

    @property
    def total(self) -> float:
        """All parts (bytes)."""
        return sum(self.parts().values())

    def fits(self, capacity: float, fragmentation: float = FRAGMENTATION) -> bool:
        """Whether the parts but the reserve fit what a GPU of ``capacity`` bytes leaves the
        model (``pipeline.memory_model.usable_bytes``)."""
        return self.total - self.reserve <= usable_bytes(capacity, self.reserve, fragmentation)


def check_precision(precision: str, grad_bytes: int) -> None:
    """ConfigError unless ``precision`` and ``grad_bytes`` are accepted."""
    if precision not in MEMORY_PRECISIONS:
        raise ConfigError(f"{precision!r} is not accepted; accepted: "
                          + ", ".join(MEMORY_PRECISIONS), "precision")
    if grad_bytes not in GRAD_BYTES:
        raise ConfigError(f"grad_bytes: {grad_bytes} is not accepted; accepted: 2, 4")


def activation_bytes(precision: str) -> int:
    """Bytes per stored activation element: 16-bit but for ``fp32`` (``autocast`` counted as
    16-bit, Korthikanti et al.'s assumption; autocast keeps some outputs in FP32)."""
    return 4 if precision == "fp32" else 2


def state_bytes(precision: str, zero: int, dp: int, grad_bytes: int = 4,
                master_weights: bool = True) -> StateBytes:
    """Model-state bytes per parameter per GPU under ZeRO stage ``zero`` over ``dp`` replicas
    (module docstring); ``master_weights`` False: Adam updates the 16-bit weights in place, no
    FP32 master copy (the run setting of that name, ``job.communication.dp_sync``)."""
    check_precision(precision, grad_bytes)
    mixed = precision not in ("autocast", "fp32")  # bf16, fp16, fp8: 16-bit weights
    weights = float(gathered_weight_bytes(precision))
    gradients = float(grad_bytes) if mixed else 4.0
    optimizer = (MASTER_WEIGHT_BYTES if mixed and master_weights else 0.0) + ADAM_MOMENT_BYTES
    return StateBytes(weights / dp if zero >= 3 else weights,
                      gradients / dp if zero >= 2 else gradients,
                      optimizer / dp if zero >= 1 else optimizer)


def model_state_bytes(parameters: float, zero: int, dp: int, weight_bytes: float = 2,
                      grad_bytes: float = 2, k: float = 12) -> float:
    """The ZeRO paper's model-state memory per GPU (Sec. 5, Fig. 1) for ``parameters`` (Psi):
    ``(w + g + K) Psi`` for DP, ``(w + g) Psi + K Psi / N_d`` with P_os, ``w Psi + (g + K) Psi /
    N_d`` with P_os+g, ``(w + g + K) Psi / N_d`` with P_os+g+p."""
    w = weight_bytes / dp if zero >= 3 else weight_bytes
    g = grad_bytes / dp if zero >= 2 else grad_bytes
    o = k / dp if zero >= 1 else k
    return parameters * (w + g + o)


def stage_units(spec: Model, layout: Execution, stage: int) -> list[float]:
    """Parameters per GPU of each unit (layer, embedding, head) on pipeline rank ``stage``."""
    _check_stage(layout, stage)
    units = ([layer_parameters_per_gpu(spec, layout.tp)]
             * layout.rank_layers(spec.layers, stage, spec.mtp_layers))
    mtp_moe = held_mtp_moe(spec, layout, stage)  # their deltas: mtp_unit_per_gpu
    for index in range(stage_moe_layers(spec, layout, stage) - mtp_moe):
        units[index] += moe_dense_delta(spec, layout.tp)
    first, last = _ends_held(layout, stage)
    if first is not None:
        units.append(embedding_parameters_per_gpu(spec, layout.tp))
    if last is not None:
        units.append(head_parameters_per_gpu(spec, layout))
        units += [mtp_unit_per_gpu(spec, layout.tp, k) for k in range(spec.mtp_layers)]
    return units


def _ends_held(layout: Execution, stage: int) -> tuple[int | None, int | None]:
    """The chunks of rank ``stage`` holding the first and the last virtual stage (None:
    neither): rank 0's first and rank ``pp - 1``'s last chunk, both on rank 0 in a V
    (ZB-V, DualPipeV), on ranks 0 and ``pp - 1`` for DualPipe (``unit_walk.held_stages``)."""
    held = held_stages(layout.schedule, layout.pp, layout.chunks, stage)
    last = layout.virtual_stages - 1
    return (held.index(0) if 0 in held else None,
            held.index(last) if last in held else None)


def _per_gpu(total: float, whole: float, tp: int) -> float:
    """Bytes per GPU of a TP group: ``whole`` kept on every GPU, the rest split."""
    return whole + (total - whole) / tp


def layer_activations(spec: Model, layout: Execution, precision: str,
                      attention: str = "flash", runtime: rt.Runtime = rt.EAGER
                      ) -> tuple[float, float]:
    """One layer's stash per microbatch per GPU and the transient of recomputing it (bytes),
    with autocast's 16-bit weight copy, the attention core by the ``attention`` kernel, the
    saves compiled blocks drop (``torch_runtime.dead_saves``; module docstring)."""
    p = activation_bytes(precision)
    s, b, h, t = local_tokens(spec, layout.cp), layout.microbatch_size, spec.hidden, layout.tp
    block = layer_memory(s, b, h, spec.heads, p, layout.sequence_parallel)
    widths = p * s * b * (spec.ffn_matrices * spec.ffn_hidden - 8 * h
                          + attention_stash_delta(spec))  # job.compute.mla
    latent = p * s * b * latent_stash(spec)  # MLA's latents: split only with SP
    widths += latent if layout.sequence_parallel else latent * t
    whole_none, whole_selective, whole_input = block.replicated
    selective = _per_gpu(block.selective, whole_selective, t) + widths / t
    if attention != "unfused":
        none = selective = selective + LSE_BYTES * spec.heads * s * b / t
    else:
        scores = (layout.cp - 1) * (block.stash - block.selective)  # (s/cp) x s, not (s/cp)^2
        none = _per_gpu(block.stash + scores, whole_none, t) + widths / t
    kept = _per_gpu(block.input, whole_input, t)
    copy = AUTOCAST_COPY_BYTES * layer_parameters_per_gpu(spec, t) if precision == "autocast" else 0
    copy -= sum(dense_discount(spec, layout, p))  # TE FP8's saved inputs: job.memory.te_fp8_stash
    copy -= absent_mask_bytes(spec, layout)  # hidden dropout at 0: job.memory.dropout_masks
    if layout.recompute == "full":
        return kept, none + copy - kept
    if layout.recompute == "selective":
        return selective + copy, none - selective
    if modules_of(layout.recompute):  # Megatron-Core's modules: job.memory.recompute_modules
        base = selective if "core_attn" in modules_of(layout.recompute) else none
        saved = layer_saving(spec, layout, p, moe=False)
        return base + copy - saved, none - base + saved
    if layout.recompute == "selective-op":  # TorchTitan's per-op policy: job.op_checkpoint
        stash = stash_elements(spec, layout, attention)
        kept = p * stash.activations + LSE_BYTES * stash.fp32
        if runtime.compile:
            kept -= p * rt.dead_saves(spec, layout)
        return kept, max(0.0, none - kept) + copy
    return none + copy, 0.0


def _block_per_gpu(block: BlockMemory, tp: int) -> float:
    return _per_gpu(block.stash, block.replicated[0], tp)


def chunk_stash(spec: Model, layout: Execution, precision: str,
                stage: int, attention: str = "flash", runtime: rt.Runtime = rt.EAGER
                ) -> list[tuple[float, float]]:
    """Per chunk of rank ``stage``: (activations, FP32 logits) one microbatch keeps (bytes)."""
    p = activation_bytes(precision)
    s, b, h, t = local_tokens(spec, layout.cp), layout.microbatch_size, spec.hidden, layout.tp
    partial = block_layers(layout.recompute) is not None  # job.compute.block_recompute
    layer, _ = layer_activations(spec, replace(layout, recompute="none") if partial else layout,
                                 precision, attention, runtime)
    rerun = layer_activations(spec, replace(layout, recompute="full"), precision, attention,
                              runtime)[0] if partial else layer
    first, last = _ends_held(layout, stage)
    held = range(len(held_stages(layout.schedule, layout.pp, layout.chunks, stage)))
    split = [recomputed_layers(layout.recompute, layer_indices(spec, layout, stage, chunk))
             for chunk in held]
    chunks = [[len(again) * rerun + len(kept) * layer, 0.0] for again, kept in split]
    if spec.experts and layout.recompute != "full":  # full recomputation keeps inputs only
        for (_, span), acts in zip(split, chunks, strict=True):
            acts[0] += spec.moe_layers_in(span.start, span.stop) * (
                moe_stash_delta(spec, layout, p) + layer_saving(spec, layout, p, moe=False)
                - layer_saving(spec, layout, p, moe=True) + _te_moe(spec, layout, p))
    if first is not None:
        embedding = embedding_memory(s, b, h, p, False, layout.sequence_parallel)
        ids = TOKEN_ID_BYTES * s * b  # every TP rank reads all the token ids, SP or not
        whole = embedding.replicated[0] - ids if embedding.replicated[0] else 0.0
        chunks[first][0] += (ids + _per_gpu(embedding.stash - ids, whole, t)
                             - absent_mask_bytes(spec, layout, masks=1))
    if last is not None:
        head = head_memory(s, b, h, padded_vocab(spec.vocab, t), p, layout.sequence_parallel)
        logits = LOSS_BYTES * s * b * padded_vocab(spec.vocab, t) / t
        chunks[last][0] += _block_per_gpu(head, t) - logits
        if precision == "autocast":  # the output projection's 16-bit weight, saved per microbatch
            chunks[last][0] += AUTOCAST_COPY_BYTES * padded_vocab(spec.vocab, t) * h / t
        chunks[last][1] += logits
        for module in range(spec.mtp_layers):  # job.compute.mtp: a layer, 2h input, head again
            moe = mtp_layer_is_moe(spec, module) and layout.recompute != "full"
            chunks[last][0] += (layer + (moe_stash_delta(spec, layout, p)
                                         + _te_moe(spec, layout, p) if moe else 0.0)
                                + p * s * b * 2 * h / t + _block_per_gpu(head, t) - logits)
            chunks[last][1] += logits
    return [(acts, logits) for acts, logits in chunks]


def _te_moe(spec: Model, layout: Execution, p: int) -> float:
    """An MoE layer's TE FP8 stash beyond a dense layer's: the dense FFN's discount back,
    the experts' off (``job.memory.te_fp8_stash``)."""
    return dense_discount(spec, layout, p)[1] - moe_discount(spec, layout, p)


def memory_per_gpu(spec: Model, layout: Execution, precision: str, stage: int = 0,
                   grad_bytes: int = 4, attention: str = "flash",
                   runtime: rt.Runtime = rt.EAGER, gpu: str = "") -> MemoryBreakdown:
    """Bytes per GPU of pipeline rank ``stage`` (0 = first) by part, the attention core by
    the ``attention`` kernel, ZeRO 3 and compiled blocks as ``runtime`` runs them (module
    docstring, ``job.memory.torch_runtime``), TE's FP8 weight copies as the GPU preset
    ``gpu`` holds them (``job.compute.fp8.NON_TN_FP8_GPUS``: no transpose)."""
    check_precision(precision, grad_bytes)
    units = stage_units(spec, layout, stage)
    params = sum(units)
    shards = layout.cp * layout.dp  # Megatron-Core shards over the data-parallel group with CP
    master = layout.run.master_weights
    per_param = state_bytes(precision, layout.zero, shards, grad_bytes, master)
    unsharded = state_bytes(precision, 0, 1, grad_bytes, master)
    stash, accumulated = chunk_stash(spec, layout, precision, stage, attention, runtime), 0.0
    chunks, buffers = held_stages(layout.schedule, layout.pp, layout.chunks, stage), 0.0
    if layout.pp > 1 and runtime.sharding != "zero":  # torch.distributed.pipelining
        pipe = stage_buffers(spec, layout, stage, activation_bytes(precision),
                             runtime.pipeline_outputs)
        stash = [(acts - shared, logits) for (acts, logits), shared in zip(stash, pipe.shared,
                                                                            strict=True)]
        grads = [0.0] * len(chunks)
        if layout.fsdp2(runtime.sharding, pipelined=True):  # FP32 unsharded gradients held
            whole = stage_parameters(spec, layout, experts=True)  # each chunk's, FP32 held
            grads = [rt.REDUCE_BYTES * whole[s] for s in chunks]
        acts, logits, held, accumulated, kept = accumulating_peak(layout, stage, stash, grads,
                                                                  list(pipe.kept))
        buffers = pipe.fixed + kept
    else:
        acts, logits, held = in_flight_peak(layout, stage, stash)
    partial = block_layers(layout.recompute) is not None
    _, recompute = layer_activations(spec, replace(layout, recompute="full") if partial
                                     else layout, precision, attention, runtime)
    if spec.experts and (layout.recompute == "full" or partial):
        recompute += max(0.0, moe_stash_delta(spec, layout, activation_bytes(precision)))
    experts = stage_moe_layers(spec, layout, stage) * experts_per_gpu(spec, layout)
    expert_state = state_bytes(precision, layout.zero, layout.expert_dp, grad_bytes, master)
    loss = 0.0
    if _ends_held(layout, stage)[1] is not None:
        vocab = padded_vocab(spec.vocab, layout.tp)
        loss = (activation_bytes(precision) * local_tokens(spec, layout.cp)
                * layout.microbatch_size * vocab / layout.tp)
    largest = max(units)
    sharded = shards > 1  # over one replica ZeRO shards nothing and gathers nothing
    gathered = (PREFETCHED_UNITS * unsharded.weights * largest
                if sharded and layout.zero >= 3 else 0.0)
    gradient = unsharded.gradients * largest if sharded and layout.zero >= 2 else 0.0
    persistent = 0.0
    if sharded and layout.zero >= 3 and runtime.sharding != "zero":
        per_param, persistent, gathered, gradient = _fsdp2(spec, layout, stage, shards,
                                                           units, runtime, precision)
    cp_buffers = buffer_bytes(spec, layout) * activation_bytes(precision) / 2
    fp8_params = fp8_linear_parameters(spec, layout, stage)  # job.memory.fp8_weights
    copies = (fp8_weight_bytes(layout.run.fp8_recipe, sum(fp8_params), gpu)
              if layout.run.fp8_recipe else 0.0)
    copies -= primary_saving(layout, (per_param.weights, expert_state.weights), fp8_params)
    return MemoryBreakdown(stage, params + experts,
                           params * per_param.weights + experts * expert_state.weights + copies,
                           params * per_param.gradients + experts * expert_state.gradients
                           + accumulated,
                           params * per_param.optimizer + experts * expert_state.optimizer, acts,
                           logits, gathered + gradient + max(recompute + cp_buffers, loss),
                           CONTEXT_BYTES, held, persistent, buffers)


def _fsdp2(spec: Model, layout: Execution, stage: int, shards: int, units: list[float],
           runtime: rt.Runtime, precision: str) -> tuple[StateBytes, float, float, float]:
    """FSDP2's state bytes per parameter, its weights unsharded through the step, and its
    block-backward transient (as the ZeRO ``gathered`` plus ``gradient``; ``torch_runtime``);
    a block's parameters and gathered bytes ``sharded_units.layer_unit``'s (the rank's
    largest block: an MoE layer's when it holds one)."""
    blocks = layout.rank_layers(spec.layers, stage, spec.mtp_layers)
    first, last = _ends_held(layout, stage)
    embedding = units[blocks] if first is not None else 0.0
    head = units[blocks + (first is not None)] if last is not None else 0.0
    unit = layer_unit(spec, layout.tp, precision, runtime.sharding, runtime.fp8_all_gather,
                      rt.REDUCE_BYTES,
                      moe=stage_moe_layers(spec, layout, stage) > 0)
    block = unit.params if blocks else 0.0
    gathered = unit.gathered if blocks else 0.0
    states = StateBytes(*(b / shards for b in rt.STATE_BYTES))
    persistent = rt.persistent_bytes(runtime.sharding, gathered, blocks, embedding, head,
                                     layout.pp)
    return states, persistent, rt.backward_transient(gathered, block, layout.pp), 0.0


@lru_cache(maxsize=65536)  # a plan's search and its baselines' ask again for the same layouts
def peak_memory(spec: Model, layout: Execution, precision: str,
                grad_bytes: int = 4, attention: str = "flash",
                runtime: rt.Runtime = rt.EAGER, gpu: str = "") -> MemoryBreakdown:
    """The breakdown of the stage that needs the most. Under an even split only the first and
    last ranks can: a middle rank holds the same layers as the first without the embedding,
    and no more microbatches in flight (every schedule's warm-up shrinks with the rank). An
    accounted split takes a layer off the first (or last) rank, and torch.distributed.
    pipelining gives a middle rank receive buffers of both kinds for every microbatch
    (``job.memory.pipeline_buffers``): then the second rank, the middle one with the most in
    flight, is a candidate too."""
    middle = layout.pipeline_split != "even" or runtime.sharding != "zero"
    stages = {0, layout.pp - 1} | ({1} if middle and layout.pp > 2 else set())
    return max((memory_per_gpu(spec, layout, precision, s, grad_bytes, attention, runtime, gpu)
                for s in sorted(stages)),
               key=lambda breakdown: breakdown.total)


def _check_stage(layout: Execution, stage: int) -> None:
    if not 0 <= stage < layout.pp:
        raise ConfigError(f"stage: {stage} is not a pipeline rank; accepted: 0..{layout.pp - 1}")
