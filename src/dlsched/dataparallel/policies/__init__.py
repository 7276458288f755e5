"""Gradient scheduling policies, all ``(DPProblem) -> DPPlan``, registered by name."""

from __future__ import annotations

from collections.abc import Callable

from dlsched.dataparallel.plan import DPPlan
from dlsched.dataparallel.policies.bytescheduler import bytescheduler_plan
from dlsched.dataparallel.policies.fused import dlsched_plan
from dlsched.dataparallel.policies.simple import bucket_plan, horovod_plan, mgwfbp_plan, wfbp_plan
from dlsched.dataparallel.policies.usbyte import usbyte_plan
from dlsched.dataparallel.problem import DPProblem

PolicyFunction = Callable[[DPProblem], DPPlan]

POLICIES: dict[str, PolicyFunction] = {
    "wfbp": wfbp_plan,
    "mgwfbp": mgwfbp_plan,
    "ddp": bucket_plan,
    "horovod": horovod_plan,
    "bytescheduler": bytescheduler_plan,
    "usbyte": usbyte_plan,
    "dlsched": dlsched_plan,
}
