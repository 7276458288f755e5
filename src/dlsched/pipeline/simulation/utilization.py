"""Model FLOPs utilization (MFU) of a pipeline plan: model FLOP per iteration / (iteration
seconds x the peak FLOP/s of the GPUs it uses).

Model FLOP are forward + backward, 3 x the forward, without recomputation, for every
microbatch (a calibrated chain counts its zoo model's FLOP, not its time-equivalent "FLOP");
the peak is each GPU's datasheet ``peak`` (``Device.peak``), so the MFU is None when a GPU
does not state one.
"""

from __future__ import annotations

from dlsched.pipeline.chains.calibrated_chain import CalibratedChain
from dlsched.pipeline.chains.chain import Chain
from dlsched.pipeline.chains.problem import PipelineProblem
from dlsched.pipeline.plans.plan import PipelinePlan


def forward_flops_per_microbatch(chain: Chain) -> float:
    """Model forward FLOP of one microbatch (no tensor parallelism, no recomputation)."""
    if isinstance(chain, CalibratedChain) and chain.model is not None:
        return chain.samples * sum(layer.forward_flops for layer in chain.model.layers)
    return float(chain.base.forward_flops.sum())


def plan_mfu(problem: PipelineProblem, plan: PipelinePlan, iteration_s: float) -> float | None:
    """MFU of ``plan`` on ``problem`` taking ``iteration_s`` seconds (see the module
    docstring)."""
    if not iteration_s > 0:
        return None
    instance = problem.for_plan(plan)
    peaks = [instance.graph.devices[k].peak for k, order in enumerate(plan.orders) if order]
    if not peaks or any(peak is None for peak in peaks):
        return None
    model = 3.0 * forward_flops_per_microbatch(problem.chain) * plan.num_microbatches
    return model / (iteration_s * sum(peaks) * plan.tensor_parallel) if model else None
