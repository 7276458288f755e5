"""The 90% intervals of a plan's numbers (job.intervals), the envelope they come from
(job.envelope, ledger.residuals) and the risk-aware search (job.ranking, ``--objective``)."""

from __future__ import annotations

import math
from dataclasses import replace
from importlib import resources

import pytest

from dlsched.job import intervals
from dlsched.job.envelope import (
    FEATURES,
    TABLE,
    Features,
    Residual,
    dump_residuals,
    features,
    parse_residuals,
)
from dlsched.job.evaluation.evaluate import Job, JobResult
from dlsched.job.intervals import (
    base_half_width,
    conformal_quantile,
    envelope_notes,
    interval_columns,
    memory_bounds,
    memory_note,
    time_bounds,
    uncovered,
    widening,
)
from dlsched.job.ranking import Ranking, difference_note
from dlsched.job.scenario import PlanScenario
from dlsched.pipeline.chains.memory_model import FRAGMENTATION

BASE = {"gpu": "a", "precision": "bf16", "schedule": "none", "recompute": "full", "zero": 0,
        "microbatch": 1, "tp": False, "cp": False, "ep": False}


def feats(parameters: float = 1e10, stages: int = 1, **values: object) -> Features:
    merged = {**BASE, **values}
    return Features(tuple(merged[name] for name in FEATURES), parameters, stages)  # type: ignore[misc]


def res(name: str, error: float, mfu: float | None = 0.5, family: str = "time",
        **values: object) -> Residual:
    return Residual(name, family, error, mfu, feats(**values))  # type: ignore[arg-type]


# Ten runs on GPU "a" 1% off, ten on GPU "b" 20% off; every other feature shared.
HAND = tuple([res(f"a{i}", 0.01 * (-1) ** i) for i in range(10)]
             + [res(f"b{i}", -0.2, gpu="b") for i in range(10)])


def test_bundled_table_is_what_the_ledger_gives_now() -> None:
    """Regenerate with ``python -m dlsched.ledger.residuals`` when a ledger prediction moves."""
    from dlsched.ledger.residuals import table_text

    bundled = resources.files("dlsched").joinpath(TABLE).read_text()
    assert bundled == table_text(), "python -m dlsched.ledger.residuals"
    table = parse_residuals(bundled)
    assert len(table) >= intervals.MIN_ROWS and {r.family for r in table} <= {"time", "memory"}
    assert parse_residuals(dump_residuals(table, "# h\n")) == table


def test_conformal_quantile_by_hand() -> None:
    assert conformal_quantile([0.05] * 8) == math.inf  # ceil(9 x 0.9) = 9 > 8
    assert conformal_quantile([0.01 * k for k in range(1, 10)]) == pytest.approx(0.09)
    assert conformal_quantile([0.01 * k for k in range(1, 11)]) == pytest.approx(0.10)


def test_base_half_width_takes_whole_levels_of_the_nearest_runs() -> None:
    """A plan on GPU "a" has the ten "a" runs at distance 0: the 10th smallest of their |error|
    (ceil(11 x 0.9) = 10) is 0.01; one on a third GPU has all twenty at distance 1: the 19th
    (ceil(21 x 0.9)), 0.2."""
    assert base_half_width(feats(), HAND) == pytest.approx(0.01)
    assert base_half_width(feats(gpu="c"), HAND) == pytest.approx(0.2)


def test_widening_by_hand() -> None:
    """Hiding GPU "b" leaves the ten "a" runs: each "b" run's base q is 0.01 and its error 0.2,
    an excess of 0.19; hiding "a" leaves the "b" runs (q 0.2): no excess; every other feature
    has one value (nothing left when hidden). The 19th of the twenty excesses: 0.19; with
    fewer than nine excesses, unbounded."""
    assert widening(HAND) == pytest.approx(0.19)
    assert widening(HAND[:10] + HAND[10:13]) == math.inf


def test_an_uncovered_feature_widens_the_interval_and_is_named() -> None:
    covered = time_bounds(feats(), 10.0, None, HAND)
    outside = time_bounds(feats(gpu="c"), 10.0, None, HAND)
    assert covered.outside == () and covered.q == pytest.approx(0.01)
    assert outside.outside == ("GPU c (no priced run)",)
    assert outside.q == pytest.approx(0.2 + 0.19)
    assert outside.low < covered.low < 10.0 < covered.high < outside.high
    assert outside.high == pytest.approx(10.0 / (1 - 0.39))
    assert outside.low == pytest.approx(10.0 / 1.39)


