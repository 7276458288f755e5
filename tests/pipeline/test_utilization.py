"""MFU of a pipeline plan: model FLOP / (iteration x the peak of the GPUs used)."""

import numpy as np
import pytest

from dlsched.hardware.device_graph import cluster_graph
from dlsched.pipeline import PipelineProblem, run_planner
from dlsched.pipeline.chains.chain import Chain
from dlsched.pipeline.simulation.utilization import plan_mfu


def _chain() -> Chain:
    n = 4
    return Chain("c", tuple(f"b{i}" for i in range(n)), np.full(n, 1e12), np.full(n, 2e12),
                 np.full(n, 1e6), np.zeros(n), np.zeros(n), None)


def test_mfu_by_hand():
    """4 blocks of 1e12 forward FLOP, 8 microbatches: 3 x 4e12 x 8 = 96e12 model FLOP;
    over the iteration and the peaks of the GPUs the plan uses."""
    graph = cluster_graph(1, 2, flops=100e12, peak=400e12)
    problem = PipelineProblem(_chain(), graph, 8, recompute_modes=("none",))
    result = run_planner(problem, "1f1b")
    used = sum(1 for order in result.plan.orders if order)
    expected = 96e12 / (result.sim.iteration_s * used * 400e12)
    assert plan_mfu(problem, result.plan, result.sim.iteration_s) == pytest.approx(expected)
    # the plan cannot beat the GPUs' sustained rate: MFU <= 100 / 400
    assert expected <= 0.25 + 1e-12


def test_no_peak_no_mfu():
    """Without a datasheet peak the MFU is unknown (None), never a guess."""
    problem = PipelineProblem(_chain(), cluster_graph(1, 2, flops=100e12), 8,
                              recompute_modes=("none",))
    result = run_planner(problem, "1f1b")
    assert plan_mfu(problem, result.plan, result.sim.iteration_s) is None
