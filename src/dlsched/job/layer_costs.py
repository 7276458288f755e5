"""Seconds of one microbatch through each block of the model on one GPU of a layout.

Compute: the zoo's Megatron-style decoder ops (``models.zoo.gpt_model``: fused layer norm, scale-
mask-softmax, bias-GELU or SwiGLU, bias-dropout-add, unfused attention products; the spec's FFN
width, KV heads, biases and norms) of one layer, the embedding and the head, priced by the
calibrated GPU model (``models.compute``) at the layout's tensor-parallel degree and sequence
parallelism, in the job's precision: ``bf16`` and ``fp16`` as Megatron-LM runs them (16-bit weights
and activations, FP32 master weights: no per-op casts), ``autocast`` as ``torch.autocast`` (FP32
weights cast per op). Recomputation adds to the backward the layer's forward (``full``) or its
attention core (``selective``: the scores, softmax, dropout and context ops).

Tensor parallelism (Shoeybi et al. 2019; Korthikanti et al. 2022 Sec. 4.2.2): per layer two all-
reduces of the ``b s h`` activations in the forward and two in the backward; with sequence
parallelism each becomes an all-gather and a reduce-scatter of the same buffer; full recomputation
runs the forward's two again. The vocabulary-parallel embedding all-reduces its output in the
forward, the head its input gradient in the backward. All are priced on the TP group's links by a
collective policy (``job.collective_costs``) and block the GPU (Megatron-LM of 2021-2022 does not
overlap them).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from dlsched.errors import ConfigError
from dlsched.hardware import Topology
from dlsched.job.collective_costs import curve
from dlsched.job.model_spec import TransformerSpec
from dlsched.models.compute import CalibratedCompute, calibrated
from dlsched.models.zoo import DecoderShape, TransformerModel, gpt_model
from dlsched.pipeline.calibrated_chain import block_seconds

PRECISIONS = ("bf16", "fp16", "autocast")
ACTIVATION_BYTES = 2
ATTENTION_CORE = ("scores", "softmax", "attention-dropout", "context")


@dataclass(frozen=True)
class BlockCosts:
    """Seconds per microbatch on one GPU: forward and backward of the embedding, one layer
    and the head (compute and TP communication), the layer's recomputation (added to its
    backward), and the TP communication inside those numbers (``tp_forward_s``,
    ``tp_backward_s`` per layer, for reporting)."""

    embed_f: float
    embed_b: float
    layer_f: float
    layer_b: float
    head_f: float
    head_b: float
    tp_forward_s: float
    tp_backward_s: float


def check_precision(precision: str) -> str:
    """``precision`` when accepted; ConfigError otherwise."""
    if precision not in PRECISIONS:
        raise ConfigError(f"--precision: {precision!r} is not accepted; accepted: "
                          + ", ".join(PRECISIONS))
    return precision


def gpu_compute(gpu: str, precision: str, tp: int = 1, sp: bool = False) -> CalibratedCompute:
    """The calibrated GPU in the job's precision (module docstring) at TP degree ``tp``."""
    check_precision(precision)
    half = "bf16" if precision == "autocast" else precision
    return calibrated(gpu, half, autocast=precision == "autocast", tensor_parallel=tp,
                      sequence_parallel=sp)


def decoder_model(spec: TransformerSpec, depth: int = 1) -> TransformerModel:
    """The zoo's Megatron-style decoder of ``spec``'s shape with ``depth`` layers."""
    shape = DecoderShape(spec.ffn_hidden, spec.kv_heads, spec.gated_ffn, spec.bias,
                         spec.rms_norm, spec.learned_positions, spec.tied_embeddings)
    return gpt_model(spec.name, spec.hidden, depth, spec.heads, spec.seq, spec.vocab,
                     dtype_bytes=ACTIVATION_BYTES, shape=shape)


@lru_cache(maxsize=4096)
def block_costs(spec: TransformerSpec, microbatch_size: int, gpu: str, precision: str,
                tp: int, sp: bool, recompute: str, tp_group: Topology,
                policy: str) -> BlockCosts:
    """The blocks' seconds (see ``BlockCosts`` and the module docstring)."""
    compute = gpu_compute(gpu, precision, tp, sp)
    model = decoder_model(spec)
    forward, backward = block_seconds(model, microbatch_size, compute)
    message = microbatch_size * spec.seq * spec.hidden * ACTIVATION_BYTES
    if sp:
        exchange = (curve(tp_group, "all-gather", policy).seconds(message)
                    + curve(tp_group, "reduce-scatter", policy).seconds(message))
    else:
        exchange = curve(tp_group, "all-reduce", policy).seconds(message)
    tp_forward = 2 * exchange
    tp_backward = 2 * exchange + (tp_forward if recompute == "full" else 0.0)
    layer_f, layer_b = float(forward[1]), float(backward[1])
    if recompute == "full":
        layer_b += layer_f
    elif recompute == "selective":
        layer = next(item for item in model.layers if item.block == "h.0" and any(
            op.label in ATTENTION_CORE for op in item.ops))
        layer_b += sum(compute.op_time(op, microbatch_size) for op in layer.ops
                       if op.label in ATTENTION_CORE)
    return BlockCosts(float(forward[0]) + exchange, float(backward[0]), layer_f + tp_forward,
                      layer_b + tp_backward, float(forward[2]), float(backward[2]) + exchange,
                      tp_forward, tp_backward)
