"""The data-parallel step of one pipeline rank: gradients reduced over its DP group, the
optimizer step, and (ZeRO 1-2) the updated weights gathered back.

ZeRO 0 all-reduces the rank's gradients; ZeRO 1 and 2 reduce-scatter them and, after each
rank updated its shard, all-gather the 16-bit weights (Rajbhandari et al., SC 2020, Sec. 5:
the same traffic as an all-reduce, split in two); ZeRO 3 reduce-scatters each layer's gradients
inside the backward and gathers weights per layer (``job.evaluate`` prices those), so nothing is
left after the last backward but the optimizer. Gradients move in FP32 (Megatron-LM's main
gradients, ``GRAD_BYTES``; ``grad_reduce`` ``bf16``: the 16-bit gradient buffer Megatron-Core
reduces with ``--grad-reduce-in-bf16``, ``GRAD_REDUCE_BYTES``), weights in 16 bits.

Overlap (``dp_policy``): ``none`` starts the reduction when the rank's last backward ends
(Megatron-LM's default: one contiguous buffer); ``ddp``, ``usbyte`` and ``dlsched`` hand the
rank's last backward action to the data-parallel domain's policies (``dataparallel.POLICIES``:
torch DDP's 25 MB buckets, US-Byte, dlsched's own), its layers' gradients ready as that
backward produces them, the gradients of the rank's other chunks ready at its start, on the DP
group's collective curve (``job.collective_costs.CurveComm``); the next iteration's forward is
not overlapped (the optimizer step needs every gradient). The optimizer step is its memory
traffic (``OPTIMIZER_BYTES`` per parameter of the rank's shard, by precision: Megatron-LM's
mixed-precision optimizer for fp16 / bf16, Adam alone under autocast; ``master_weights``
False: Adam on the 16-bit weights, ``HALF_ADAM_BYTES``) at the GPU's achieved memory bandwidth
(its kernels' launches are left out).

``overlap_param_gather`` (Megatron-LM's ``--overlap-param-gather``, ZeRO 1-2): the updated
weights' all-gather is not waited for after the optimizer but launched bucket by bucket in the
next iteration's forward, each layer's forward waiting for its own weights (the forward
pre-hooks of ``megatron/core/distributed/distributed_data_parallel.py``). The gathers run one
after another on the DP group's links while the rank's first microbatch runs forward through
its units (embedding, layers chunk by chunk, head: ``gather_units``, each its parameters and the
forward seconds that need them); what the gathers add is what that two-stage flow ends after
the forward alone would (nothing is hidden behind the later microbatches: an upper bound).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from dlsched.dataparallel.problem import DPProblem
from dlsched.dataparallel.run import run_dataparallel
from dlsched.job.communication.collective_costs import CollectiveCurve, CurveComm
from dlsched.job.run_choices import (
    GRAD_BYTES,
)
from dlsched.models.compute import CalibratedCompute

WEIGHT_BYTES = 2
# Adam itself per parameter: reads the FP32 gradient, weight and two moments (16 B), writes the
# weight and the moments (12 B): one fused kernel (apex FusedAdam in Megatron-LM, torch.optim's
# fused/foreach Adam under autocast).
ADAM_BYTES = 28
# The optimizer step's memory traffic per parameter (bytes) by the job's precision. fp16 and
# bf16 are Megatron-LM's Float16OptimizerWithFloat16Params (megatron/optimizer/optimizer.py):
# besides Adam, the FP32 main gradients' norm for clipping (read 4), the master weights copied
# to the 16-bit ones (_multi_tensor_copy_this_to_that: read 4, write 2) and the gradient buffer
# zeroed for the next iteration (write 4); fp16 also unscales the main gradients and checks them
# for inf/NaN (_amp_foreach_non_finite_check_and_unscale_: read 4, write 4), bf16 has no loss
# scaler. autocast trains the FP32 weights in place: Adam alone (gradients set to None).
OPTIMIZER_BYTES = {"fp16": ADAM_BYTES + 4 + 6 + 4 + 8, "bf16": ADAM_BYTES + 4 + 6 + 4,
                   "autocast": ADAM_BYTES}
# Adam on the 16-bit weights themselves, no FP32 master copy (``master_weights`` False): apex's
# FusedAdam handed the 16-bit parameters (``multi_tensor_adam`` dispatched on the gradient's,
# the parameter's and the moments' types: 16-bit g and p, the moments FP32 as FusedAdam creates
# them, ``torch.zeros_like(p).float()``) reads g 2, p 2, m 4, v 4 and writes p 2, m 4, v 4;
# no loss scale to unscale, no norm, no copy to a 16-bit model. What vTrain's simulator runs as
# its measured runs' weight update (VIA-Research/vTrain ``src/trainer.py``: ``FusedAdam`` over
# the half model's parameters, ``src/model/fused_adam.py``, at f8dda84); its single-node runs
# measure 23 B per parameter at the a100 preset's memory rate (docs/validation.md).
HALF_ADAM_BYTES = 2 + 2 + 4 + 4 + 2 + 4 + 4


@dataclass(frozen=True)
class DPStep:
    """Seconds after the rank's last backward: gradient reduction left exposed, the
    optimizer step, and the weights' all-gather (ZeRO 1-2)."""

    exposed_reduce: float
    optimizer: float
    gather: float

    @property
    def total(self) -> float:
        """Seconds from the last backward's end to the end of the rank's iteration."""
        return self.exposed_reduce + self.optimizer + self.gather


