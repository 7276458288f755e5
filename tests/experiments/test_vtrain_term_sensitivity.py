"""benchmarks.vtrain_term_sensitivity: the term substitution and the in-training all-reduce
read off vTrain's single-node rows (docs/validation.md, issue 49)."""

from __future__ import annotations

from functools import cache

from benchmarks import vtrain_term_sensitivity as sensitivity

from dlsched.experiments import vtrain


@cache
def priced() -> tuple[dict, ...]:
    return tuple(vtrain.price(row, index=i) for i, row in enumerate(vtrain.load_rows()))


def test_counts_are_the_decomposition_design_at_one_stage_and_1f1b_beyond():
    row = {"global_batch": 32, "dp": 2, "microbatch": 2, "pp": 1}  # m = 8 microbatches
    assert sensitivity.counts(row, 24) == dict(zip(vtrain.TERMS, (192, 8, 24, 1.0),
                                                   strict=True))
    # PP 4: 8 + 4 - 1 = 11 microbatch slots through a stage of 24 / 4 = 6 layers
    assert sensitivity.counts({**row, "pp": 4}, 24) == dict(zip(vtrain.TERMS, (66, 11, 6, 1.0),
                                                                strict=True))


def test_all_four_parts_measured_reproduce_the_one_stage_rows():
    # the measured parts are one least-squares fit per hidden, TP and microbatch over the PP 1
    # rows of every GPU count; only c and d differ with the DP degree (the gradient
    # all-reduce), so substituting all four leaves those rows at the fit's residual: 0.2% on
    # average, under 3% at worst (as priced: 10%)
    rows = [r for r in sensitivity.substituted(list(priced()), vtrain.TERMS)
            if r["pp"] == 1 and r["microbatch"] < 8]
    assert len(rows) == 648
    assert sum(abs(r["error"]) for r in rows) / len(rows) < 0.005
    assert max(abs(r["error"]) for r in rows) < 0.03
    # and no part substituted is the rows as priced
    assert sensitivity.substituted(list(priced()), ()) == [
        {**r, "error": r["predicted_s"] / r["measured_s"] - 1} for r in priced()]


def test_the_worst_groups_rank_tp2_microbatch2_first():
    found = sensitivity.misranked(list(priced()))
    top, count = found.most_common(1)[0]
    assert top == ("h2048", "TP 1, PP 1, mb 1", "TP 2, PP 1, mb 2") and count >= 10


def test_all_reduce_in_training_pairs():
    lines = sensitivity.all_reduce_in_training(list(priced()))
    # hidden 1024 and 2048: TP 2 mb 2 / 1, TP 2 mb 4 / 2, TP 4 mb 4 / 1
    assert len(lines) == 6
    assert all("per all-reduce of" in line for line in lines)
