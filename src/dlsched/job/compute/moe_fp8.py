"""An MoE layer's kernels in FP8: the attention's linears as ``job.compute.fp8`` prices a dense
layer's, and the routed experts' grouped GEMMs in FP8 (Transformer Engine's ``GroupedLinear``
under ``fp8_autocast``, which Megatron-Core's ``TEGroupedMLP`` runs with ``--moe-grouped-gemm``
and ``--fp8-format``: every local expert's fc1 and fc2 quantized with the run's recipe).

**Expert GEMMs** (``EXPERT_GEMMS``, the ops ``job.moe_costs.routed_ops`` builds, shape
``(M, N, K, G)``: ``G`` local experts of ``M`` tokens each, already one GPU's share): the
products at the GPU's FP8 GEMM rate at their shapes (``models.pricing.product_seconds`` on the
GPU in fp8: the same utilization curve the 16-bit grouped GEMM gets), and the casts of their
operands as memory traffic at the GPU's memory rate, per element with the recipe's bytes
(``job.compute.fp8``: ``delayed`` 4, ``current`` 6, ``mxfp8`` 2 + 2 x 33/32 for an activation
or a gradient, the weight the same and cached over the iteration's microbatches, as TE's
``is_first_microbatch`` caches a ``GroupedLinear``'s FP8 weights): the forward casts the
routed tokens ``X`` (``G M K``) and the weights ``W`` (``G N K``), the backward the output
gradient (``G M N``). Kernels: TE's ``tex.split_quantize`` (v2.12,
``pytorch/csrc/extensions/cast.cpp``, which ``GroupedLinear`` calls on its input in the forward
and its output gradient in the backward) runs one fused ``nvte_multi_cast_transpose`` over the
``G`` splits only for delayed scaling's quantizers; for current scaling and MXFP8
(``multi_tensor_quantize_impl``: "Quantize kernels individually") each split's quantizer runs on
its own, ``QUANTIZE_KERNELS`` launches each: ``split_casts``. The weights (``G`` tensors, each
quantized by its own quantizer) cast once per iteration. The casts' launches come from TE's C++
extension, one kernel each with no Python between them: ``job.compute.expert_launches`` prices
them at the preset's per-launch cost of C++-launched kernels (``backward_overhead``), the
grouped GEMMs at the multi-stream loop's measured cost.

**Not FP8** (as Megatron-Core runs them): the router and its top-k (FP32 scores), the
permutation and the All-to-Alls (16-bit tokens: Megatron-Core's dispatchers send BF16 unless
DeepEP's FP8 dispatch is enabled, which the priced recipes do not), the expert activation, the
attention core, norms. Shared experts (``shared-fc1``/``shared-fc2``) are priced 16-bit here
(Megatron-Core runs them in FP8 too; no model the ledger prices in FP8 has them: stated, not
modelled). torchao's recipes (``tensorwise``, ``rowwise``) have no grouped FP8 GEMM in the
published MoE runs; they are refused (``job.compute.fp8.check_fp8``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from dlsched.job.compute.block_pricing import KernelOptions, ops_works
from dlsched.job.compute.fp8 import _tensor, _weight
from dlsched.models.compute import CalibratedCompute
from dlsched.models.layer import Layer
from dlsched.models.ops import Op
from dlsched.models.pricing import product_seconds
from dlsched.models.timeline import Work, alone

EXPERT_GEMMS = ("expert-fc1", "expert-fc2")
QUANTIZE_KERNELS = {"delayed": 1, "current": 3, "mxfp8": 1}
"""Kernels one tensor's quantization launches (TransformerEngine v2.12,
``pytorch/csrc/quantizer.cpp``): current scaling ``nvte_compute_amax_with_config``,
``nvte_compute_scale_from_amax`` and ``nvte_quantize_v2`` (3; no amax all-reduce at TP 1);
MXFP8 and delayed scaling ``nvte_quantize_v2`` (1)."""


def expert_operands(op: Op) -> tuple[float, float, float]:
    """Elements of the routed tokens, the weights and the output gradient of grouped expert
    GEMM ``op`` (shape ``(M, N, K, G)``): ``G M K``, ``G N K``, ``G M N``."""
    m, n, k, groups = op.shape
    return groups * m * k, groups * n * k, groups * m * n


def split_casts(recipe: str, groups: int) -> float:
    """Kernels Transformer Engine launches to quantize one activation operand of a grouped GEMM
    of ``groups`` experts (``tex.split_quantize``, module docstring): one fused kernel for all
    splits under delayed scaling, ``QUANTIZE_KERNELS`` per split otherwise."""
    if recipe not in QUANTIZE_KERNELS:
        raise ValueError(f"recipe: one of {', '.join(QUANTIZE_KERNELS)} (got {recipe})")
    return 1.0 if recipe == "delayed" else float(groups * QUANTIZE_KERNELS[recipe])


def expert_fp8_parts(op: Op, fp8: CalibratedCompute, recipe: str, backward: bool,
                     microbatches: int) -> tuple[Work, Work]:
    """Grouped expert GEMM ``op`` in FP8 (module docstring) as two works: its operands' casts
    (at the memory rate, ``split_casts`` kernels per activation operand and the weights' share
    of the iteration's once-per-expert casts) and its products on ``fp8`` (the GPU in fp8) with
    the grouped GEMM's own launches."""
    x, w, g = expert_operands(op)
    groups = op.shape[3]
    if backward:
        moved, casts = g * _tensor(recipe, False).bytes_per_element, split_casts(recipe, groups)
    else:
        moved = (x * _tensor(recipe, False).bytes_per_element
                 + w * _weight(recipe, 1).bytes_per_element / microbatches)
        casts = (split_casts(recipe, groups)
                 + groups * QUANTIZE_KERNELS[recipe] / microbatches)  # each expert's weight
    return (Work(moved / fp8.gpu.memory_rate, casts),
            Work(product_seconds(fp8, op, 1.0, backward),
                 op.launches_backward if backward else op.kernels))


def expert_fp8_work(op: Op, fp8: CalibratedCompute, recipe: str, backward: bool,
                    microbatches: int) -> Work:
    """GPU seconds and kernels of grouped expert GEMM ``op`` in FP8: ``expert_fp8_parts``
    together."""
    casts, products = expert_fp8_parts(op, fp8, recipe, backward, microbatches)
    return Work(casts.gpu_s + products.gpu_s, casts.launches + products.launches)


def moe_ops_works(ops: Sequence[Op], batch: int, compute: CalibratedCompute,
                  options: KernelOptions, backward: bool) -> list[Work]:
    """Each op's work: grouped expert GEMMs by ``expert_fp8_work``, the attention's linears
    and everything else as ``job.compute.block_pricing.ops_works`` prices a dense block."""
    fp8 = replace(compute, precision="fp8", autocast=False)
    recipe = options.fp8_recipe
    assert recipe is not None
    return [expert_fp8_work(op, fp8, recipe, backward, options.microbatches)
            if op.label in EXPERT_GEMMS else
            ops_works((op,), batch, compute, options, backward)[0] for op in ops]


def layer_seconds(layer: Layer, batch: int, compute: CalibratedCompute,
                  options: KernelOptions | None, backward: bool, graphed: bool = False) -> float:
    """Seconds of ``layer`` run on its own, from an idle host, as
    ``CalibratedCompute.forward_time`` / ``backward_time`` price it (the backward's ops in
    reverse order), with FP8 linears and experts when ``options`` name a recipe; ``graphed``:
    its kernels replayed from a CUDA graph (``job.compute.moe_host``), no host seconds per
    launch (the graph's own launch is counted once, where ``job.compute.expert_launches``
    starts the captured router)."""
    fp8 = options is not None and options.fp8_recipe is not None
    if not fp8 and not graphed:
        return (compute.backward_time(layer, batch) if backward
                else compute.forward_time(layer, batch))
    spec = compute.gpu.spec
    overhead = 0.0 if graphed else spec.backward_overhead if backward else spec.kernel_overhead
    works = (moe_ops_works(layer.ops, batch, compute, options, backward) if fp8 and options
             else [compute.work(op, batch, backward) for op in layer.ops])
    return alone(works[::-1] if backward else works, overhead)  # the backward in reverse
