"""The Themis paper's four training workloads (ISCA 2022, Section 6.3), built from the zoo.

Assumptions (also in docs/training.md):

* FP16 everything communicated (gradients, activations, parameters): 2 bytes per element.
* Compute per op from a roofline (default: the calibrated ``a100`` preset in bf16, its GEMM and
  memory rates, ``Roofline.of``): an op with FLOPs takes max(FLOP / rate, (weights + input +
  output activations) / memory rate);
  parameter tensors without FLOPs of their own (biases, norm shifts, embedding tables) are
  fused into their op and cost nothing extra. Backward = 2 x forward, half for the input
  gradient and half for the weight gradient (each is one GEMM/convolution of the forward's
  size). The optimizer update is memory bound: 16 bytes per parameter (mixed-precision Adam:
  FP32 master weight and two moments, FP16 weight and gradient) at memory bandwidth.
* One workload layer per block of the zoo model (a ResNet bottleneck, an LSTM layer, an MLP
  layer, half a transformer block), so one gradient collective per block.
* ResNet-152: data parallel, 32 samples per NPU, one gradient All-Reduce per block.
* GNMT: data parallel, 128 samples per NPU (50 source and 50 target tokens each).
* DLRM: 512 samples per NPU; MLPs data parallel (one All-Reduce per layer); the 26 embedding
  tables model-parallel across all NPUs: the forward All-to-All of the looked-up vectors
  (512 x 26 x 128 x 2 B per NPU) overlaps the bottom MLP and is awaited by the interaction
  (first top-MLP layer); the backward All-to-All of their gradients is issued when the
  interaction's input gradient is ready and awaited by the embedding update.
* Transformer-1T (Megatron-LM's 1T shape): tensor (model) parallel over the first 128 NPUs
  (whole leading dimensions, then part of the next), ZeRO-2 data parallel over the rest;
  16 samples of 2048 tokens per model replica. Per half block (attention, MLP): a forward
  All-Reduce and an input-gradient All-Reduce of the b x s x h activations over the
  model-parallel group (blocking, as in Megatron-LM), a Reduce-Scatter of the gradient shard
  over the data-parallel group, an update of 1/DP of it, and an All-Gather of the updated
  parameters before the next forward.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from dlsched.collectives.plan import CollectiveOp
from dlsched.errors import ConfigError
from dlsched.models.compute import Roofline
from dlsched.models.layer import Model
from dlsched.models.zoo import DLRM_DIM, DLRM_TABLE_ROWS, get_model
from dlsched.training.workload import Comm, Workload, WorkloadLayer

FP16 = 2
UPDATE_BYTES_PER_PARAM = 16


class OpTimer(Protocol):
    """A compute model: seconds of an op from its FLOP and bytes of memory traffic
    (``models.compute.Roofline``, or ``training.paper.FlopOnlyCompute``)."""

    def op_time(self, flops: float, num_bytes: float) -> float: ...

T1T_MODEL_PARALLEL = 128
# Samples per NPU (per model-parallel replica for Transformer-1T) of each zoo workload.
BATCHES = {"resnet152": 32, "gnmt": 128, "dlrm": 512, "transformer-1t": 16}


def _blocks(model: Model, roofline: OpTimer, batch: int, key: Callable[[str, str], str],
            split: int = 1) -> list[tuple[str, int, float]]:
    """(name, parameters, forward seconds) of each group of tensors (``key(block, tensor)``),
    in order; ``split``: the op is shared by that many model-parallel NPUs."""
    groups: dict[str, list[float]] = {}
    previous = 0
    for layer in model.layers:
        name = key(layer.block, layer.name)
        entry = groups.setdefault(name, [0, 0.0])
        entry[0] += layer.params
        if layer.forward_flops > 0:
            moved = layer.params * FP16 + (previous + layer.activation_bytes) * batch
            entry[1] += roofline.op_time(layer.forward_flops * batch / split, moved / split)
        previous = layer.activation_bytes or previous
    return [(name, int(params), seconds) for name, (params, seconds) in groups.items()]


def _update(params: int, roofline: OpTimer) -> float:
    return roofline.op_time(0, params * UPDATE_BYTES_PER_PARAM)


def _data_parallel(name: str, model_name: str, batch: int, roofline: OpTimer,
                   description: str) -> Workload:
    model = get_model(model_name, FP16)
    layers = tuple(
        WorkloadLayer(block, seconds, seconds, seconds, _update(params, roofline),
                      weight_grad_comm=Comm(CollectiveOp.ALL_REDUCE, params * FP16, "all"))
        for block, params, seconds in _blocks(model, roofline, batch, lambda b, _: b))
    return Workload(name, layers, 1, description)


def resnet152(num_npus: int, roofline: OpTimer) -> Workload:
    """ResNet-152, data parallel, 32 images of 224x224 per NPU."""
    return _data_parallel("resnet152", "resnet152", BATCHES["resnet152"], roofline,
                          "ResNet-152, data parallel, 32 samples per NPU, FP16")


def gnmt(num_npus: int, roofline: OpTimer) -> Workload:
    """GNMT (8+8 LSTM layers with attention), data parallel, 128 sentences per NPU."""
    return _data_parallel("gnmt", "gnmt", BATCHES["gnmt"], roofline,
                          "GNMT 8-layer encoder/decoder, data parallel, 128 samples per NPU, FP16")


def dlrm(num_npus: int, roofline: OpTimer, batch: int = BATCHES["dlrm"]) -> Workload:
    """DLRM: data-parallel MLPs, model-parallel embedding tables exchanged by All-to-All."""
    model = get_model("dlrm", FP16)
    lookups = batch * len(DLRM_TABLE_ROWS) * DLRM_DIM * FP16
    lookup_s = roofline.op_time(0, 2 * lookups)
    embedding = WorkloadLayer(
        "embeddings", lookup_s, 0.0, lookup_s, _update(lookups // FP16, roofline),
        forward_comm=Comm(CollectiveOp.ALL_TO_ALL, lookups, "all", consumer="top_l.0"),
        input_grad_comm=Comm(CollectiveOp.ALL_TO_ALL, lookups, "all", issuer="top_l.0",
                             consumer="embeddings"))
    mlps = tuple(
        WorkloadLayer(block, seconds, seconds, seconds, _update(params, roofline),
                      weight_grad_comm=Comm(CollectiveOp.ALL_REDUCE, params * FP16, "all"))
        for block, params, seconds in _blocks(model, roofline, batch, lambda b, _: b)
        if block != "embeddings")
    return Workload("dlrm", (embedding, *mlps), 1,
                    f"DLRM (MLPerf Criteo-TB), {batch} samples per NPU, embedding tables model "
                    "parallel with All-to-All, MLPs data parallel, FP16")


def _half_block(block: str, tensor: str) -> str:
    if block.startswith("h."):
        return f"{block}.{'attn' if '.attn.' in tensor or '.ln_1.' in tensor else 'mlp'}"
    return block


def transformer_1t(num_npus: int, roofline: OpTimer,
                   batch: int = BATCHES["transformer-1t"]) -> Workload:
    """Transformer-1T: 128-way tensor parallel, ZeRO-2 data parallel over the rest."""
    mp = min(T1T_MODEL_PARALLEL, num_npus)
    dp = max(1, num_npus // mp)
    model = get_model("transformer-1t", FP16)
    hidden, _, seq = 25600, 128, 2048
    activation = batch * seq * hidden * FP16
    layers = []
    for block, params, seconds in _blocks(model, roofline, batch, _half_block, split=mp):
        shard = max(1, params * FP16 // mp)
        forward = None if block == "ln_f" else Comm(CollectiveOp.ALL_REDUCE, activation, "mp")
        backward = None if block == "embed" else Comm(CollectiveOp.ALL_REDUCE, activation, "mp")
        layers.append(WorkloadLayer(
            block, seconds, seconds, seconds, _update(params // mp // dp, roofline),
            forward_comm=forward, input_grad_comm=backward,
            weight_grad_comm=Comm(CollectiveOp.REDUCE_SCATTER, shard, "dp"),
            update_comm=Comm(CollectiveOp.ALL_GATHER, shard, "dp")))
    return Workload("transformer-1t", tuple(layers), mp,
                    f"Transformer-1T, {mp}-way model parallel, ZeRO-2 data parallel x{dp}, "
                    f"{batch} samples of {seq} tokens per replica, FP16")


WORKLOADS: dict[str, Callable[[int, OpTimer], Workload]] = {
    "resnet152": resnet152, "gnmt": gnmt, "dlrm": dlrm, "transformer-1t": transformer_1t,
}


def model_flops_per_npu(name: str, num_npus: int) -> float:
    """Model FLOP one NPU does per iteration of zoo workload ``name`` (forward + backward,
    3 x forward, at ``BATCHES[name]`` samples; Transformer-1T's divided over its model-parallel
    group): the numerator of MFU."""
    forward = sum(layer.forward_flops for layer in get_model(name).layers) * BATCHES[name]
    split = min(T1T_MODEL_PARALLEL, num_npus) if name == "transformer-1t" else 1
    return 3.0 * forward / split


def get_workload(name: str, num_npus: int, roofline: OpTimer | None = None) -> Workload:
    """A zoo workload for a machine of ``num_npus`` NPUs (A100-like roofline by default)."""
    if name not in WORKLOADS:
        raise ConfigError(f"workload: unknown workload {name!r}; accepted: "
                          + ", ".join(WORKLOADS))
    return WORKLOADS[name](num_npus, roofline or Roofline())
