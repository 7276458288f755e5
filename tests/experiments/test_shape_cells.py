"""shape_cells: each cell's mean error, the rows with it divided out, and the split."""

from __future__ import annotations

import pytest

from dlsched.experiments.shape_cells import cell_errors, oracle_rows, split


def _row(tp: int, predicted_s: float, measured_s: float) -> dict[str, float]:
    return {"tp": tp, "predicted_s": predicted_s, "measured_s": measured_s}


ROWS = [_row(1, 0.9, 1.0), _row(1, 1.1, 1.0),   # TP 1: errors -10%, +10%: mean 0
        _row(2, 1.6, 2.0), _row(2, 2.4, 3.0)]   # TP 2: errors -20%, -20%: mean -20%


def test_cell_means_are_the_mean_signed_errors_of_their_rows() -> None:
    assert cell_errors(ROWS, lambda r: r["tp"]) == pytest.approx({1: 0.0, 2: -0.2})


def test_the_oracle_zeroes_each_cell_mean_and_keeps_the_spread_within() -> None:
    """TP 2's rows are both 20% fast: divided by 0.8 they are exact; TP 1's mean is already 0,
    so its rows keep their +-10%."""
    corrected = oracle_rows(ROWS, lambda r: r["tp"])
    assert [r["predicted_s"] for r in corrected] == pytest.approx([0.9, 1.1, 2.0, 3.0])
    assert ROWS[2]["predicted_s"] == 1.6  # the input rows are not changed


def test_split_between_and_within() -> None:
    """Between: the rows' |cell mean| averaged over the 4 rows, (0 + 0 + 0.2 + 0.2) / 4 = 0.1;
    within: the corrected rows' |error| (0.1 + 0.1 + 0 + 0) / 4 = 0.05, bias 0."""
    result = split(ROWS, lambda r: r["tp"])
    assert result["cells"] == 2
    assert result["between"] == pytest.approx(0.1)
    assert result["within"]["mean_abs_error"] == pytest.approx(0.05)
    assert result["within"]["bias"] == pytest.approx(0.0)


def test_one_cell_per_row_leaves_no_error_within() -> None:
    result = split(ROWS, lambda r: r["predicted_s"])
    assert result["within"]["mean_abs_error"] == pytest.approx(0.0)
    assert result["between"] == pytest.approx(0.15)  # (0.1 + 0.1 + 0.2 + 0.2) / 4
