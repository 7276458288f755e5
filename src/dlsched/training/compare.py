"""The training domain's comparison (``dlsched train``): whole iterations of one scenario
under several collective policies, each row with its speedup over a reference policy
(reference iteration / policy iteration) and its model FLOPs utilization."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dlsched.hardware.gpu import get_gpu
from dlsched.training.run import TrainingResult, run_policies
from dlsched.training.scenario import TrainingScenario
from dlsched.training.setup import TrainingSetup
from dlsched.training.workloads import model_flops_per_npu

REFERENCE = "baseline"
MFU_GPU, MFU_PRECISION = "a100", "bf16"
"""MFU is of the A100's dense BF16 peak (312 TFLOP/s: the ``a100`` preset, presets/gpus.yaml),
the GPU whose roofline the zoo workloads' compute times come from (``training.workloads``)."""


@dataclass(frozen=True)
class TrainingComparison:
    """The ``setup`` compared (workload, topology, chunking), the compared policies'
    ``results`` in the order asked, and their ``rows`` (seconds; ``speedup_vs_<reference>``;
    ``mfu`` None for an ASTRA-sim workload file, whose model FLOP are not known)."""

    scenario: TrainingScenario
    setup: TrainingSetup
    results: tuple[TrainingResult, ...]
    rows: list[dict[str, Any]]


def compare(scenario: TrainingScenario, policies: Sequence[str], reference: str = REFERENCE,
            record: bool = False, setup: TrainingSetup | None = None) -> TrainingComparison:
    """Simulate ``scenario``'s iterations under each of ``policies`` and ``reference`` (run
    too when not compared; ``record``: keep each compared policy's timeline); each row: the
    policy's ``TrainingResult.row``, the latency setting, the speedup over ``reference`` and
    MFU (the workload's model FLOP per NPU / (iteration s x the A100's BF16 peak)).
    ``setup``: ``scenario.setup()`` when the caller has built it already (its files read
    once)."""
    setup = setup or scenario.setup()
    wanted = list(policies) if reference in policies else [*policies, reference]
    results = run_policies(setup.workload, setup.topology, wanted, scenario.iterations,
                           setup.chunks, setup.concurrency, record, setup.compat,
                           setup.op_topologies)
    reference_s = results[wanted.index(reference)].iteration_s
    compared = tuple(results[:len(policies)])
    flops = model_flops_per_npu(scenario.workload, setup.topology.num_npus) \
        if scenario.astra_workload is None else 0.0
    peak = get_gpu(MFU_GPU).peak_flops(MFU_PRECISION)
    rows = [r.row() | {"latency": scenario.latency,
                       f"speedup_vs_{reference}": reference_s / r.iteration_s,
                       "mfu": flops / (r.iteration_s * peak) if flops else None}
            for r in compared]
    return TrainingComparison(scenario, setup, compared, rows)
