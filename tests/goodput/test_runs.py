"""The published runs (goodput/data/runs.yaml) priced at the default parameters."""

from __future__ import annotations

from dlsched.goodput.runs import load_runs, price_runs
from dlsched.goodput.time_to_train import Settings


def _row(run: str, metric: str) -> dict[str, object]:
    return next(r for r in price_runs() if r["run"] == run and r["metric"] == metric)


def test_every_run_has_a_citation_and_figures() -> None:
    runs = load_runs()
    assert {r.name for r in runs} >= {"llama3-405b", "opt-175b", "bloom-176b",
                                      "megascale-12288", "kokolis-rsc-1024"}
    assert all(r.citation and r.figures for r in runs)


def test_llama3_effective_training_time_within_three_points() -> None:
    """Published: higher than 90%; predicted at default parameters (the failure rate from
    BLOOM's and OPT-175B's logs; restart, checkpoint and storage are not fitted to the row)
    within 3 points of 90%."""
    row = _row("llama3-405b", "goodput")
    assert abs(row["error"]) <= 0.03  # type: ignore[arg-type]


def test_llama3_interruptions_per_day_within_thirty_percent() -> None:
    """Held out: the default rate does not come from the Llama 3 row. Its 419 unexpected
    interruptions (the failure process) and all 466 (47 planned) are both within 30% of the
    predicted 502.7 in 54 days (+20%, +8%)."""
    for metric in ("unexpected_interruptions", "interruptions"):
        row = _row("llama3-405b", metric)
        assert not row["defines_default"]
        assert abs(row["error"]) <= 0.30  # type: ignore[arg-type]


def test_the_default_comes_from_bloom_and_opt_only() -> None:
    """The runs flagged as defining the default are BLOOM's and OPT-175B's, and at the default
    each is within its 4% spread (the two logs' rates differ by 3.6%)."""
    defining = [r for r in price_runs() if r["defines_default"]]
    assert {r["run"] for r in defining} == {"bloom-176b", "opt-175b"}
    assert all(abs(r["error"]) < 0.02 for r in defining)  # type: ignore[arg-type]


def test_a_higher_failure_rate_lowers_every_goodput() -> None:
    base = {(r["run"], r["metric"]): r["predicted"] for r in price_runs()}
    worse = price_runs(Settings(mtbf_gpu_hours=10000.0))
    for row in worse:
        if row["metric"] == "goodput":
            assert row["predicted"] < base[(row["run"], "goodput")]
