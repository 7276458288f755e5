"""How well the experts' grouped GEMMs use a GPU at the tokens each expert gets.

An MoE layer's experts run as one grouped GEMM per projection (Megatron-Core's
``--moe-grouped-gemm``; ``job.compute.moe_costs``): ``experts / ep`` problems of ``M x N x K``
with ``M`` the tokens routed to each local expert, ``M = T e k L / (experts / ep)`` (``T`` the
rank's tokens, ``e`` the expert-TP degree, ``k`` the top-k, ``L`` the load factor). Fine-grained
experts (many, narrow, top-k large: DeepSeek-V3's 256 of width 2048, GPT-OSS's 128 of 2880)
give each expert few tokens, and a small ``M`` costs twice:

* **tile quantization**: cuBLAS/CUTLASS tile each problem's output in 64- to 256-row tiles and
  a partial tile costs a whole one, so ``M`` just above a tile multiple wastes most of a tile;
  the grouped problems share the waves over the SMs (``models.kernels.gemm_utilization``:
  NVIDIA's *Matrix Multiplication Background User's Guide*, DU-09799-001, §2.3 and §3, the
  GPU preset's SM count);
* **weight traffic**: each local expert's ``K x N`` weights are read once per pass whatever its
  ``M``, so below an arithmetic intensity of the GPU's FLOP/byte ratio the GEMM is bound by
  memory (``models.pricing.product_seconds``: the larger of the FLOP at the shape's rate and the
  bytes at the preset's memory rate).

No new constant: both are the calibrated GPU model's (``presets/gpus.yaml``: the large-GEMM
fraction of peak and the memory rate, each with its source). ``expert_gemm`` reports the two
factors for a layout, and the fraction of the GPU's peak the grouped GEMMs reach, beside what
the same FLOP would reach as one dense GEMM of all the rank's routed tokens through one
expert-sized weight matrix (the ideal of perfectly batched experts: no tile wasted per expert,
one matrix read).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dlsched.job.compute.layer_costs import gpu_compute
from dlsched.job.compute.moe_costs import routed_ops
from dlsched.job.execution import Execution
from dlsched.job.model_spec import Model
from dlsched.models.kernels import gemm_utilization


@dataclass(frozen=True)
class ExpertGemm:
    """The experts' grouped GEMMs on one GPU (module docstring): ``tokens_per_expert`` (M),
    ``local_experts``, the tile-and-wave ``utilization`` of the forward fc1 and fc2 problems,
    the fraction of the GPU's peak their forward reaches (``achieved``, memory bound included)
    and what the same FLOP reach as one dense GEMM of all the routed tokens through one
    expert-sized matrix (``dense``)."""

    tokens_per_expert: int
    local_experts: int
    utilization: tuple[float, float]
    achieved: float
    dense: float


def expert_gemm(spec: Model, layout: Execution, gpu: str,
                precision: str = "bf16") -> ExpertGemm:
    """The experts' grouped GEMMs of ``spec`` under ``layout`` on ``gpu`` (``ExpertGemm``)."""
    _, experts, _ = routed_ops(spec, layout.microbatch_size, layout.tp, layout.ep, layout.cp,
                               layout.etp)
    gemms = [op for op in experts if op.kind == "gemm"]
    compute = gpu_compute(gpu, precision)  # the routed ops are per GPU already
    sms = compute.gpu.spec.sms
    flops = sum(op.flops for op in gemms)
    seconds = sum(compute.work(op, 1).gpu_s for op in gemms)
    merged = [replace(op, shape=(op.shape[0] * op.shape[3], op.shape[1], op.shape[2], 0),
                      weights=op.weights / op.shape[3])
              for op in gemms]  # all the routed tokens through one expert-sized matrix
    dense_s = sum(compute.work(op, 1).gpu_s for op in merged)
    peak = compute.peak_flops
    return ExpertGemm(gemms[0].shape[0], gemms[0].shape[3],
                      tuple(gemm_utilization(*op.shape, sms) for op in gemms),  # type: ignore[arg-type]
                      flops / (seconds * peak), flops / (dense_s * peak))
