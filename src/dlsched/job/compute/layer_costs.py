"""Seconds of one microbatch through each block of the model on one GPU of a layout.

Compute: the zoo's Megatron-style decoder ops (``models.zoo.gpt_model``: fused layer norm,
bias-GELU or SwiGLU, bias-dropout-add; the spec's FFN width, KV heads, biases and norms) of one
layer, with the attention core by the job's ``attention`` kernel (Megatron-Core's
``--attention-backend`` names): ``flash``, one fused causal kernel at FlashAttention-2's rate
(what TorchTitan's SDPA runs, and Megatron-Core's ``auto`` before Hopper), ``fused``, the same
kernel at the rate of Transformer Engine's cuDNN fused attention (what ``auto`` picks on Hopper:
Transformer Engine prefers it there), or ``unfused``, Megatron-LM's 2021 products
(scores written out, fused scale-mask-softmax, dropout, the weighted sum: what SC21 and
Korthikanti et al. measured), the embedding and the head (its loss unfused as Megatron-LM runs
it, or fused as Megatron-Core's or Transformer Engine's kernels: ``job.compute.cross_entropy``),
priced by the
calibrated GPU model (``models.compute``) at the layout's tensor-parallel degree and sequence
parallelism, in the job's precision: ``bf16`` and ``fp16`` as Megatron-LM runs them (16-bit weights
and activations, FP32 master weights: no per-op casts), ``autocast`` as ``torch.autocast`` (FP32
weights cast per op), ``fp8`` as bf16 with the four linear layers of each transformer layer in
FP8 by the job's recipe (``job.compute.fp8``); under ``--compile`` the memory-bound ops fused
as torch.compile fuses them (``job.compute.compile_fusion``; both through
``job.compute.block_pricing``). Recomputation adds to the backward the layer's forward
(``full``: less what its launches hide under the backward's GPU work when the two run as one
host/GPU timeline, ``block_pricing.recompute_overlap_s``; compiled, without the FFN's output
projection, which AOTAutograd's partitioner does not rerun: ``unneeded_rerun_s``) or its
attention core (``selective``: the scores, softmax, dropout and context ops, or the fused
kernel's forward: Megatron-Core checkpoints ``core_attn`` whichever backend runs it) or, under
TorchTitan's per-op policy (``selective-op``), the ops ``job.op_checkpoint`` says it does not
keep (the unkept matmuls, the norms and elementwise ops before the last matmul; run as one
sequence of the layer's ops), with the TP collectives whose outputs it does not keep.
Under context parallelism (``job.context_parallel``) the model is one GPU's ``s / cp`` tokens
with the attention core at its real shape; the CP communication is priced there.

Tensor parallelism (Shoeybi et al. 2019; Korthikanti et al. 2022 Sec. 4.2.2): per layer two all-
reduces of the ``b s h`` activations in the forward and two in the backward; with sequence
parallelism each becomes an all-gather and a reduce-scatter of the same buffer; full recomputation
runs the forward's two again. The vocabulary-parallel embedding all-reduces its output in the
forward, the head its input gradient in the backward. All are priced on the TP group's links by a
collective policy (``job.collective_costs``) and block the GPU (Megatron-LM of 2021-2022 does not
overlap them) unless ``tp_overlap`` (Megatron-Core's ``--tp-comm-overlap``, Transformer Engine's
userbuffers; it needs sequence parallelism): then each collective runs beside a GEMM as
``job.tp_overlap`` prices it; the MoE layers' and the embedding's collectives stay blocking.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, lru_cache, partial

from dlsched.hardware import Topology
from dlsched.hardware.gpu import ELEMENT_BYTES
from dlsched.job.communication.allgather_cp import allgather_merge_seconds
from dlsched.job.communication.async_tp import COMPILED_RERUN, async_tp_exposed
from dlsched.job.communication.collective_costs import curve
from dlsched.job.communication.context_parallel import core_shape, local_tokens
from dlsched.job.communication.sp_relayout import relayout_seconds
from dlsched.job.communication.tp_overlap import overlapped_tp
from dlsched.job.compute.attention_dropout import with_attention_dropout
from dlsched.job.compute.attention_sinks import with_sink_casts
from dlsched.job.compute.bias_dropout import with_unfused_bias_dropout
from dlsched.job.compute.block_pricing import (
    KernelOptions,
    accumulation_launch_s,
    gemm_seconds,
    hidden_collectives_s,
    layer_work,
    ops_seconds,
    ops_works,
    priced_blocks,
    recompute_overlap_s,
)
from dlsched.job.compute.compile_fusion import compiled_ops
from dlsched.job.compute.cross_entropy import with_cross_entropy
from dlsched.job.compute.eager_ops import separate_linears, summed_gradient_bytes, torch_ops
from dlsched.job.compute.fp8 import (
    AMAX_BYTES,
    ROWWISE_RECIPES,
    amax_reductions,
    tp_gather_fraction,
)
from dlsched.job.compute.megatron_softmax import with_megatron_softmax
from dlsched.job.compute.mla import attention_exchange_width, is_mla, with_mla
from dlsched.job.compute.module_recompute import (
    modules_of,
    recomputed,
    rerun_seconds,
    reruns_core,
)
from dlsched.job.compute.op_checkpoint import recomputed_ops
from dlsched.job.compute.qk_norm import with_qk_norms
from dlsched.job.compute.qkv_layout import (
    CORE_COPY_LABELS,
    with_kv_repeat,
    with_qkv_copies,
    without_kv_repeat,
)
from dlsched.job.compute.te_unfused_mask import mask_seconds
from dlsched.job.compute.transformer_impl import with_transformer_impl
from dlsched.job.compute.unfused_rope import with_unfused_rope
from dlsched.job.model_spec import Model
from dlsched.job.run_choices import TORCHAO_RECIPES, check_setting
from dlsched.models.compute import CalibratedCompute, calibrated
from dlsched.models.layer import Layer
from dlsched.models.zoo import TransformerModel, gpt_model

ACTIVATION_BYTES = 2
EAGER_16BIT = KernelOptions()
ATTENTION_CORE = ("scores", "softmax", "attention-dropout", "context", "flash-attention")


@dataclass(frozen=True)
class BlockCosts:
    """Seconds per microbatch on one GPU: forward and backward of the embedding, one layer
    and the head (compute and TP communication), the layer's recomputation (added to its
    backward), the TP communication inside those numbers (``tp_forward_s``,
    ``tp_backward_s`` per layer, for reporting) and the layer's attention core alone
    (``core_f``, ``core_b``: what context parallelism's ring hides its transfers behind)."""

    embed_f: float
    embed_b: float
    layer_f: float
    layer_b: float
    head_f: float
    head_b: float
    tp_forward_s: float
    tp_backward_s: float
    core_f: float = 0.0
    core_b: float = 0.0


def gpu_compute(gpu: str, precision: str, tp: int = 1, sp: bool = False) -> CalibratedCompute:
    """The calibrated GPU in the job's precision (module docstring) at TP degree ``tp``: fp8
    runs all but its FP8 linears in bf16 (``job.compute.fp8`` prices those), so its GPU is the
    bf16 one (its peak the 16-bit one MFU is counted against)."""
    check_setting("precision", precision)
    half = "bf16" if precision in ("autocast", "fp8") else precision
    return calibrated(gpu, half, autocast=precision == "autocast", tensor_parallel=tp,
                      sequence_parallel=sp)


@lru_cache(maxsize=256)
def decoder_model(spec: Model, depth: int = 1, cp: int = 1,
                  cp_algorithm: str = "ring", attention: str = "flash") -> TransformerModel:
    """The zoo's Megatron-style decoder of ``spec``'s shape with ``depth`` layers, as one GPU
    of a CP group of ``cp`` runs it (``job.context_parallel``: ``s / cp`` tokens, the
    attention core at its real shape), its attention core by the ``attention`` kernel; an
    MLA spec's attention as ``job.compute.mla`` builds it; with ``flash``, PyTorch's SDPA after
    the K/V heads repeated (TorchTitan's ``repeat_kv``, ``job.compute.qkv_layout``; Transformer
    Engine's attention and its copies, which depend on TP, are ``rank_decoder``'s).
    Kept per exactly these arguments
    (the op graph, immutable): the microbatch, TP, SP and recomputation only price it, so a
    search builds it once, not once per layout (issue 47 item 4)."""
    core = core_shape(spec, cp, cp_algorithm)
    model = gpt_model(spec.name, spec.hidden, depth, spec.heads, local_tokens(spec, cp),
                      spec.vocab, dtype_bytes=ACTIVATION_BYTES, shape=spec, core=core,
                      attention=attention)
    if not spec.bias_dropout_fusion:
        model = with_unfused_bias_dropout(model, spec.bias, spec.experts > 0)
    if spec.attention_sinks and attention == "fused":  # job.compute.attention_sinks
        model = with_sink_casts(model, spec.heads)
    if not is_mla(spec):
        if spec.qk_norm:  # job.compute.qk_norm: before the rotary embedding
            model = with_qk_norms(model, *_attention_heads(spec, cp))
        if not spec.rope_fusion:
            model = with_unfused_rope(model, *_attention_heads(spec, cp))
        if attention == "flash":  # PyTorch's SDPA (TE's flash backend: rank_decoder)
            model = with_kv_repeat(model, *_attention_heads(spec, cp))
        return with_attention_dropout(model, spec.attention_dropout)
    tokens = local_tokens(spec, cp)
    model = with_mla(model, spec, *(core or (tokens, tokens, spec.heads)), attention)
    return with_attention_dropout(model, spec.attention_dropout)  # job.compute.attention_dropout


def te_attention(attention: str, transformer_impl: str) -> bool:
    """Whether the attention core is Transformer Engine's ``DotProductAttention``: its cuDNN
    kernel (``fused``), or its flash backend under TE's layer spec."""
    return attention == "fused" or (attention == "flash"
                                    and transformer_impl == "transformer_engine")


def _attention_heads(spec: Model, cp: int) -> tuple[int, int, int, int]:
    """Tokens per sample on a CP rank, query heads, KV heads and head dimension of ``spec``
    (``Model`` fills ``kv_heads`` and ``head_dim`` left 0 with their defaults)."""
    return local_tokens(spec, cp), spec.heads, spec.kv_heads, spec.head_dim


@lru_cache(maxsize=256)
def rank_decoder(spec: Model, cp: int, cp_algorithm: str, attention: str, tp: int,
                 transformer_impl: str) -> TransformerModel:
    """``decoder_model`` (one layer) on a rank of a TP group of ``tp``: with Transformer
    Engine's attention, the copies Megatron-Core and TE make of its inputs there
    (``job.compute.qkv_layout``; the query's depends on the query groups per rank) in place
    of PyTorch's ``repeat_kv`` (TE takes grouped K/V heads as they are). The zoo's graph is
    ``decoder_model``'s, built once per model (issue 47 item 4)."""
    model = decoder_model(spec, 1, cp, cp_algorithm, attention)
    if is_mla(spec) or not te_attention(attention, transformer_impl):
        return model
    return with_qkv_copies(without_kv_repeat(model), *_attention_heads(spec, cp), tp,
                           new_key=not spec.learned_positions or spec.qk_norm)


def torch_linears(spec: Model, kernels: KernelOptions) -> bool:
    """Whether a layer's QKV projection and gated FFN input projection run as TorchTitan's
    separate linears (``wq``, ``wk``, ``wv``; ``w1``, ``w3``: torchtitan/models/llama3/model.py
    at 9dec370 and 820504e), each reading the whole input, autograd summing their input
    gradients: its modules priced as eager PyTorch runs them (``ops`` eager), or compiled by
    ``torch.compile`` (TorchTitan's ``--training.compile``; Megatron-LM does not compile its
    layers, and async TP, which needs compile, already assumes these linears:
    ``job.communication.async_tp``). An MLA layer's projections are ``job.compute.mla``'s.
    The zoo's Megatron-style layer fuses both (one QKV GEMM, one FC1 GEMM twice as wide).
    Not applied to TorchTitan's eager runs priced with the fused ops (Tables 1 and 3's FSDP
    rows): nothing in their settings tells TorchTitan's model from Megatron's there."""
    return kernels.ops == "eager" or (kernels.compiled and not is_mla(spec))


def attention_exchange(spec: Model, sp: bool, message: float,
                       tp_group: Topology | None, policy: str, exchange: float) -> float:
    """Seconds of the TP exchanges around one layer's attention: ``exchange`` (those of the
    ``message``-byte activation), but for MLA under sequence parallelism the all-gather of its
    latents in place of the layer input's (``job.compute.mla.attention_exchange_width``)."""
    width = attention_exchange_width(spec, sp)
    if width == spec.hidden:
        return exchange
    return (curve(tp_group, "all-gather", policy).seconds(message * width / spec.hidden)
            + curve(tp_group, "reduce-scatter", policy).seconds(message))


def separate_linears_seconds(model: TransformerModel, spec: Model,
                             microbatch_size: int, compute: CalibratedCompute,
                             kernels: KernelOptions = EAGER_16BIT) -> tuple[float, float]:
    """Seconds TorchTitan's separate linears' GEMMs (wq, wk, wv; w1, w3: ``eager_ops.
    separate_linears``) take beyond the zoo's fused QKV and FC1 GEMMs, forward and backward:
    16-bit, or with an FP8 recipe each its own ``_scaled_mm`` at the FP8 rate (every one a
    ``Float8Linear`` of its own: torchao ``float8/float8_linear.py``, torchtitan
    ``components/quantization/float8.py`` at 820504e swaps each ``nn.Linear`` but ``output``;
    ``block_pricing.gemm_seconds``, GEMMs alone: the casts, per linear or shared, are
    ``job.compute.fp8``'s)."""
    extra = [0.0, 0.0]
    layer = [op for item in model.layers if item.block == "h.0" for op in item.ops]
    for op in layer:
        parts = separate_linears(op, spec)
        if len(parts) > 1:
            for back in (False, True):
                extra[back] += (sum(gemm_seconds(part, microbatch_size, compute, kernels, back)
                                    for part in parts)
                                - gemm_seconds(op, microbatch_size, compute, kernels, back))
    return extra[0], extra[1]


def unneeded_rerun_s(model: TransformerModel, microbatch_size: int,
                     compute: CalibratedCompute, kernels: KernelOptions) -> float:
    """Seconds of a layer's forward that a compiled full recomputation does not run again:
    the FFN's output projection (FC2, ``mlp.c_proj``: its GEMM and, in FP8, its forward
    casts), one microbatch. AOTAutograd's min-cut partitioner recomputes only the forward
    nodes whose outputs the backward reads; FC2's output feeds only the FFN's reduce-scatter
    (or all-reduce) and the residual add that makes the layer's output, which the layer's
    backward does not read (FC2's weight gradient needs its input, the SwiGLU product, which
    FC1 and the gate rerun to make). Read off Inductor's generated code
    (``benchmarks/inductor_tp_layouts.py --ac full``, torch 2.13 CPU, two column/row-parallel
    pairs under ``checkpoint(use_reentrant=False)``, as TorchTitan's ``ptd_checkpoint_wrapper``
    runs it at 9dec370 and 820504e): the backward graph reruns the first three linears'
    ``mm`` and not the last row-parallel one's (nor its reduce-scatter, ``COMPILED_RERUN``).
    Eager checkpointing (and Megatron's) replays the whole forward. Seconds (>= 0)."""
    layer = [op for item in model.layers if item.block == "h.0" for op in item.ops]
    fc2 = [op for op in layer if op.kind == "gemm" and op.label.endswith("mlp.c_proj")]
    return sum(work.gpu_s for work in ops_works(fc2, microbatch_size, compute, kernels, False))


@lru_cache(maxsize=4096)
def block_costs(spec: Model, microbatch_size: int, gpu: str, precision: str,
                tp: int, sp: bool, recompute: str, tp_group: Topology,
                policy: str, cp: int = 1, cp_algorithm: str = "ring",
                attention: str = "flash", tp_overlap: bool = False,
                kernels: KernelOptions = EAGER_16BIT, async_tp: bool = False,
                cross_entropy: str = "unfused",
                transformer_impl: str = "local") -> BlockCosts:
    """The blocks' seconds (see ``BlockCosts`` and the module docstring) on one GPU of a CP
    group of ``cp`` (its ``s / cp`` tokens; the CP communication is ``job.context_parallel``'s),
    the attention core by the ``attention`` kernel, the TP collectives overlapped with their
    GEMMs when ``tp_overlap`` and ``sp`` (Transformer Engine's userbuffers) or ``async_tp``
    (PyTorch's micro-pipelined collectives, ``job.async_tp``), the kernels in FP8 and compiled
    as ``kernels`` says, the head's loss by the ``cross_entropy`` implementation
    (``job.compute.cross_entropy``) and the norms by ``transformer_impl``'s kernels
    (``job.compute.transformer_impl``)."""
    compute = gpu_compute(gpu, precision, tp, sp)
    model = with_transformer_impl(
        with_cross_entropy(rank_decoder(spec, cp, cp_algorithm, attention, tp,
                                        transformer_impl), cross_entropy),
        transformer_impl)
    if attention == "unfused" and ELEMENT_BYTES[precision] == 2:  # Megatron's 16-bit softmax
        model = with_megatron_softmax(model, microbatch_size, max(1, spec.heads // tp),
                                      local_tokens(spec, cp))
    forward, backward = priced_blocks(model, microbatch_size, compute, kernels, spec)
    message = microbatch_size * local_tokens(spec, cp) * spec.hidden * ACTIVATION_BYTES
    gathered = message * tp_gather_fraction(kernels.fp8_recipe)  # each layer all-gather's
    if sp:  # (the forward's inputs, the backward's output gradients: FP8 under tensorwise)
        scatter = curve(tp_group, "reduce-scatter", policy).seconds(message)
        exchange = curve(tp_group, "all-gather", policy).seconds(message) + scatter
        exchange_f = curve(tp_group, "all-gather", policy).seconds(gathered) + scatter
    else:
        exchange = exchange_f = curve(tp_group, "all-reduce", policy).seconds(message)
    tp_forward = exchange_f + attention_exchange(spec, sp, message, tp_group, policy, exchange_f)
    tp_backward = exchange_f + attention_exchange(spec, sp, message, tp_group, policy,
                                                  exchange_f)
    rerun: float | None = None  # what full recomputation runs again: the forward's exchanges,
    if sp and kernels.compiled:  # compiled not the FFN's reduce-scatter (sp_relayout)
        rerun = 2 * curve(tp_group, "all-gather", policy).seconds(gathered) + scatter
    elif kernels.compiled and tp > 1:  # without SP the attention's all-reduce, not the FFN's
        rerun = exchange_f
    if sp and tp_overlap:
        tp_forward, tp_backward = overlapped_tp(model, compute, microbatch_size, message,
                                                tp_group, policy, fp8_recipe=kernels.fp8_recipe)
        rerun = None
    elif sp and async_tp:
        gemms = {op.label: op for item in model.layers for op in item.ops if op.kind == "gemm"}

        def exposed(linears: tuple[str, ...] | None) -> tuple[float, float]:
            return async_tp_exposed(
                gemms, lambda op, back: gemm_seconds(op, microbatch_size, compute, kernels,
                                                     back),
                tp, message, tp_group, policy, compute.gpu.memory_rate, gathered,
                gathers_fused=kernels.fp8_recipe not in ROWWISE_RECIPES, linears=linears)
        tp_forward, tp_backward = exposed(None)
        rerun = exposed(COMPILED_RERUN)[0] if kernels.compiled else None
    amax_forward, amax_backward = amax_reductions(kernels.fp8_recipe, tp, sp)
    if amax_forward or amax_backward:  # current scaling's amax of the gathered operands
        amax = curve(tp_group, "all-reduce", policy).seconds(AMAX_BYTES)
        tp_forward += amax_forward * amax
        tp_backward += amax_backward * amax
    if recompute == "full":
        tp_backward += tp_forward if rerun is None else rerun
    modules = modules_of(recompute)  # Megatron-Core's --recompute-modules
    tp_backward += exchange if "mlp" in modules else 0.0  # the FFN's own TP exchange again
    if recompute == "selective-op":  # the gathers feeding QKV and FFN, or the first all-reduce
        tp_backward += (2 * curve(tp_group, "all-gather", policy).seconds(gathered) if sp
                        else curve(tp_group, "all-reduce", policy).seconds(message))
    layer_f, layer_b = float(forward[1]), float(backward[1])
    # Transformer Engine's unfused core builds its causal mask each call (te_unfused_mask)
    mask = mask_seconds(spec, cp, attention, transformer_impl, compute.gpu.memory_rate)
    layer_f += mask
    # h.0's kernels (GPU seconds, launches), priced on first use, at most once a call
    work = cache(partial(layer_work, model, microbatch_size, compute, kernels, spec))
    layer_b += accumulation_launch_s(work()) if kernels.accumulation_launches else 0.0
    if sp and kernels.ops == "eager" and not tp_overlap:  # functional collectives' copies
        copy_f, copy_b = relayout_seconds(message, gathered, microbatch_size, recompute,
                                          compute.gpu.memory_rate, async_tp,
                                          kernels.fp8_recipe not in ROWWISE_RECIPES,
                                          kernels.compiled)
        layer_f, layer_b = layer_f + copy_f, layer_b + copy_b
    split_f = split_b = 0.0  # TorchTitan's separate linears' GEMMs beyond the fused ones
    if torch_linears(spec, kernels):  # their input
        # gradients summed (full width) and the linears' GEMMs at their own shapes
        layer_b += summed_gradient_bytes(message / ACTIVATION_BYTES,
                                         kernels.compiled) / compute.gpu.memory_rate
        split_f, split_b = separate_linears_seconds(model, spec, microbatch_size, compute,
                                                    kernels)
        layer_f, layer_b = layer_f + split_f, layer_b + split_b
    merge_f, merge_b = allgather_merge_seconds(spec, microbatch_size, tp, cp, cp_algorithm,
                                               compute.gpu.memory_rate, kernels.compiled,
                                               reruns_core(recompute))
    layer_f, layer_b = layer_f + merge_f, layer_b + merge_b
    if reruns_core(recompute) and recompute != "full":  # the core's rerun merges again
        layer_b += merge_f
    layer = next(item for item in model.layers if item.block == "h.0" and any(
        op.label in ATTENTION_CORE for op in item.ops))
    core = [op for op in layer.ops if op.label in ATTENTION_CORE]
    core_f = sum(compute.op_time(op, microbatch_size) for op in core)
    core_copy_f = sum(compute.op_time(op, microbatch_size) for op in layer.ops
                      if op.label in CORE_COPY_LABELS)  # rerun with the core (qkv_layout)
    core_b = sum(compute.op_time(op, microbatch_size, backward=True) for op in core)
    if recompute == "full":  # the rerun forward launched beside the backward's GPU work
        layer_b += layer_f - recompute_overlap_s(work().halves(kernels.accumulation_launches))
        if kernels.compiled:  # AOTAutograd's partitioner: not the FFN's output projection
            layer_b -= unneeded_rerun_s(model, microbatch_size, compute, kernels)
    elif recompute == "selective":
        layer_b += core_f + core_copy_f + mask
    elif modules:
        again = recomputed(((item.name, op) for item in model.layers if item.block == "h.0"
                            for op in item.ops), modules)
        layer_b += rerun_seconds(again, microbatch_size, compute, kernels)
        layer_b += core_f + core_copy_f + mask if "core_attn" in modules else 0.0  # selective's
    elif recompute == "selective-op":
        ops = tuple(op for item in model.layers if item.block == "h.0" for op in item.ops)
        if kernels.ops == "eager":  # TorchTitan's modules (job.compute.eager_ops)
            ops = torch_ops(ops, spec, kernels.compiled)
        again = recomputed_ops(spec, ops, local_tokens(spec, cp),
                               fp8=kernels.fp8_recipe in TORCHAO_RECIPES,
                               compiled_sp=kernels.compiled and sp)
        if kernels.compiled and kernels.ops == "fused":
            again = compiled_ops(again, cyclic=False)
        layer_b += (compute.forward_time(Layer("h.0.recomputed", 0, ops=again), microbatch_size)
                    if kernels.eager_16bit
                    else ops_seconds(again, microbatch_size, compute, kernels, False))
        if kernels.fp8_recipe in TORCHAO_RECIPES:  # every _scaled_mm before w2 reruns: wq,
            layer_b += split_f  # wk, wv, w1, w3 at their own shapes (recomputed_ops)
    if tp > 1 and kernels.eager_16bit and not (sp and tp_overlap):  # eager Megatron's stream
        hide_f, hide_b = hidden_collectives_s(
            work().halves(kernels.accumulation_launches), tp_forward,
            tp_backward, recompute == "full")
        tp_forward, tp_backward = tp_forward - hide_f, tp_backward - hide_b
    return BlockCosts(float(forward[0]) + exchange, float(backward[0]), layer_f + tp_forward,
                      layer_b + tp_backward, float(forward[2]), float(backward[2]) + exchange,
                      tp_forward, tp_backward, core_f, core_b)

