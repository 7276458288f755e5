"""Seconds the multi-token-prediction modules (``job.compute.mtp``) add to the last pipeline
stage, priced as the job's other blocks are (``job.compute.layer_costs``,
``job.compute.moe_costs``).
"""

from __future__ import annotations

from dlsched.job.compute.layer_costs import BlockCosts, gpu_compute
from dlsched.job.compute.moe_costs import MoELayerCosts
from dlsched.job.compute.mtp import mtp_layer_is_moe
from dlsched.job.execution import Execution
from dlsched.job.model_spec import Model
from dlsched.models.layer import Layer
from dlsched.models.ops import matmul


def mtp_seconds(spec: Model, layout: Execution, costs: BlockCosts,
                moe: MoELayerCosts | None, gpu: str, precision: str
                ) -> tuple[float, float, int]:
    """Seconds per microbatch the MTP modules add to the last virtual stage (forward,
    backward) and how many MoE layers they hold (their all-to-alls, hidden by DualPipe's
    overlapped pairs as the stage's others): per module the embedding lookup and the head
    again (``costs``' ``embed`` and ``head``: the logits and the loss of the shifted tokens),
    ``eh_proj`` (a ``2h -> h`` column-parallel GEMM on the GPU's tokens) and one layer, an MoE
    layer at ``moe``'s seconds (``job.compute.moe_costs``) or a dense one at ``costs``'."""
    compute = gpu_compute(gpu, precision, layout.tp, layout.sequence_parallel)
    tokens = spec.seq // layout.cp
    proj = Layer("mtp.eh_proj", 0, ops=(matmul("eh_proj", 2 * spec.hidden, spec.hidden, tokens,
                                               bias=False),))
    b = layout.microbatch_size
    forward = backward = 0.0
    sparse = 0
    for module in range(spec.mtp_layers):
        sparse_layer = moe is not None and mtp_layer_is_moe(spec, module)
        sparse += sparse_layer
        forward += (costs.embed_f + costs.head_f + compute.forward_time(proj, b)
                    + (moe.layer_f if moe is not None and sparse_layer else costs.layer_f))
        backward += (costs.embed_b + costs.head_b + compute.backward_time(proj, b)
                     + (moe.layer_b if moe is not None and sparse_layer else costs.layer_b))
    return forward, backward, sparse