def test_scales_outside_the_runs_sharing_a_value_are_named() -> None:
    table = [res("x", 0.0, parameters=8e9, stages=1, recompute="none"),
             res("y", 0.0, parameters=4e11, stages=8, microbatch=1)]
    found = uncovered(feats(parameters=1.75e11, stages=16, recompute="none"), table)
    assert "recomputation none at 175B parameters (priced runs: 8.0B-8.0B)" in found
    assert "microbatch 1 at 16 pipeline stages (priced runs: 1-8)" in found
    assert "recomputation none at 16 pipeline stages (priced runs: 1-1)" in found
    assert not uncovered(feats(parameters=8.05e9, recompute="none"), table[:1])  # within 1%


def test_mfu_above_every_run_of_the_gpu_is_named_and_bounds_the_upper_end() -> None:
    """The best "a" run published 50% MFU: a plan predicted at 80% is one uncovered feature
    (q 0.01 + 0.19) and its time's upper end is at least the time at 50% MFU (16 s)."""
    below = time_bounds(feats(), 10.0, 0.4, HAND)
    above = time_bounds(feats(), 10.0, 0.8, HAND)
    assert below.outside == () and below.high == pytest.approx(10.0 / 0.99)
    assert above.outside == ("MFU 80.0% above every priced a 16-bit run (best 50.0%)",)
    assert above.q == pytest.approx(0.2)
    assert above.high == pytest.approx(16.0)


def test_the_mfu_frontier_is_the_plans_tensor_core_format() -> None:
    """MFU counts against the 16-bit peak, so an FP8 run at 80% does not lift a bf16 plan's
    frontier: the bf16 plan at 60% is still above the 16-bit runs' 50% (upper end at least
    10 s x 60 / 50 = 12 s), and an FP8 plan at 70% is below the FP8 run's 80%; fp16 shares
    bf16's frontier."""
    table = (*HAND, res("f", 0.0, mfu=0.8, precision="fp8"))
    bf16 = time_bounds(feats(), 10.0, 0.6, table)
    assert bf16.outside == ("MFU 60.0% above every priced a 16-bit run (best 50.0%)",)
    assert bf16.high >= 12.0 - 1e-9
    assert intervals.frontier(feats(precision="fp16"), table) == pytest.approx(0.5)
    assert intervals.frontier(feats(precision="fp8"), table) == pytest.approx(0.8)
    assert time_bounds(feats(precision="fp8"), 10.0, 0.7, table).outside == ()


def test_expert_parallel_runs_bound_expert_parallel_plans_only() -> None:
    """An MoE run at 30% does not bound a dense plan (the dense runs' 50% does), and bounds an
    expert-parallel plan, which no dense run does: at 40% it is named and its upper end is at
    least 10 s x 40 / 30."""
    table = (*HAND, res("moe", 0.0, mfu=0.3, ep=True))
    assert intervals.frontier(feats(), table) == pytest.approx(0.5)
    assert intervals.frontier(feats(ep=True), table) == pytest.approx(0.3)
    moe = time_bounds(feats(ep=True), 10.0, 0.4, table)
    assert "MFU 40.0% above every priced a 16-bit EP run (best 30.0%)" in moe.outside
    assert moe.high >= 10.0 * 0.4 / 0.3 - 1e-9
    assert time_bounds(feats(), 10.0, 0.4, table).outside == ()


def test_memory_is_unvalidated_below_nine_memory_rows_and_calibrated_from_nine() -> None:
    """No memory run: the default 15%; two (1% and 30% off): the larger, 30%; nine (2% to
    18%): the 9th smallest (ceil(10 x 0.9) = 9), 18%."""
    default = memory_bounds(feats(), 40.0, HAND)
    assert default.rows == 0 and default.q == FRAGMENTATION
    assert default.low == pytest.approx(40.0 / 1.15) and default.high == pytest.approx(40.0 / 0.85)
    two = (res("m0", 0.01, None, "memory"), res("m1", -0.3, None, "memory"))
    assert memory_bounds(feats(), 40.0, HAND + two).q == pytest.approx(0.3)
    memory = tuple(res(f"m{i}", 0.02 * (i + 1), None, "memory") for i in range(9))
    calibrated = memory_bounds(feats(), 40.0, HAND + memory)
    assert calibrated.rows == 9 and calibrated.q == pytest.approx(0.18)
    assert "2 of the priced ledger runs" in memory_note(2) and "unvalidated" in memory_note(2)


SMALL = {"model": "gpt-1.7b", "cluster": "dgx-a100", "gpus": 16, "global_batch": 64}
GIVEN = {"tp": 2, "pp": 2, "dp": 4, "chunks": 1, "microbatch_size": 2, "schedule": "1f1b",
         "recompute": "selective", "sequence_parallel": True}


