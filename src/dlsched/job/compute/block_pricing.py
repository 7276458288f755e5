"""A block's kernels as the job runs them: the zoo's ops on the calibrated GPU, their four
linear layers in FP8 (``job.compute.fp8``), their memory-bound ops as eager PyTorch runs
TorchTitan's modules (``ops`` ``eager``: ``job.compute.eager_ops``, Inductor's groups of them
when compiled) or, with the zoo's fused kernels, fused further by torch.compile
(``job.compute.compile_fusion``) when the job says so.

Each block (consecutive layers sharing ``Layer.block``: the embedding, a transformer layer, the
head) is priced as ``CalibratedCompute.repeated_time`` prices it: one of a stage's blocks back
to back, the larger of the GPU's seconds and the host's launch seconds. Without FP8 or compile
the zoo's own pricing runs unchanged (``pipeline.chains.calibrated_chain.block_seconds``).
A layer's fully recomputed forward and its backward run as one such timeline
(``recompute_overlap_s``: what the pair saves over pricing its halves apart), and a layer's
blocking TP collectives fill the GPU's wait for the host (``hidden_collectives_s``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import groupby

import numpy as np

from dlsched.errors import ConfigError
from dlsched.job.compute.compile_fusion import compiled_ops
from dlsched.job.compute.eager_ops import torch_ops
from dlsched.job.compute.fp8 import (
    TE_RECIPES,
    check_fp8,
    fp8_gemm_seconds,
    fp8_linear_work,
    is_fp8_linear,
)
from dlsched.job.model_spec import Model
from dlsched.models.compute import CalibratedCompute, calibrated
from dlsched.models.ops import Op
from dlsched.models.timeline import Work
from dlsched.models.zoo import TransformerModel
from dlsched.pipeline.chains.calibrated_chain import block_seconds


@dataclass(frozen=True)
class KernelOptions:
    """How the job's kernels run: ``fp8_recipe`` (None: 16-bit linears), ``compiled``
    (torch.compile), the iteration's ``microbatches`` (Transformer Engine casts a weight once per
    iteration) and ``weight_shards`` (torchao's FP8 all-gather casts the weight on its FSDP
    shard of that many ranks; 1 otherwise) and ``ops``: the memory-bound ops as the zoo's
    fused kernels (``fused``: Megatron-Core / Transformer Engine) or as eager PyTorch runs
    TorchTitan's modules (``eager``, ``job.compute.eager_ops``)."""

    fp8_recipe: str | None = None
    compiled: bool = False
    microbatches: int = 1
    weight_shards: int = 1
    ops: str = "fused"
    accumulation_launches: bool = False
    """Whether each backward launches one add per parameter tensor (``grad_accumulation``
    ``separate``: PyTorch's ``AccumulateGrad`` ``grad += new`` or Megatron's hook
    ``main_grad.add_(grad)``, ``job.compute.grad_accumulation``) among its kernels, at the
    backward's launch cost (``layer_halves``)."""

    @property
    def eager_16bit(self) -> bool:
        """Whether the zoo's own pricing applies (no FP8, no compile, the zoo's fused ops)."""
        return self.fp8_recipe is None and not self.compiled and self.ops == "fused"


def kernel_options(fp8_recipe: str | None, compiled: bool, microbatches: int,
                   shards: int, ops: str = "fused",
                   accumulation_launches: bool = False) -> KernelOptions:
    """The options of a job's kernels, keeping only what changes a price (the microbatches
    for Transformer Engine's cached weights, the shards for tensorwise's FP8 all-gather), so
    that equal prices share one cache entry."""
    return KernelOptions(fp8_recipe, compiled,
                         microbatches if fp8_recipe in TE_RECIPES else 1,
                         shards if fp8_recipe == "tensorwise" else 1, ops, accumulation_launches)


def check_kernel_options(precision: str, fp8_recipe: str | None, gpu: str, moe: bool,
                         fp8_all_gather: bool, compiled: bool, async_tp: bool) -> None:
    """ConfigError naming the option when the kernels cannot run so: the FP8 recipe on this
    GPU (``job.compute.fp8.check_fp8``), the FSDP float8 all-gather without torchao's
    tensorwise recipe (TorchTitan's ``enable_fsdp_float8_all_gather`` supports only it), async
    TP without torch.compile (TorchTitan refuses it: the micro-pipeline pass is Inductor's)."""
    spec = calibrated(gpu, "bf16").gpu.spec
    recipe = check_fp8(precision, fp8_recipe, spec.name, spec.peak, moe)
    if fp8_all_gather and recipe != "tensorwise":
        raise ConfigError(f"needs --precision fp8 --fp8-recipe tensorwise "
                          f"(torchao's FSDP float8 all-gather; got {recipe or precision})",
                          "fp8_all_gather")
    if async_tp and not compiled:
        raise ConfigError("needs --compile (the micro-pipeline TP pass is "
                          "torch.compile's)", "async_tp")


