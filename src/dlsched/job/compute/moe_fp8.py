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
gradient (``G M N``). One cast kernel per operand for the whole group (TE's
``tex.split_quantize`` quantizes the ``G`` splits in one launch).

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


def expert_operands(op: Op) -> tuple[float, float, float]:
    """Elements of the routed tokens, the weights and the output gradient of grouped expert
    GEMM ``op`` (shape ``(M, N, K, G)``): ``G M K``, ``G N K``, ``G M N``."""
    m, n, k, groups = op.shape
    return groups * m * k, groups * n * k, groups * m * n


def expert_fp8_work(op: Op, fp8: CalibratedCompute, recipe: str, backward: bool,
                    microbatches: int) -> Work:
    """GPU seconds and kernels of grouped expert GEMM ``op`` in FP8 (module docstring): its
    products on ``fp8`` (the GPU in fp8) and its casts at the memory rate."""
    x, w, g = expert_operands(op)
    if backward:
        moved, casts = g * _tensor(recipe, False).bytes_per_element, 1.0
    else:
        moved = (x * _tensor(recipe, False).bytes_per_element
                 + w * _weight(recipe, 1).bytes_per_element / microbatches)
        casts = 1.0 + 1.0 / microbatches
    launches = (op.launches_backward if backward else op.kernels) + casts
    return Work(product_seconds(fp8, op, 1.0, backward) + moved / fp8.gpu.memory_rate,
                launches)


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
                  options: KernelOptions | None, backward: bool) -> float:
    """Seconds of ``layer`` run on its own, from an idle host, as
    ``CalibratedCompute.forward_time`` / ``backward_time`` price it (the backward's ops in
    reverse order), with FP8 linears and experts when ``options`` name a recipe."""
    if options is None or options.fp8_recipe is None:
        return (compute.backward_time(layer, batch) if backward
                else compute.forward_time(layer, batch))
    spec = compute.gpu.spec
    overhead = spec.backward_overhead if backward else spec.kernel_overhead
    works = moe_ops_works(layer.ops, batch, compute, options, backward)
    return alone(works[::-1] if backward else works, overhead)  # the backward in reverse
