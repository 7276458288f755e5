"""The data-parallel domain's comparison (``dlsched dataparallel``): one scenario's iteration
scheduled by several policies, each row with its speedup over a reference policy (reference
time / policy time) and its model FLOPs utilization."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dlsched.dataparallel.run import DPResult, run_dataparallel
from dlsched.dataparallel.scenario import DataParallelScenario, DataParallelSetup
from dlsched.models import training_flops
from dlsched.progress import Progress, quiet

REFERENCE = "wfbp"


@dataclass(frozen=True)
class DataParallelComparison:
    """The ``setup`` compared (layer times, network, problem), the compared policies'
    ``results`` in the order asked, and their ``rows`` (seconds; ``speedup_vs_<reference>``,
    ``mfu`` None where the compute model has no peak)."""

    scenario: DataParallelScenario
    setup: DataParallelSetup
    results: tuple[DPResult, ...]
    rows: list[dict[str, Any]]

    @property
    def workers_shown(self) -> str:
        """The rank count as titles say it ("8 workers", or "workers as measured")."""
        workers = self.setup.workers
        return f"{workers} workers" if workers is not None else "workers as measured"

    @property
    def network_name(self) -> str:
        """The network's own name, else the ``network`` text given."""
        return self.setup.comm.name or self.scenario.network


def compare(scenario: DataParallelScenario, policies: Sequence[str],
            reference: str = REFERENCE, progress: Progress = quiet) -> DataParallelComparison:
    """Schedule ``scenario``'s iteration under each of ``policies`` (names in ``POLICIES``) and
    ``reference`` (run too when not compared); each row: the policy's ``DPResult.row``, the
    scenario's workers, network, compute source and batch, the plan's settings, the speedup
    over ``reference`` and MFU (model training FLOP of the batch / (iteration s x the
    compute model's peak FLOP/s))."""
    setup = scenario.setup()
    runs = list(policies) if reference in policies else [*policies, reference]
    by_name = {name: run_dataparallel(setup.problem, name) for name in progress(runs, len(runs))}
    step_flops = training_flops(setup.trained, setup.batch_size)
    peak = getattr(setup.times, "peak_flops", None)
    compute = scenario.compute if scenario.compute != "device" else scenario.device
    reference_s = by_name[reference].time_s
    results = tuple(by_name[name] for name in policies)
    rows = [r.row() | {"workers": setup.workers, "network": setup.comm.name or scenario.network,
                       "compute": compute, "batch_size": setup.batch_size,
                       "in_flight": r.plan.in_flight, "settings": r.plan.settings,
                       f"speedup_vs_{reference}": reference_s / r.time_s,
                       "mfu": step_flops / (r.time_s * peak) if peak and step_flops else None}
            for r in results]
    return DataParallelComparison(scenario, setup, results, rows)
