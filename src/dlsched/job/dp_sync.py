"""The data-parallel step of one pipeline rank: gradients reduced over its DP group, the
optimizer step, and (ZeRO 1-2) the updated weights gathered back.

ZeRO 0 all-reduces the rank's gradients; ZeRO 1 and 2 reduce-scatter them and, after each
rank updated its shard, all-gather the 16-bit weights (Rajbhandari et al., SC 2020, Sec. 5:
the same traffic as an all-reduce, split in two); ZeRO 3 reduce-scatters each layer's gradients
inside the backward and gathers weights per layer (``job.evaluate`` prices those), so nothing is
left after the last backward but the optimizer. Gradients move in FP32 (Megatron-LM's main
gradients, ``GRAD_BYTES``), weights in 16 bits.

Overlap (``dp_policy``): ``none`` starts the reduction when the rank's last backward ends
(Megatron-LM's default: one contiguous buffer); ``ddp``, ``usbyte`` and ``dlsched`` hand the
rank's last backward action to the data-parallel domain's policies (``dataparallel.POLICIES``:
torch DDP's 25 MB buckets, US-Byte, dlsched's own), its layers' gradients ready as that
backward produces them, the gradients of the rank's other chunks ready at its start, on the DP
group's collective curve (``job.collective_costs.CurveComm``); the next iteration's forward is
not overlapped (the optimizer step needs every gradient). The optimizer step is Adam's memory
traffic (``ADAM_BYTES`` per parameter of the rank's shard) at the GPU's achieved memory
bandwidth (one fused kernel: its launch is left out).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from dlsched.dataparallel.problem import DPProblem
from dlsched.dataparallel.run import run_dataparallel
from dlsched.errors import ConfigError
from dlsched.job.collective_costs import CollectiveCurve, CurveComm
from dlsched.models.compute import CalibratedCompute

DP_POLICIES = ("none", "ddp", "usbyte", "dlsched")
GRAD_BYTES = 4
WEIGHT_BYTES = 2
# Adam in mixed precision per parameter: reads the FP32 gradient, master weight and two moments
# (16 B), writes the master weight, the moments and the 16-bit weight (14 B).
ADAM_BYTES = 30


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


def check_dp_policy(policy: str) -> str:
    """``policy`` when accepted; ConfigError otherwise."""
    if policy not in DP_POLICIES:
        raise ConfigError(f"--dp-policy: {policy!r} is not accepted; accepted: "
                          + ", ".join(DP_POLICIES))
    return policy


def dp_step(layer_params: list[int], other_params: int, final_backward: list[float],
            zero: int, dp: int, reduce: CollectiveCurve, gather: CollectiveCurve,
            compute: CalibratedCompute, policy: str) -> DPStep:
    """The rank's DP step (module docstring): ``layer_params`` parameters per GPU of each
    layer its last backward action runs (forward order) with ``final_backward`` seconds each,
    ``other_params`` those of its other chunks."""
    total = sum(layer_params) + other_params
    shard = total / dp if zero >= 1 else total
    optimizer = ADAM_BYTES * shard / compute.gpu.memory_rate
    if dp == 1 or zero == 3:
        return DPStep(0.0, optimizer, 0.0)
    gathered = gather.seconds(total * WEIGHT_BYTES) if zero in (1, 2) else 0.0
    if policy == "none":
        return DPStep(reduce.seconds(total * GRAD_BYTES), optimizer, gathered)
    grads = (*(int(p) * GRAD_BYTES for p in layer_params), int(other_params) * GRAD_BYTES)
    backward = (*final_backward, 0.0)
    return DPStep(_overlapped(grads, backward, reduce, policy), optimizer, gathered)


@lru_cache(maxsize=4096)
def _overlapped(grads: tuple[int, ...], backward: tuple[float, ...], reduce: CollectiveCurve,
                policy: str) -> float:
    """Seconds the policy's reduction outlasts the backward (kept per arguments: a
    pipeline's middle ranks, and a layout evaluated again, ask for the same)."""
    problem = DPProblem((0.0,) * len(grads), backward, grads, CurveComm(reduce), model="rank")
    result = run_dataparallel(problem, policy)
    return max(0.0, result.time_s - sum(backward))