def ops_works(ops: Sequence[Op], microbatch_size: int, compute: CalibratedCompute,
              options: KernelOptions, backward: bool) -> list[Work]:
    """Each op's GPU seconds and launches (an FP8 linear as ``job.compute.fp8`` prices it)."""
    fp8 = replace(compute, precision="fp8", autocast=False) if options.fp8_recipe else None
    gated = any("swiglu" in op.label for op in ops)  # the block's FFN is gated (SwiGLU)
    works = []
    for op in ops:
        if fp8 is not None and options.fp8_recipe and is_fp8_linear(op):
            works.append(fp8_linear_work(op, microbatch_size, fp8, options.fp8_recipe, backward,
                                         options.compiled, options.microbatches,
                                         options.weight_shards, gated))
        else:
            works.append(compute.work(op, microbatch_size, backward))
    return works


def gemm_seconds(op: Op, microbatch_size: int, compute: CalibratedCompute,
                 options: KernelOptions, backward: bool) -> float:
    """Seconds of ``op``'s GEMM kernels alone on one microbatch, forward or ``backward``: an
    FP8 linear's at the FP8 rate without its casts (``job.compute.fp8``), which run once per
    linear outside the pieces of a decomposed collective matmul (torchao casts the input
    before the all-gather or the matmul and the weight once; ``job.communication.async_tp``),
    any other op as ``ops_works`` prices it."""
    if options.fp8_recipe and is_fp8_linear(op):
        fp8 = replace(compute, precision="fp8", autocast=False)
        return fp8_gemm_seconds(op, microbatch_size, fp8, options.fp8_recipe, backward)
    return ops_works((op,), microbatch_size, compute, options, backward)[0].gpu_s


def ops_seconds(ops: Sequence[Op], microbatch_size: int, compute: CalibratedCompute,
                options: KernelOptions, backward: bool) -> float:
    """Seconds of ``ops`` run back to back (module docstring), forward or ``backward``."""
    works = ops_works(ops, microbatch_size, compute, options, backward)
    spec = compute.gpu.spec
    overhead = spec.backward_overhead if backward else spec.kernel_overhead
    return max(sum(work.gpu_s for work in works),
               sum(work.launches for work in works) * overhead)


def block_ops(model: TransformerModel, compiled: bool, ops_kind: str = "fused",
              spec: Model | None = None) -> list[tuple[str, tuple[Op, ...]]]:
    """Each block's name and ops, in order, as the job runs them (``ops_kind`` eager:
    TorchTitan's modules of ``spec``, compiled or not; else compiled: fused)."""
    blocks = []
    for name, group in groupby(model.layers, key=lambda layer: layer.block or layer.name):
        ops = tuple(op for layer in group for op in layer.ops)
        if ops_kind == "eager":
            if spec is None:
                raise ValueError("block_ops: eager ops need the model's spec")
            ops = torch_ops(ops, spec, compiled, cyclic=name.startswith("h."))
            if compiled:  # the loss: compile_fusion's
                ops = tuple(compiled_ops((op,), False)[0] if op.label == "cross-entropy" else op
                            for op in ops)
        elif compiled:
            ops = compiled_ops(ops, cyclic=name.startswith("h."))
        blocks.append((name, ops))
    return blocks


