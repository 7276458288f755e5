"""Inter-dimension policies, one per module, all ``(CollectiveRequest) -> CollectivePlan``."""

from __future__ import annotations

from collections.abc import Callable

from dlsched.collectives.plan import CollectivePlan
from dlsched.collectives.policies.balanced import balanced_plan
from dlsched.collectives.policies.baseline import baseline_plan
from dlsched.collectives.policies.themis import themis_plan
from dlsched.collectives.request import CollectiveRequest

PolicyFunction = Callable[[CollectiveRequest], CollectivePlan]

POLICIES: dict[str, PolicyFunction] = {
    "baseline": baseline_plan,
    "themis": themis_plan,
    "dlsched": balanced_plan,
}
