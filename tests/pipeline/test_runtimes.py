"""Which runtime executes a plan, runnable-only planning and the per-scenario headline of the
pipeline reproduction (issue 19, item 14)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dlsched.experiments.pipeline import headline, per_scenario
from dlsched.hardware.device_graph import server_graph
from dlsched.pipeline import PipelinePlan, PipelineProblem, Stage, run_planner, synthetic_chain
from dlsched.pipeline.plans.runtimes import runtime_for

ALL = tuple(range(8))


def _plan(stages: tuple[Stage, ...], schedule: str = "1f1b", tp: int = 1) -> PipelinePlan:
    return PipelinePlan("x", stages, ((),) * 8, 4, {"schedule": schedule}, tensor_parallel=tp)


@pytest.mark.parametrize(("stages", "schedule", "runtime"), [
    ((Stage(0, 2, (0, 1)), Stage(2, 4, (2, 3))), "list-bwd-first", "torch"),
    ((Stage(0, 2, (0, 1)), Stage(2, 4, (2, 3))), "1f1b", "Megatron-LM, torch"),
    ((Stage(0, 4, ALL),), "gpipe", "torch"),
    ((Stage(0, 2, (0, 1, 2)), Stage(2, 4, (3,))), "1f1b", "PipeDream"),
    ((Stage(0, 2, (0, 1), True), Stage(2, 4, (3,))), "1f1b", "DAPPLE"),
    ((Stage(0, 2, (0, 1, 2)), Stage(2, 4, (3,))), "gpipe", None),
    (tuple(Stage(s, s + 1, ALL) for s in range(4)), "list-bwd-first", None),
    (tuple(Stage(s, s + 1, ((0, 1), (2, 3))[s % 2]) for s in range(4)), "interleaved",
     "Megatron-LM, torch (interleaved)"),
    (tuple(Stage(s, s + 1, ((0, 1), (2, 3))[s % 2]) for s in range(4)), "list-bwd-first",
     "torch (looped stages)"),
    (tuple(Stage(s, s + 1, ((0,), (1,), (1,), (0,))[s]) for s in range(4)), "zb-v",
     "torch (ZB-V)"),
    ((Stage(0, 2, (0,)), Stage(2, 4, (0,))), "interleaved", None),
    ((Stage(0, 1, (0,)), Stage(1, 2, (1,)), Stage(2, 3, (0,)), Stage(3, 4, (2,))),
     "list-bwd-first", None),
])
def test_runtime_for_layouts(stages, schedule, runtime) -> None:
    """Uniform replicas: torch (Megatron too in 1F1B order); per-stage replicas in 1F1B:
    PipeDream (round-robin) or DAPPLE (split); several stages per GPU only in a looped or V
    layout over >= 2 ranks."""
    assert runtime_for(_plan(stages, schedule)) == runtime


def test_per_stage_replication_with_tensor_parallelism_has_no_runtime() -> None:
    assert runtime_for(_plan((Stage(0, 2, (0, 1, 2)), Stage(2, 4, (3,))), tp=2)) is None


def test_runnable_only_planning_keeps_to_runnable_plans() -> None:
    """A small model on 2 identical GPUs (interleaved and ZB-V at PP 1 put two replicated
    stages on both): with runnable_only every planner's plan has a runtime, and dlsched's is
    not faster than the unrestricted one."""
    chain = synthetic_chain([1e-3] * 4, [2e-3] * 4, [1e6] * 4, [1e6] * 4, [1e6] * 4, split=True)
    graph = server_graph("two", [(2, 1e12, 2**34, 1e11, 1e-6)], 1e10, 1e-5)
    problem = PipelineProblem(chain, graph, 2, ("none",))
    free = run_planner(problem, "dlsched").sim.iteration_s
    strict = replace(problem, runnable_only=True)
    for name in ("dlsched", "interleaved", "zb-v"):
        result = run_planner(strict, name)
        assert runtime_for(result.plan) is not None, name
    assert run_planner(strict, "dlsched").sim.iteration_s >= free * (1 - 1e-9)


def test_headline_names_the_best_baseline_per_scenario() -> None:
    """Two scenarios: dlsched 10 ms against baselines of 12 and 11 ms (best: b, 1.10x) and a
    tie at 20 ms where dlsched's plan is a baseline's and runs on no runtime (runnable: 21 vs
    22 ms, 22/21)."""
    def row(model, planner, time, runnable, origin="", runtime="Megatron-LM, torch"):
        return {"network": "fifo", "model": model, "devices": "d", "recompute_allowed": "any",
                "planner": planner, "iteration_s": time, "runnable_iteration_s": runnable,
                "origin": origin or planner, "runtime": runtime}
    rows = [row("m1", "dlsched", 0.010, 0.010), row("m1", "gpipe", 0.012, 0.012),
            row("m1", "1f1b", 0.011, 0.011),
            row("m2", "dlsched", 0.020, 0.021, "zb-v", "none"),
            row("m2", "zb-v", 0.020, 0.023, runtime="none"), row("m2", "1f1b", 0.022, 0.022)]
    first, second = per_scenario(rows)
    assert (first["best_baseline"], first["speedup"]) == ("1f1b", pytest.approx(1.1))
    assert (second["best_baseline"], second["speedup"]) == ("zb-v", pytest.approx(1.0))
    assert (second["best_runnable_baseline"], second["runnable_speedup"]) == (
        "1f1b", pytest.approx(22 / 21))
    (summary,) = headline([first, second])
    assert summary["mean_speedup"] == pytest.approx(1.1 ** 0.5)
    assert (summary["ties"], summary["baseline_plans"], summary["unrunnable"]) == (1, 1, 1)