def _priced(scenario: PlanScenario) -> tuple[Job, JobResult]:
    """The job and the evaluated layout ``plan`` returns for a complete ``scenario``."""
    from dlsched.job.api import plan

    return plan(scenario).plans[0]


def _around(plan: Features, mfu: float = 0.9) -> tuple[Residual, ...]:
    """Ten runs with ``plan``'s features 1% off and ten on GPU "b" 20% off (``HAND``'s
    shape: widening 0.19), every run at ``mfu`` published."""
    other = replace(plan, values=("b", *plan.values[1:]))
    return tuple([Residual(f"a{i}", "time", 0.01 * (-1) ** i, mfu, plan) for i in range(10)]
                 + [Residual(f"b{i}", "time", -0.2, mfu, other) for i in range(10)])


@pytest.mark.parametrize("zero", [0, 1, 3])
def test_every_interval_of_a_real_plan_contains_its_point(zero: int) -> None:
    job, result = _priced(PlanScenario(**SMALL, **GIVEN, zero=zero))  # type: ignore[arg-type]
    row = interval_columns(job, result)
    top = {key: math.inf if row[key] is None else row[key]
           for key in ("iteration_high_s", "memory_gib_high")}
    assert row["iteration_low_s"] < result.iteration_s < top["iteration_high_s"]
    assert row["mfu_low"] < result.mfu < row["mfu_high"]
    assert row["memory_gib_low"] < result.memory_bytes / 2**30 < top["memory_gib_high"]


def test_a_real_layout_outside_the_runs_is_wider_and_named() -> None:
    """Runs around a real ZeRO 0 layout (``_around``): the layout itself is covered (q 0.01),
    the same with ZeRO 3 is not (its ten nearest runs differ in one feature: q 0.01 + 0.19),
    and ``plan``'s note names the feature."""
    job, zero = _priced(PlanScenario(**SMALL, **GIVEN, zero=0))  # type: ignore[arg-type]
    _, three = _priced(PlanScenario(**SMALL, **GIVEN, zero=3))  # type: ignore[arg-type]
    table = _around(features(job, zero.layout))
    covered, row = interval_columns(job, zero, table), interval_columns(job, three, table)
    assert covered["outside_envelope"] == [] and row["outside_envelope"] == [
        "ZeRO stage 3 (no priced run)"]
    assert covered["iteration_high_s"] == pytest.approx(zero.iteration_s / 0.99)
    assert row["iteration_high_s"] == pytest.approx(three.iteration_s / 0.8)
    assert row["iteration_low_s"] == pytest.approx(three.iteration_s / 1.2)
    note, = envelope_notes([{"layout": "L", **row, "memory_interval_rows": 9}])
    assert note == ("L: outside the validated envelope (90% interval widened for each): ZeRO "
                    "stage 3 (no priced run)")


def test_upper_ranks_by_the_interval_and_the_note_names_both_plans() -> None:
    """Two results of one job: the covered one, and a ZeRO 3 one 10% faster that no run
    covers (q 0.01 + 0.19): the point ranking picks the faster, ``upper`` the covered one
    (upper ends t / 0.99 against 0.9 t / 0.8), and the note gives both and the differences."""
    job, slow = _priced(PlanScenario(**SMALL, **GIVEN, zero=1))  # type: ignore[arg-type]
    fast = replace(slow, layout=replace(slow.layout, zero=3), iteration_s=slow.iteration_s * 0.9,
                   mfu=slow.mfu / 0.9)
    table = _around(features(job, slow.layout))
    point, upper = Ranking("expected", table), Ranking("upper", table)
    assert min([slow, fast], key=lambda r: point.key(job, r)) is fast
    assert min([slow, fast], key=lambda r: upper.key(job, r)) is slow
    assert upper.high(job, slow) == pytest.approx(slow.iteration_s / 0.99)
    assert upper.high(job, fast) == pytest.approx(fast.iteration_s / 0.8)
    note = difference_note(job, slow, fast, upper)
    assert note is not None and slow.layout.label() in note and fast.layout.label() in note
    assert "+11.1% slower predicted" in note and "-10.2% on the upper end" in note
    assert difference_note(job, slow, slow, upper) is None


