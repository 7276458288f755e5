"""The robust estimators of the prediction's inputs: compute slowdown per size (median over
ranks and repeats, non-decreasing fit in size) and its per-rank factor from thread CPU time.
Pure functions: no torch, no ranks."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlsched.runtime.dataparallel.calibrate import _compute_factor, monotone_fit, robust_slowdowns


def test_one_starved_rank_does_not_lift_the_factor() -> None:
    """Four ranks, three at 2x and one starved at 70x in every repeat: the median over ranks
    gives 2 where the old mean over ranks gave (3 x 2 + 70) / 4 = 19."""
    rows = [[2.0, 2.0, 70.0, 2.0], [2.0, 70.0, 2.0, 2.0], [2.1, 1.9, 2.0, 70.0]]
    assert robust_slowdowns([(4096, rows)]) == [(4096, pytest.approx(2.0))]


def test_medians_over_repeats_then_monotone_in_size_by_hand() -> None:
    """Per size: median over ranks per repeat, then median over repeats; sizes given out of
    order are sorted. 4 KiB: repeats 2, 3, 2 -> 2; 16 KiB: 6, 6, 1 -> 6 (one quiet repeat
    dropped); 64 KiB: 3, below 16 KiB's 6, so the two pool to (6 + 3) / 2 = 4.5; 1 MiB: 8.
    Factors below 1 count as 1 (compute beside a message is never faster)."""
    samples = [
        (65536, [[3.0, 3.0, 3.0]] * 3),
        (4096, [[2.0, 2.0, 9.0], [3.0, 3.0, 3.0], [2.0, 1.0, 2.0]]),
        (16384, [[6.0, 6.0, 6.0], [6.0, 5.0, 7.0], [1.0, 1.0, 1.0]]),
        (2**20, [[8.0, 8.0, 8.0]] * 3),
    ]
    assert robust_slowdowns(samples) == [(4096, 2.0), (16384, 4.5), (65536, 4.5),
                                         (2**20, 8.0)]
    below_one = [(4096, [[0.5, 0.5]]), (8192, [[0.8, 0.9]])]
    assert robust_slowdowns(below_one) == [(4096, 1.0), (8192, 1.0)]


def test_monotone_fit_by_hand() -> None:
    """Pool adjacent violators: [1, 3, 2, 4] -> the 3, 2 pair pools to 2.5; a decreasing run
    pools to its mean; a non-decreasing sequence is unchanged."""
    assert monotone_fit([1.0, 3.0, 2.0, 4.0]) == [1.0, 2.5, 2.5, 4.0]
    assert monotone_fit([3.0, 2.0, 1.0]) == [2.0, 2.0, 2.0]
    assert monotone_fit([1.0, 5.0, 2.0, 2.0, 6.0]) == [1.0, 3.0, 3.0, 3.0, 6.0]
    assert monotone_fit([1.0, 1.0, 2.0]) == [1.0, 1.0, 2.0]
    assert monotone_fit([]) == []


@given(st.lists(st.floats(0.0, 100.0), max_size=9))
def test_monotone_fit_is_the_closest_non_decreasing_sequence(values: list[float]) -> None:
    """The fit is non-decreasing, keeps the sum (each pool is replaced by its mean), and no
    non-decreasing sequence of pooled means of contiguous runs is closer in least squares
    (exhaustive over every split into contiguous runs: the isotonic optimum is one of them)."""
    fitted = monotone_fit(values)
    assert len(fitted) == len(values)
    assert all(a <= b + 1e-9 for a, b in itertools.pairwise(fitted))
    assert sum(fitted) == pytest.approx(sum(values), abs=1e-6)
    error = sum((f - v) ** 2 for f, v in zip(fitted, values, strict=True))
    for cuts in itertools.product((False, True), repeat=max(len(values) - 1, 0)):
        runs, start = [], 0
        for index, cut in enumerate(cuts, start=1):
            if cut:
                runs.append(values[start:index])
                start = index
        runs.append(values[start:])
        candidate = [sum(run) / len(run) for run in runs if run for _ in run]
        if all(a <= b for a, b in itertools.pairwise(candidate)):
            assert error <= sum((c - v) ** 2 for c, v in zip(candidate, values,
                                                               strict=True)) + 1e-6


def test_compute_factor_from_cpu_shares_by_hand() -> None:
    """Alone the compute thread gets half a core (4 ranks on 2 cores); beside the all-reduce
    a quarter: 2x as slow. A thread that got no CPU at all is capped at 1000x, not inf."""
    assert _compute_factor(0.5, 0.25) == pytest.approx(2.0)
    assert _compute_factor(0.5, 0.5) == pytest.approx(1.0)
    assert _compute_factor(0.5, 0.0) == pytest.approx(1000.0)
