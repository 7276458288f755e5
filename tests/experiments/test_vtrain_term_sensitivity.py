"""benchmarks.vtrain_term_sensitivity: the term substitution and the in-training all-reduce
read off vTrain's single-node rows (docs/validation.md, issue 49)."""

from __future__ import annotations

import re
from functools import cache

from benchmarks import vtrain_term_sensitivity as sensitivity

from dlsched.experiments import vtrain


@cache
def priced() -> tuple[dict, ...]:
    """Every vTrain row priced once for the module's tests."""
    return tuple(vtrain.price(row, index=i) for i, row in enumerate(vtrain.load_rows()))


def test_counts_are_the_decomposition_design_at_one_stage_and_1f1b_beyond() -> None:
    row = {"global_batch": 32, "dp": 2, "microbatch": 2, "pp": 1}  # m = 8 microbatches
    assert sensitivity.counts(row, 24) == dict(zip(vtrain.TERMS, (192, 8, 24, 1.0),
                                                   strict=True))
    # PP 4: 8 + 4 - 1 = 11 microbatch slots through a stage of 24 / 4 = 6 layers
    assert sensitivity.counts({**row, "pp": 4}, 24) == dict(zip(vtrain.TERMS, (66, 11, 6, 1.0),
                                                                strict=True))


def test_all_four_parts_measured_reproduce_the_one_stage_rows() -> None:
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


def test_the_worst_groups_rank_tp2_microbatch2_first() -> None:
    found = sensitivity.misranked(list(priced()))
    top, count = found.most_common(1)[0]
    assert top == ("h2048", "TP 1, PP 1, mb 1", "TP 2, PP 1, mb 2") and count >= 10


def test_all_reduce_in_training_pairs() -> None:
    lines = sensitivity.all_reduce_in_training(list(priced()))
    # hidden 1024 and 2048: TP 2 mb 2 / 1, TP 2 mb 4 / 2, TP 4 mb 4 / 1
    assert len(lines) == 6
    read = [re.search(r"-> (-?\d+) us per all-reduce of (\d+) MiB on \d GPUs \(nccl-tests "
                      r"(\d+) us", line) for line in lines]
    assert all(read)
    # the activation all-reduced: microbatch x 1024 tokens x hidden x 2 B
    assert [int(m[2]) for m in read] == [mb * 1024 * h * 2 // 2**20 for h in (1024, 2048)
                                         for mb in (2, 4, 4)]
    # hidden 2048: ~200 us each, above vTrain's own nccl-tests time for the size (docs)
    for m in read[3:]:
        assert 150 < int(m[1]) < 250 and int(m[1]) > int(m[3])