def test_above_the_frontier_the_plans_own_interval_breaks_the_tie() -> None:
    """Runs published at 1% MFU put both results above the frontier, whose floor (the job's
    FLOPs at 1% MFU) is every layout's upper end; then the covered one ranks first (its own
    end t / 0.8: q 0.01 + 0.19 for the MFU) over the ZeRO 3 one 10% faster that no run covers
    (0.9 t / 0.61: two uncovered features), not the faster prediction."""
    job, slow = _priced(PlanScenario(**SMALL, **GIVEN, zero=1))  # type: ignore[arg-type]
    fast = replace(slow, layout=replace(slow.layout, zero=3), iteration_s=slow.iteration_s * 0.9,
                   mfu=slow.mfu / 0.9)
    upper = Ranking("upper", _around(features(job, slow.layout), mfu=0.01))
    assert upper.high(job, slow) == pytest.approx(upper.high(job, fast))
    assert upper.high(job, slow) == pytest.approx(slow.iteration_s * slow.mfu / 0.01)
    assert upper.key(job, slow)[1] == pytest.approx(slow.iteration_s / 0.8)
    assert upper.key(job, fast)[1] == pytest.approx(fast.iteration_s / 0.61)
    assert min([slow, fast], key=lambda r: upper.key(job, r)) is slow


def test_order_is_a_lower_bound_on_the_key() -> None:
    """What the search prunes with never exceeds what it ranks by."""
    job, result = _priced(PlanScenario(**SMALL, **GIVEN, zero=3))  # type: ignore[arg-type]
    for ranking in (Ranking("upper"), Ranking("expected")):
        assert ranking.order(job, result.layout, result.bound_s) <= ranking.key(job, result)


def test_upper_search_is_exhaustively_right_and_plan_says_when_it_differs(monkeypatch
                                                                          ) -> None:
    """gpt-1.7b on 16 A100s at TP 1 PP 1 (36 layouts: microbatch 1/2/4, three recomputations,
    ZeRO 0-3): with a table around the point-best's features at ZeRO 0 (every other stage
    uncovered), ``plan``'s upper search returns one of the two best (upper end, iteration)
    of every layout that fits (it simulates its best two), not the point-best, and says so in
    a note naming both; ``expected`` returns the point-best, the best prediction."""
    from dlsched.job.api import plan
    from dlsched.job.search import _fits

    scenario = PlanScenario(**SMALL, tp=1, pp=1, baselines=False)  # type: ignore[arg-type]
    point = plan(scenario.model_copy(update={"objective": "expected"}))
    job, best = point.plans[0]
    table = _around(features(job, replace(best.layout, zero=0)))
    monkeypatch.setattr(intervals, "bundled_residuals", lambda: table)
    upper = Ranking("upper", table)
    every = [_priced(scenario.model_copy(update={
        "dp": 16, "chunks": 1, "schedule": "1f1b", "sequence_parallel": False,
        "microbatch_size": mb, "recompute": mode, "zero": zero}))[1]
        for mb in (1, 2, 4) for mode in ("none", "selective", "full") for zero in (0, 1, 2, 3)]
    fitting = [r for r in every if _fits(job, r.layout)]
    assert min(r.iteration_s for r in fitting) == pytest.approx(best.iteration_s)
    keys = sorted(upper.key(job, r) for r in fitting)
    report = plan(scenario)
    _, chosen = report.plans[0]
    assert upper.key(job, chosen) <= keys[1] and best.layout.zero != 0
    assert chosen.layout != best.layout
    assert any(note.startswith("--objective upper chose") and best.layout.label() in note
               for note in report.notes)
    assert any(note.startswith("memory per GPU") for note in report.notes)


def test_an_unpriced_value_is_never_surer_than_a_priced_one() -> None:
    """Nine ZeRO 1 runs 30% off and a hundred ZeRO 0 runs 1% off: a ZeRO 1 plan's nearest runs
    are the nine (q 0.3); a ZeRO 2 plan, which no run has, has all 109 at distance 1, whose
    99th smallest |error| is 0.01. Its base is raised to the largest of the priced values'
    (0.3), so ``--objective upper`` cannot prefer the unchecked stage."""
    table = tuple([res(f"z1-{i}", 0.3, zero=1) for i in range(9)]
                  + [res(f"z0-{i}", 0.01, zero=0) for i in range(100)])
    checked, unchecked = feats(zero=1), feats(zero=2)
    assert base_half_width(checked, table) == pytest.approx(0.3)
    assert base_half_width(unchecked, table) == pytest.approx(0.01)
    assert intervals.unchecked_base(unchecked, table) == pytest.approx(0.3)
    assert intervals.unchecked_base(checked, table) == pytest.approx(0.3)  # priced: unchanged
    low = time_bounds(checked, 10.0, None, table)
    high = time_bounds(unchecked, 10.0, None, table)
    assert high.outside == ("ZeRO stage 2 (no priced run)",)
    assert high.q == pytest.approx(0.3 + widening(table)) and high.high >= low.high