def priced_blocks(model: TransformerModel, microbatch_size: int, compute: CalibratedCompute,
                  options: KernelOptions,
                  spec: Model | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per block: forward and backward seconds of one microbatch (module docstring; ``spec``:
    the model's, for eager ops)."""
    if options.eager_16bit:
        return block_seconds(model, microbatch_size, compute)
    blocks = block_ops(model, options.compiled, options.ops, spec)
    forward = [ops_seconds(ops, microbatch_size, compute, options, False) for _, ops in blocks]
    backward = [ops_seconds(ops, microbatch_size, compute, options, True) for _, ops in blocks]
    return np.array(forward), np.array(backward)



@dataclass(frozen=True)
class LayerWork:
    """One microbatch through a block's forward and its backward (``layer_work``): GPU seconds
    and kernels launched of each, the gradient adds its backward launches with
    ``KernelOptions.accumulation_launches`` and the preset's forward and backward seconds a
    launch. Priced once per ``block_costs`` call and read by each of its terms."""

    gpu_f: float
    launches_f: float
    gpu_b: float
    launches_b: float
    adds: int
    kernel_overhead: float
    backward_overhead: float

    def halves(self, accumulation_launches: bool) -> tuple[float, float, float, float]:
        """GPU and host seconds (gpu_f, host_f, gpu_b, host_b): the host's are the launches
        at the forward's and the backward's launch cost, the backward's with one gradient
        add per parameter tensor when ``accumulation_launches``."""
        launches_b = self.launches_b + (self.adds if accumulation_launches else 0)
        return (self.gpu_f, self.launches_f * self.kernel_overhead, self.gpu_b,
                launches_b * self.backward_overhead)


def layer_work(model: TransformerModel, microbatch_size: int, compute: CalibratedCompute,
               options: KernelOptions, spec: Model | None = None,
               block: str = "h.0") -> LayerWork:
    """``block``'s forward and backward kernels (``LayerWork``): their GPU seconds and
    launches, and its gradient adds, one per parameter tensor (the zoo's layers with
    parameters: 12 in a GPT layer with biases and LayerNorm). Their GPU time is the
    accumulation pass (``job.compute.grad_accumulation``), priced apart."""
    ops = dict(block_ops(model, options.compiled, options.ops, spec))[block]
    gpu = compute.gpu.spec
    adds = sum(1 for layer in model.layers if layer.block == block and layer.params > 0)
    forward, backward = (ops_works(ops, microbatch_size, compute, options, back)
                         for back in (False, True))
    return LayerWork(sum(w.gpu_s for w in forward), sum(w.launches for w in forward),
                     sum(w.gpu_s for w in backward), sum(w.launches for w in backward), adds,
                     gpu.kernel_overhead, gpu.backward_overhead)


def layer_halves(model: TransformerModel, microbatch_size: int, compute: CalibratedCompute,
                 options: KernelOptions, spec: Model | None = None,
                 block: str = "h.0") -> tuple[float, float, float, float]:
    """GPU and host seconds of one microbatch through ``block``'s forward and its backward:
    (gpu_f, host_f, gpu_b, host_b) (``LayerWork.halves``; the backward's launches with its
    gradient adds under ``options.accumulation_launches``)."""
    return layer_work(model, microbatch_size, compute, options, spec,
                      block).halves(options.accumulation_launches)


def accumulation_launch_s(work: LayerWork) -> float:
    """Seconds the gradient adds' launches (``LayerWork``: with
    ``KernelOptions.accumulation_launches``) add to the block's backward priced as the larger
    of its GPU and host seconds: nothing while the GPU sets the pace, all of them once the
    host does."""
    _, _, gpu_b, host_b = work.halves(True)
    return max(gpu_b, host_b) - max(*work.halves(False)[2:])


def recompute_overlap_s(halves: tuple[float, float, float, float]) -> float:
    """Seconds the full recomputation's launches hide under the backward's GPU work in one
    transformer layer of one microbatch: what pricing the recomputed forward and the backward
    as one timeline saves over adding their two prices (``halves``: ``layer_halves``'
    (gpu_f, host_f, gpu_b, host_b), the backward's with its gradient adds).

    Megatron's full recomputation (``tensor_parallel.checkpoint``, one layer per checkpoint)
    reruns a layer's forward inside its checkpoint's backward and then runs that layer's
    backward; nothing between them waits on the GPU, so the host launches the recomputed
    forward's kernels (the forward's per-launch cost: Python modules under autograd) and the
    backward's (the autograd engine's) one after another while the GPU runs them in order,
    and a stage's layers repeat this back to back. The pace of the pair is the larger of the
    two summed: max(gpu_f + gpu_b, host_f + host_b) (``models.timeline``'s steady state, per
    kernel: the GPU idles only where the host's launches fall behind), not max(gpu_f, host_f)
    + max(gpu_b, host_b). The difference is zero when both halves are bound the same way
    (both by the GPU: large layers; both by the host) and positive when a host-bound forward
    meets a GPU-bound backward. Seconds (>= 0)."""
    gpu_f, host_f, gpu_b, host_b = halves
    return (max(gpu_f, host_f) + max(gpu_b, host_b)) - max(gpu_f + gpu_b, host_f + host_b)


def hidden_collectives_s(halves: tuple[float, float, float, float], tp_forward: float,
                         tp_backward: float, rerun: bool) -> tuple[float, float]:
    """Seconds of a layer's TP collectives (forward, backward) that run while the GPU would
    otherwise wait for the host's launches: a collective is launched like any kernel and runs
    in stream order (PyTorch's ``all_reduce`` without ``async_op`` makes the compute stream wait
    on NCCL's, not the host), so where the host sets a stretch's pace its collectives fill the
    GPU's idle time: min(collectives, max(0, host - gpu)) of the stretch. ``halves``:
    ``layer_halves``' (gpu_f, host_f, gpu_b, host_b); ``rerun``: the backward stretch holds
    the fully recomputed forward too (``recompute_overlap_s``). Applied to eager 16-bit
    kernels (``KernelOptions.eager_16bit``: Megatron-style runs; compiled and FP8 graphs keep
    their collectives' own pricing). Not modelled: a collective also waits for the slowest
    rank of its group to launch it."""
    gpu_f, host_f, gpu_b, host_b = halves
    slack_b = host_b - gpu_b + (host_f - gpu_f if rerun else 0.0)
    return min(tp_forward, max(0.0, host_f - gpu_f)), min(tp_backward, max(0.0, slack_b))