def dp_step(layer_params: list[int], other_params: int, final_backward: list[float],
            zero: int, dp: int, reduce: CollectiveCurve, gather: CollectiveCurve,
            compute: CalibratedCompute, policy: str,
            gather_units: tuple[tuple[float, float], ...] = (),
            grad_bytes: int = GRAD_BYTES, master_weights: bool = True) -> DPStep:
    """The rank's DP step (module docstring): ``layer_params`` parameters per GPU of each
    layer its last backward action runs (forward order) with ``final_backward`` seconds each,
    ``other_params`` those of its other chunks; ``gather_units`` (parameters, forward seconds)
    in forward order when the weights' all-gather overlaps the next forward; ``grad_bytes``
    per gradient reduced; ``master_weights`` False: Adam on the 16-bit weights
    (``HALF_ADAM_BYTES``; fp16 and bf16 only)."""
    total = sum(layer_params) + other_params
    shard = total / dp if zero >= 1 else total
    kind = "autocast" if compute.autocast else compute.precision
    per_param = (HALF_ADAM_BYTES if not master_weights and kind in ("fp16", "bf16")
                 else OPTIMIZER_BYTES[kind])
    optimizer = per_param * shard / compute.gpu.memory_rate
    if dp == 1 or zero == 3:
        return DPStep(0.0, optimizer, 0.0)
    gathered = 0.0
    if zero in (1, 2):
        gathered = (overlapped_gather(gather_units, gather) if gather_units
                    else gather.seconds(total * WEIGHT_BYTES))
    if policy == "none":
        return DPStep(reduce.seconds(total * grad_bytes), optimizer, gathered)
    grads = (*(int(p) * grad_bytes for p in layer_params), int(other_params) * grad_bytes)
    backward = (*final_backward, 0.0)
    return DPStep(_overlapped(grads, backward, reduce, policy), optimizer, gathered)


def overlapped_gather(units: tuple[tuple[float, float], ...], gather: CollectiveCurve) -> float:
    """Seconds the weights' all-gathers add to a forward that waits for each unit's weights:
    gathers back to back, unit ``i``'s forward after its gather and unit ``i - 1``'s forward
    (module docstring)."""
    network = forward = 0.0
    for params, seconds in units:
        network += gather.seconds(params * WEIGHT_BYTES)
        forward = max(forward, network) + seconds
    return forward - sum(seconds for _, seconds in units)


@lru_cache(maxsize=4096)
def _overlapped(grads: tuple[int, ...], backward: tuple[float, ...], reduce: CollectiveCurve,
                policy: str) -> float:
    """Seconds the policy's reduction outlasts the backward (kept per arguments: a
    pipeline's middle ranks, and a layout evaluated again, ask for the same)."""
    problem = DPProblem((0.0,) * len(grads), backward, grads, CurveComm(reduce), model="rank")
    result = run_dataparallel(problem, policy)
    return max(0.0, result.time_s - sum(backward))
