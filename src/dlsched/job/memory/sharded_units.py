"""One transformer layer as a ZeRO 3 / FSDP unit on one GPU: the parameters it holds once TP
has split it, the bytes its all-gather delivers and the bytes its reduce-scatter takes
(``layer_unit``). The one reading of those quantities for every caller: ZeRO 3's per-layer
traffic (``job.evaluation.replica``), FSDP2's ends and pipeline units
(``job.communication.fsdp2_costs``) and the memory model's gathered blocks
(``job.memory.per_gpu``, ``job.memory.torch_runtime``).

**What TP splits and what it replicates.** Megatron-LM's column- and row-parallel linears split
every attention and FFN weight over the TP group, and the column-parallel biases with them; the
two norms of the layer (``LayerNorm`` / ``RMSNorm``: weight, and bias with ``bias``), the
row-parallel linears' biases (added after the all-reduce), the per-head query/key norms
(``qk_norm``), MLA's down projections and latent norms (``job.compute.mla``) and an MoE
layer's router (Megatron-Core's ``TopKRouter`` holds its whole ``experts x h`` weight on every
rank) stay whole. TorchTitan's TP plan (``parallelize_llama``) shards the linears
(``ColwiseParallel`` / ``RowwiseParallel``) and leaves the norms replicated (``SequenceParallel``
keeps their weights ``Replicate()``). ZeRO 3 / FSDP shards each TP rank's own share over the
data-parallel (and CP) group, so a unit's all-gather delivers that share to every GPU: the
split weights ``/ tp``, the replicated ones whole (``layer_parameters_per_gpu``).

**What the all-gather sends.** The weights in their training dtype: FSDP2's ``param_dtype`` of
TorchTitan's ``MixedPrecisionPolicy``, bf16; Megatron's model weights, 16-bit under bf16, fp16
and fp8 and FP32 under ``autocast`` (``job.memory.per_gpu.state_bytes``).
torchao's float8 all-gather (``enable_fsdp_float8_all_gather``, ``fp8_all_gather``) changes only
the linear weights: ``Float8Linear.from_float`` wraps ``weight`` alone in
``WeightWithDynamicFloat8CastTensor``, whose ``fsdp_pre_all_gather`` casts it to float8 (1 byte,
plus a per-tensor scale, not counted), and keeps ``bias`` a plain parameter
(``torchao/float8/float8_linear.py``); ``convert_to_float8_training`` swaps only ``nn.Linear``
modules (norms, embeddings untouched) and TorchTitan's converter filters out ``output``
(``module_filter_fn=lambda mod, fqn: fqn != "output"``, ``torchtitan/float8.py`` of the 2412
runs, ``torchtitan/components/quantization/float8.py`` later). So under it a layer's linear
weights (``fp8_weights_per_gpu``) travel in 1 byte and its norms, biases and router in 16 bits.

**What the reduce-scatter takes.** Every parameter's gradient, in the run's ``grad_bytes``
(TorchTitan's ``reduce_dtype`` FP32; Megatron's main gradients): float8 does not touch gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlsched.job.compute.mla import is_mla, replicated_matmul_elements, replicated_parameters
from dlsched.job.memory.moe import moe_dense_delta
from dlsched.job.memory.torch_runtime import PARAM_BYTES
from dlsched.job.model_spec import Model
from dlsched.job.run_choices import PRECISIONS, SHARDINGS

SIXTEEN_BIT_BYTES = 2  # bf16 / fp16 weights: what ZeRO 3 and FSDP2 (param_dtype) gather
FP32_BYTES = 4  # autocast's (torch.autocast keeps the weights FP32) and fp32's weights
FP8_BYTES = 1  # torchao's float8 all-gather: a Float8Linear weight in float8_e4m3fn


def gathered_weight_bytes(precision: str, sharding: str = "zero") -> int:
    """Bytes per gathered weight (module docstring): Megatron's ZeRO 3 (``zero``) its model
    weights', 16-bit under ``bf16``, ``fp16`` and ``fp8`` (FP8 GEMMs on 16-bit weights), FP32
    under ``autocast`` (and the memory model's ``fp32``); FSDP2 (``fsdp2``, ``fsdp2-split``) its
    ``MixedPrecisionPolicy``'s 16-bit ``param_dtype`` (``torch_runtime.PARAM_BYTES``, as its
    root, copies and buffers are counted)."""
    accepted = (*PRECISIONS, "fp32")  # fp32: the memory model's own (per_gpu.state_bytes)
    if precision not in accepted:
        raise ValueError(f"precision: {precision!r}; accepted: " + ", ".join(accepted))
    if sharding not in SHARDINGS:
        raise ValueError(f"sharding: {sharding!r}; accepted: " + ", ".join(SHARDINGS))
    if sharding != "zero":
        return PARAM_BYTES
    return FP32_BYTES if precision in ("autocast", "fp32") else SIXTEEN_BIT_BYTES


def layer_parameters_per_gpu(spec: Model, tp: int) -> float:
    """One dense layer's parameters on one TP rank (module docstring): split weights and
    column-parallel biases over ``tp``; the two norms, the per-head query/key norms
    (``qk_norm``), the two row-parallel biases (with ``bias``) and MLA's down projections and
    latent norms whole."""
    replicated = (2 * spec.norm_parameters() + (2 * spec.hidden if spec.bias else 0)
                  + (2 * spec.head_dim if spec.qk_norm else 0)
                  + replicated_parameters(spec))  # MLA's down projections (job.compute.mla)
    return (spec.layer_parameters() - replicated) / tp + replicated


def fp8_weights_per_gpu(spec: Model, tp: int, moe: bool = False) -> float:
    """Linear weights of one layer on one TP rank that torchao's float8 all-gather sends in FP8
    (module docstring): the attention's projections and the FFN's matrices (``moe``: the shared
    experts' in place of the dense FFN; the router stays 16-bit), split over ``tp`` but MLA's
    down projections, whole. No bias, norm or router."""
    h = spec.hidden
    dense_ffn = spec.ffn_matrices * h * spec.ffn_hidden
    attention = spec.layer_matmul_elements() - dense_ffn
    whole = replicated_matmul_elements(spec) if is_mla(spec) else 0
    ffn = (spec.shared_experts * spec.ffn_matrices * h * spec.expert_ffn_hidden if moe
           else dense_ffn)
    return (attention - whole + ffn) / tp + whole


@dataclass(frozen=True)
class LayerUnit:
    """One layer as a ZeRO 3 / FSDP unit on one GPU: ``params`` parameters (its TP share, all
    of it gathered), ``gathered`` bytes its all-gather delivers, ``reduced`` bytes of its
    reduce-scatter's input (module docstring)."""

    params: float
    gathered: float
    reduced: float


def layer_unit(spec: Model, tp: int, precision: str, sharding: str, fp8_all_gather: bool,
               grad_bytes: float, moe: bool = False) -> LayerUnit:
    """One layer as a ZeRO 3 / FSDP unit on one GPU of a TP group of ``tp`` (module docstring):
    its parameters (``moe``: an MoE layer's non-expert part, router whole and shared experts
    split; the routed experts are expert parallelism's), the weights gathered in
    ``gathered_weight_bytes(precision, sharding)`` each, the linear weights in 1 byte with
    ``fp8_all_gather``, every gradient reduce-scattered in ``grad_bytes``."""
    if tp < 1:
        raise ValueError(f"tp: {tp}; accepted: a positive integer")
    params = layer_parameters_per_gpu(spec, tp) + (moe_dense_delta(spec, tp) if moe else 0.0)
    fp8 = fp8_weights_per_gpu(spec, tp, moe) if fp8_all_gather else 0.0
    gathered = gathered_weight_bytes(precision, sharding) * (params - fp8) + FP8_BYTES * fp8
    return LayerUnit(params, gathered, grad_bytes * params)
