"""The pipeline runtime benchmark runs a plan two planners gave once and ranks distinct plans."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("torch")
bench = pytest.importorskip("benchmarks.bench_pipeline_runtime")

from dlsched.hardware.device_config import devices_from_data  # noqa: E402
from dlsched.pipeline import (  # noqa: E402
    PipelineProblem,
    PipelineResult,
    run_planner,
    synthetic_chain,
)
from dlsched.runtime.pipeline.calibrate import RankFit, cpu_devices_document  # noqa: E402
from dlsched.runtime.pipeline.run import PipelineRun  # noqa: E402
from dlsched.sim import Timeline  # noqa: E402

PROBLEM = PipelineProblem(
    synthetic_chain([2e-3, 1e-3, 3e-3, 2e-3], [4e-3, 2e-3, 6e-3, 4e-3], [1e6] * 4,
                    [1e7] * 4, [1e6] * 4, split=False),
    devices_from_data(cpu_devices_document(2, 3e-5, 4e9, 2**34), "test"), 4, replicate=False)


def _renamed(result: PipelineResult, planner: str) -> PipelineResult:
    return replace(result, sim=replace(result.sim, plan=replace(result.plan, planner=planner)))


def _run(*iterations_ms: float) -> PipelineRun:
    return PipelineRun(Timeline([]), tuple(t / 1e3 for t in iterations_ms), (), None)


def test_same_plans_ignore_the_planner_name() -> None:
    ours, gpipe = run_planner(PROBLEM, "dlsched"), run_planner(PROBLEM, "gpipe")
    twin = _renamed(ours, "twin")
    assert bench._same_plans([ours, gpipe, twin]) == [0, 1, 0]


def test_measured_rank_counts_distinct_plans() -> None:
    ours, gpipe = run_planner(PROBLEM, "dlsched"), run_planner(PROBLEM, "gpipe")
    if bench._same_plans([ours, gpipe]) != [0, 1]:
        pytest.skip("dlsched gave GPipe's plan on this chain")
    twin = _renamed(ours, "twin")
    fast, slow = _run(90, 100, 110), _run(180, 200, 220)
    text = bench.measured_rank([ours, gpipe, twin], [fast, slow, fast])
    assert text.startswith("dlsched's plan measured rank 1 of 2 distinct plans (100 ms; "
                           "the same plan as twin); against the fastest other, gpipe 200 ms: "
                           "-50.0%")
    assert bench.measured_rank([ours, gpipe, twin], [slow, fast, slow]).startswith(
        "dlsched's plan measured rank 2 of 2")


@pytest.mark.parametrize(("during", "attempts", "held"), [
    ([1.40], 1, True),
    ([0.97, 1.40], 2, True),
    ([0.97, 0.97], 2, False),
])
def test_setting_measured_again_while_its_calibration_drifts(
        monkeypatch: pytest.MonkeyPatch, during: list[float], attempts: int,
        held: bool) -> None:
    """A calibration giving factor 1.42 holds when the same workload among the plans gives a
    factor within 10% (1.40); at 0.97 (as on the 16-core machine's second lease) the whole
    setting is measured again, at most twice, and a last drift is kept and reported."""
    calls = []

    def measure_ranks(*_: object) -> RankFit:
        calls.append("calibrate")
        return RankFit(1.42, (1.42,) * 3, 0.0, (0.0,) * 3)

    factors = iter(during)
    monkeypatch.setattr(bench, "measure_ranks", measure_ranks)
    monkeypatch.setattr(bench, "PLANNERS", ("dlsched", "gpipe"))
    monkeypatch.setattr(bench, "rank_calibration_plan", lambda *_: "control")
    monkeypatch.setattr(bench, "_run_all", lambda results, control: (
        [_run(10.0)] * len(results), _run(10.0)))
    monkeypatch.setattr(bench, "rank_compute_factor", lambda *_: (next(factors), ()))
    setting = bench.measure_setting(2, PROBLEM.chain, 0.01, 0.0, 3e-5, 4e9)
    assert calls == ["calibrate"] * attempts and setting.held is held
    assert len(setting.drifts) == attempts - held and setting.factor_during == during[-1]
    text = bench.drift_text(setting)
    assert ("did not hold after 2 attempts" in text) is not held
    assert ("measured again after: compute factor 1.420 at calibration but 0.970" in text) is (
        attempts == 2)
