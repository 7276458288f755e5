"""One op's GPU seconds and kernel launches on a calibrated GPU, priced by its kernels' shapes.

* GEMMs (``gemm``): FLOP / (kind rate x ``gemm_utilization`` of the (M, N, K) cuBLAS runs),
  at least the operands' and result's bytes / memory rate. The backward is two GEMMs, the
  input gradient (M x K, inner N) and the weight gradient (N x K, inner M: split-K).
* Convolutions (``conv``): cuDNN's implicit GEMM, M = batch x output pixels, N = output
  channels, K = input channels x kernel^2; backward: data gradient (M = batch x input
  pixels, N = input channels) and weight gradient (M = output channels, N = K, inner batch x
  pixels). A 16-bit convolution in NCHW layout (not ``channels_last``) also converts its
  input and output to the tensor cores' NHWC and back (cuDNN's own transpose kernels, no
  launch of their own): reading and writing both once in the forward, twice in the
  backward (the gradients, and the input again for the weight gradient), at the memory rate
  of transposes (``transpose_efficiency`` of the bandwidth).
* Fused attention (``attention``: SDPA / FlashAttention-2; ``fused_attention``: cuDNN's, by
  its tiles on a GPU that gives that kernel's constants: ``models.fused_attention``): FLOP
  (half of them when causal: masked blocks are skipped; a window's ``Op.executed`` share of
  them) / (kind rate x its wave quantization); the backward recomputes the scores, 2.5x the
  forward's FLOP (Dao, FlashAttention-2, 2023, §3.1).
* Elementwise ops: bytes / memory rate at the precision they run in (4 bytes under autocast
  for ops marked ``fp32``, always for ops marked ``upcast``).

Under ``torch.autocast`` (16 bits, FP32 weights) a weighted product casts its weight to 16
bits in the forward (one kernel reading 4 and writing 2 bytes per element) and its gradient
back in the backward, and a product marked ``cast_input`` casts its FP32 input the same way.
In ``fp8`` GEMMs run as Transformer Engine runs them (Micikevicius et al., *FP8 Formats for
Deep Learning*, 2022; NVIDIA Transformer Engine): the input and the weight are cast to FP8
(one cast-transpose kernel each, reading 2 and writing 2 x 1 bytes per element: the tensor
and its transpose for the backward; the weight goes to FP8 directly, without autocast's bf16
cast), the output gradient likewise in the backward, and all three GEMMs run at the FP8 rate;
everything else runs in bf16 under autocast.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from dlsched.errors import ConfigError
from dlsched.hardware.gpu import ELEMENT_BYTES, KEY, LOW_PRECISIONS, OPERAND_BYTES
from dlsched.models.fused_attention import fused_attention_seconds
from dlsched.models.kernels import attention_utilization, gemm_utilization
from dlsched.models.ops import ATTENTION_BACKWARD, ATTENTION_KINDS, BACKWARD_FACTOR, Op
from dlsched.models.timeline import Work

if TYPE_CHECKING:
    from dlsched.models.compute import CalibratedCompute

CAST_BYTES = 6.0  # an autocast cast reads 4 bytes and writes 2 per element
FP8_CAST_BYTES = 4.0  # a cast-transpose reads 2 bytes and writes 2 x 1 per element
# Winograd F(2x2, 3x3): 16 multiplies per 2x2 output tile instead of 36 (Lavin & Gray, "Fast
# Algorithms for Convolutional Neural Networks", CVPR 2016, Table 1: 2.25x fewer).
WINOGRAD_SAVING = 2.25
FP32_BYTES = 4
# The zoo's Megatron-style linears (models.zoo.gpt_model labels) by how tensor parallelism
# splits them: a column-parallel one reads the whole input (gathered under sequence
# parallelism, replicated without) and writes 1/t of the output; a row-parallel one reads 1/t
# of the input and writes the whole output (a partial sum, reduced after it).
COLUMN_PARALLEL = ("attn.c_attn", "mlp.c_fc")
ROW_PARALLEL = ("attn.c_proj", "mlp.c_proj")


def op_work(compute: CalibratedCompute, op: Op, batch: float, backward: bool) -> Work:
    """GPU seconds and kernels of ``op`` on ``batch`` samples (see the module docstring)."""
    gpu, precision = compute.gpu, compute.precision
    key = KEY[precision]
    if key == "fp4":  # no generic FP4 op: NVFP4 linears are the job planner's recipe alone
        raise ConfigError("fp4 prices Transformer Engine's NVFP4 linears in the job planner "
                          "only (dlsched plan --precision fp8 --fp8-recipe nvfp4); accepted "
                          "here: fp32, tf32, bf16, fp16, fp8", "precision")
    half = key in ("bf16", "fp8")
    tp = compute.tensor_parallel
    share = 1.0 / tp if op.split or compute.sequence_parallel else 1.0
    scale = BACKWARD_FACTOR if backward else 1.0
    launches = op.launches_backward if backward else op.kernels
    upcast = half and (op.upcast or (op.fp32 and compute.autocast))
    element = FP32_BYTES if upcast else ELEMENT_BYTES[precision]
    rate = gpu.memory_rate
    if op.kind == "elementwise":
        elements = op.elements * scale
        if backward and op.backward_elements is not None:
            elements = op.backward_elements
        moved = (elements * batch * share * element
                 + scale * op.weights * (FP32_BYTES if compute.autocast else element))
        flops = scale * op.flops * batch * share
        return Work(max(moved / rate, flops / gpu.kind_rate("elementwise", precision)),
                    launches)
    weights = op.weights / tp if op.split else op.weights
    seconds = product_seconds(compute, op, batch, backward)
    te_gemm = key == "fp8" and op.kind == "gemm" and bool(op.shape) and bool(weights)
    cast = 0.0  # bytes moved by casts, per pass (the backward's twice)
    if half and compute.autocast and weights and not te_gemm:
        cast += weights * CAST_BYTES
        launches += 1
    if op.cast_input and half and compute.autocast:
        cast += _input_elements(op) * batch * share * CAST_BYTES
        launches += 1
    if op.kind == "conv" and half and not compute.channels_last:
        c_in, c_out, _, side_in, side_out = op.shape
        converted = 2 * ELEMENT_BYTES[precision] * (c_in * side_in ** 2
                                                    + c_out * side_out ** 2) * batch
        seconds += scale * converted / (gpu.spec.memory_bandwidth
                                        * gpu.spec.transpose_efficiency)
    seconds += scale * cast / rate
    if te_gemm:
        m, n, k, _ = op.shape
        quantized = m * n * batch * share if backward else m * k * batch * share + weights
        seconds += quantized * FP8_CAST_BYTES / rate
        launches += 1 if backward else 2
    return Work(seconds, launches)


def product_seconds(compute: CalibratedCompute, op: Op, batch: float, backward: bool) -> float:
    """Seconds of a product's (GEMM or convolution) kernels alone on ``batch`` samples, forward
    or ``backward``: its arithmetic at its shapes' rate, at least its operands' and result's
    bytes at the memory rate (a TP linear's whole side counted whole: ``COLUMN_PARALLEL``,
    ``ROW_PARALLEL``); no casts or layout conversions (``op_work`` adds those)."""
    precision = compute.precision
    tp = compute.tensor_parallel
    share, weights = _tp_share(compute, op)
    operand = OPERAND_BYTES[precision] if op.kind == "gemm" else ELEMENT_BYTES[precision]
    elements = op.elements * share
    if op.kind == "gemm" and op.split and tp > 1 and op.shape:
        tokens, fan_out, fan_in, _ = op.shape  # one side of a TP linear is whole on each rank
        if op.label.endswith(COLUMN_PARALLEL):
            elements = tokens * (fan_in + fan_out / tp)
        elif op.label.endswith(ROW_PARALLEL):
            elements = tokens * (fan_in / tp + fan_out)
    if precision in LOW_PRECISIONS and op.kind == "gemm" and op.shape:
        moved = fp8_gemm_bytes(op, batch, share, tp, weights, backward, operand)
    else:
        moved = ((BACKWARD_FACTOR if backward else 1.0)
                 * (elements * batch * ELEMENT_BYTES[precision] + weights * operand))
    return max(_compute_seconds(compute, op, batch * share, backward),
               moved / compute.gpu.memory_rate)


def _tp_share(compute: CalibratedCompute, op: Op) -> tuple[float, float]:
    """The share of the op's samples one GPU of its TP group computes (1 / tp when the op is
    split or sequence-parallel) and the weights it holds (split by TP when the op is)."""
    tp = compute.tensor_parallel
    share = 1.0 / tp if op.split or compute.sequence_parallel else 1.0
    return share, op.weights / tp if op.split else op.weights


def fp8_gemm_bytes(op: Op, batch: float, share: float, tp: int, weights: float,
                   backward: bool, operand: float = 1.0) -> float:
    """Bytes an FP8 linear's GEMMs read and write on ``batch`` samples, forward or
    ``backward``: FP8 operands (``operand``, 1 byte; NVFP4's 0.5 + 1/16 with its block
    scales) in, 16-bit results (2 bytes) out. Forward: ``X`` and ``W`` read, ``Y`` (2)
    written; backward: the data gradient reads ``G`` and ``W`` and writes ``dX`` (2), the
    weight gradient reads ``X`` and ``G`` and writes ``dW`` (2): in FP8 3 bytes per input, 2
    per output and 3 per weight element. (torchao's ``_scaled_mm`` / Transformer Engine's
    ``cublasLt`` FP8 GEMMs take both operands in FP8 and write bf16: torchao
    ``float8/float8_ops.py`` ``float8_mm``, ``out_dtype`` the linear's bf16; TE
    ``general_gemm``.) The sides of a TP linear as ``product_seconds``."""
    x, y = _linear_elements(op, batch, share, tp)
    if backward:
        return (operand + 2) * x + 2 * operand * y + (operand + 2) * weights
    return operand * x + 2 * y + operand * weights


def _linear_elements(op: Op, batch: float, share: float, tp: int) -> tuple[float, float]:
    """Elements of a linear's input ``X`` and output ``Y`` on one GPU for ``batch`` samples
    (the sides of a TP linear as ``product_seconds``)."""
    m, n, k, _ = op.shape
    x_elements = y_elements = share
    if op.split and tp > 1:
        if op.label.endswith(COLUMN_PARALLEL):
            x_elements, y_elements = 1.0, 1.0 / tp
        elif op.label.endswith(ROW_PARALLEL):
            x_elements, y_elements = 1.0 / tp, 1.0
    return m * k * x_elements * batch, m * n * y_elements * batch


def mixed_backward_seconds(fp8: CalibratedCompute, bf16: CalibratedCompute, op: Op,
                           batch: float) -> float:
    """Seconds of a linear's two backward GEMMs on ``batch`` samples when only the data
    gradient runs in FP8 (torchao's ``rowwise_with_gw_hp``, ``job.compute.fp8``): the data
    gradient at ``fp8``'s rate, reading ``G`` and ``W`` in 1 byte and writing ``dX`` in 2; the
    weight gradient at ``bf16``'s, reading ``X`` and ``G`` and writing ``dW``, 2 bytes each.
    Each GEMM is its arithmetic at its own shape's utilization (``_gemm_shapes``: the data
    gradient first) or its bytes at the memory rate, whichever is longer; the sides of a TP
    linear as ``product_seconds``."""
    tp = fp8.tensor_parallel
    share, weights = _tp_share(fp8, op)
    x, y = _linear_elements(op, batch, share, tp)
    flops = op.flops * batch * share
    data_shape, weight_shape = _gemm_shapes(fp8, op, batch * share, True)
    sms = fp8.gpu.spec.sms
    data = max(flops / (fp8.gpu.kind_rate("gemm", fp8.precision)
                        * gemm_utilization(*data_shape, sms)),
               (y + weights + 2 * x) / fp8.gpu.memory_rate)
    weight = max(flops / (bf16.gpu.kind_rate("gemm", bf16.precision)
                          * gemm_utilization(*weight_shape, sms)),
                 2 * (x + y + weights) / bf16.gpu.memory_rate)
    return data + weight


def _input_elements(op: Op) -> float:
    """Input elements per sample of a product (M x K of its GEMM, or the conv's input)."""
    if op.kind == "conv":
        return op.shape[0] * op.shape[3] ** 2
    m, _, k, groups = op.shape
    return m * k * max(groups, 1)


def _compute_seconds(compute: CalibratedCompute, op: Op, samples: float,
                     backward: bool) -> float:
    """Seconds of the op's arithmetic at its kind's rate and its shapes' utilization."""
    gpu, precision = compute.gpu, compute.precision
    flops = op.flops * samples
    if not flops:
        return 0.0
    rate = gpu.kind_rate(op.kind, precision)
    sms = gpu.spec.sms
    if op.kind in ATTENTION_KINDS:
        kernel = gpu.spec.fused_attention_kernel
        if op.kind == "fused_attention" and op.shape and kernel is not None:
            return fused_attention_seconds(op, samples, rate, sms, kernel, backward)
        queries, _, heads, causal = op.shape or (1, 1, 1, 0)
        problems = max(1, round(samples * heads))  # samples: this GPU's share of the batch
        util = attention_utilization(queries, problems, sms) if op.shape else 1.0
        executed = flops * op.executed * (0.5 if causal else 1.0)
        return executed * (ATTENTION_BACKWARD if backward else 1.0) / (rate * util)
    if op.kind == "conv" and KEY[precision] == "fp32" and _winograd(op):
        flops /= WINOGRAD_SAVING
    shapes = _gemm_shapes(compute, op, samples, backward)
    if not shapes:
        return BACKWARD_FACTOR * flops / rate if backward else flops / rate
    return sum(flops / (rate * gemm_utilization(*shape, sms)) for shape in shapes)


def _winograd(op: Op) -> bool:
    """A 3x3 stride-1 convolution, which cuDNN runs by Winograd's algorithm in FP32."""
    return op.shape[2] == 3 and op.shape[3] == op.shape[4]


def _gemm_shapes(compute: CalibratedCompute, op: Op, samples: float,
                 backward: bool) -> list[tuple[int, int, int, int]]:
    """The (M, N, K, groups) of the GEMMs the op runs: one forward, two backward (each
    doing the forward's FLOP)."""
    if not op.shape:
        return []
    tp = compute.tensor_parallel if op.split else 1
    batch = max(1, round(samples * (tp if op.split and tp > 1 else 1)))
    if op.kind == "conv":
        c_in, c_out, kernel, side_in, side_out = op.shape
        c_out = max(1, math.ceil(c_out / tp))
        taps = c_in * kernel * kernel
        forward = (batch * side_out * side_out, c_out, taps, 1)
        if not backward:
            return [forward]
        data = [(batch * side_in * side_in, c_in, c_out * kernel * kernel, 1)]
        return data * op.input_grad + [(c_out, taps, batch * side_out * side_out, 1)]
    m, n, k, groups = op.shape
    if groups:
        groups = max(1, math.ceil(groups / tp)) * batch
    else:
        m, n, groups = m * batch, max(1, math.ceil(n / tp)), 1
    if not backward:
        return [(m, n, k, groups)]
    return [(m, k, n, groups), (n, k, m, groups)]
