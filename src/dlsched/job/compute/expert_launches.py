"""The host time of the experts' grouped GEMMs as Transformer Engine launches them: one cuBLASLt
GEMM per local expert.

Megatron-Core's ``TEGroupedMLP`` (``--moe-grouped-gemm`` with Transformer Engine, what every
Megatron-Bridge MoE recipe runs) computes fc1 and fc2 with TE's ``GroupedLinear``, whose GEMM is
``general_grouped_gemm``: a loop that launches one cuBLASLt GEMM per group on a pool of CUDA
streams (TransformerEngine PR #853, "Grouped GEMM via multi-stream cuBLAS", the only path of
``GroupedLinear`` in the 25.11-26.04 containers; TE issue #1386: the maintainers kept the
multi-stream cuBLASLt loop over cuBLAS's grouped GEMM and CUTLASS; the single-launch CUTLASS
and cuBLAS grouped paths of TE PRs #2360, #2669 and #3134 are opt-in, behind environment
variables no Megatron-Bridge performance script sets). So a grouped GEMM of ``G`` local experts
is ``G`` launches in the forward and ``2 G`` in the backward (each expert's input gradient and
weight gradient, the backward's two grouped calls).

**Per-launch cost** ``EXPERT_GEMM_LAUNCH_S``: TransformerEngine PR #3134 (cael-ling,
2026-06-17) times TE's ``nvte_multi_tensor_gemm`` multi-stream path on SM100 (Blackwell),
``benchmarks/linear/benchmark_grouped_linear.py``, kernel against kernel ("pure": operands
pre-swizzled, scales precomputed): 8 experts of 128 tokens, N = K = 2048, 0.267 ms, against
0.069 ms for one CUTLASS launch of the same eight products. The eight products' GPU work is at
most the single launch's 0.069 ms, so at least 0.198 ms of the 0.267 is the loop's launches:
0.267 / 8 = 33.4 us per expert GEMM is the mean the multi-stream call costs per expert (the
call's fixed part included). It is priced as host time on the evaluator's timeline
(``models.timeline``): the GPU waits for it only where the experts' products are shorter, i.e.
at few tokens per expert; large microbatches hide it behind the GEMMs. Measured on Blackwell
with NVFP4 operands; the same loop launches MXFP8, FP8 and BF16 GEMMs (PR #853), and the
figure is used for every GPU (the host CPU of a DGX H100 or B200 or a GB200's Grace is not
separated: assumed, unvalidated beyond the ledger's rows).

The timeline (``routed_seconds``) runs each op's launches at its own host cost: the expert
GEMMs' ``G`` (forward) or ``2 G`` (backward) launches at ``EXPERT_GEMM_LAUNCH_S`` each, their
FP8 operand casts before them (``job.compute.moe_fp8.expert_fp8_parts``: one kernel per expert
and operand, three under current scaling, as Transformer Engine's ``split_quantize`` launches
them from C++) at the preset's ``backward_overhead`` (the per-launch cost of kernels launched
from C++ with no Python between them), every other op's at the GPU preset's per-launch host
time (``kernel_overhead`` forward, ``backward_overhead`` backward, measured for eager PyTorch's
modules).
"""

from __future__ import annotations

from dataclasses import replace

from dlsched.job.compute.block_pricing import KernelOptions
from dlsched.job.compute.moe_fp8 import EXPERT_GEMMS, expert_fp8_parts, moe_ops_works
from dlsched.job.compute.moe_host import GRAPH_LAUNCHES
from dlsched.models.compute import CalibratedCompute
from dlsched.models.layer import Layer
from dlsched.models.ops import Op
from dlsched.models.timeline import Clock, Work

EXPERT_GEMM_LAUNCH_S = 0.267e-3 / 8  # s per expert GEMM launched, TE PR #3134 (docstring)


def expert_launch_ops(ops: tuple[Op, ...], local_experts: int) -> tuple[Op, ...]:
    """``ops`` with each grouped expert GEMM launching one GEMM per local expert (module
    docstring): ``local_experts`` launches forward, twice that backward; other ops unchanged."""
    if local_experts < 1:
        raise ValueError(f"local_experts: must be >= 1 (got {local_experts})")
    return tuple(replace(op, kernels=float(local_experts),
                         backward_kernels=2.0 * local_experts)
                 if op.label in EXPERT_GEMMS else op for op in ops)


def routed_seconds(layer: Layer, compute: CalibratedCompute, options: KernelOptions | None,
                   backward: bool, captured: frozenset[str] = frozenset()) -> float:
    """Seconds of the routed ops of ``layer`` (one GPU's share, batch 1) run on their own from
    an idle host (``models.timeline``), forward or ``backward`` (the ops in reverse), FP8
    kernels when ``options`` name a recipe (``job.compute.moe_fp8``), each op's launches at its
    own host cost (module docstring); the ops labelled in ``captured`` run in a CUDA graph
    (``job.compute.moe_host``): no host cost per launch, one graph launch before the ops."""
    spec = compute.gpu.spec
    base = spec.backward_overhead if backward else spec.kernel_overhead
    if options is not None and options.fp8_recipe is not None:
        works = moe_ops_works(layer.ops, 1, compute, options, backward)
    else:
        works = [compute.work(op, 1, backward) for op in layer.ops]
    costs = [0.0 if op.label in captured else EXPERT_GEMM_LAUNCH_S
             if op.label in EXPERT_GEMMS else base for op in layer.ops]
    order = []
    for op, work, cost in zip(layer.ops, works, costs, strict=True):
        if op.label in EXPERT_GEMMS and options is not None and options.fp8_recipe is not None:
            fp8 = replace(compute, precision="fp8", autocast=False)  # casts, then the products
            casts, products = expert_fp8_parts(op, fp8, options.fp8_recipe, backward,
                                               options.microbatches)
            cast_cost = 0.0 if op.label in captured else spec.backward_overhead  # from C++
            order += [(casts, cast_cost), (products, cost)]
        else:
            order.append((work, cost))
    if any(op.label in captured for op in layer.ops):  # the graph's launch, before its ops
        order = [(Work(0.0, GRAPH_LAUNCHES), base), *order] if not backward else \
            [*order, (Work(0.0, GRAPH_LAUNCHES), base)]
    clock = Clock()
    return sum(clock.run(work, cost) for work, cost in (order[::-1] if backward else order))
