"""Gradient scheduling policies, all ``(DPProblem) -> DPPlan``, registered by name.

Policies with knobs come twice: at the shipped defaults (``ddp``, ``horovod``,
``bytescheduler`` and ``usbyte`` — whose shipped versions auto-tune their credit —) and tuned on the
grid every tuned policy shares (``<name>-tuned``, see ``tuning.py``). Plans are cached per
problem (``cache.py``; ``clear_plan_caches`` forgets them)."""

from __future__ import annotations

from collections.abc import Callable

from dlsched.dataparallel.cache import clear_plan_caches
from dlsched.dataparallel.plan import DPPlan
from dlsched.dataparallel.policies.bytescheduler import (
    bytescheduler_plan,
    bytescheduler_tuned_plan,
)
from dlsched.dataparallel.policies.fused import dlsched_plan
from dlsched.dataparallel.policies.simple import (
    bucket_plan,
    ddp_tuned_plan,
    horovod_plan,
    horovod_tuned_plan,
    mgwfbp_plan,
    wfbp_plan,
)
from dlsched.dataparallel.policies.usbyte import usbyte_shipped_plan, usbyte_tuned_plan
from dlsched.dataparallel.problem import DPProblem

__all__ = ["POLICIES", "TUNED_DEFAULTS", "PolicyFunction", "clear_plan_caches"]

PolicyFunction = Callable[[DPProblem], DPPlan]

POLICIES: dict[str, PolicyFunction] = {
    "wfbp": wfbp_plan,
    "mgwfbp": mgwfbp_plan,
    "ddp": bucket_plan,
    "ddp-tuned": ddp_tuned_plan,
    "horovod": horovod_plan,
    "horovod-tuned": horovod_tuned_plan,
    "bytescheduler": bytescheduler_plan,
    "bytescheduler-tuned": bytescheduler_tuned_plan,
    "usbyte": usbyte_shipped_plan,
    "usbyte-tuned": usbyte_tuned_plan,
    "dlsched": dlsched_plan,
}
# Each tuned variant and the shipped-default policy it tunes.
TUNED_DEFAULTS = {"ddp-tuned": "ddp", "horovod-tuned": "horovod",
                  "bytescheduler-tuned": "bytescheduler", "usbyte-tuned": "usbyte"}
