"""The column rules of ``report.columns``: each states a header and format once."""

from __future__ import annotations

from dlsched.report import Column
from dlsched.report.columns import (
    STANDARD,
    beside_paper,
    percents,
    seconds,
    standard,
    text,
    times,
)
from dlsched.report.tables import as_ratio, fixed, in_ms, in_percent, in_us, seconds_as_ms


def test_text_columns_are_left_aligned_and_headed_by_their_key():
    assert text("policy", "recompute_allowed") == [
        Column("policy", "policy", justify="left"),
        Column("recompute_allowed", "recompute allowed", justify="left")]


def test_times_are_shown_in_milliseconds_with_the_unit_in_the_header():
    iteration, bound = times(iteration_s="iteration", bound_s="bound")
    assert (iteration.key, iteration.header, bound.header) == \
        ("iteration_s", "iteration (ms)", "bound (ms)")
    assert iteration.fmt(0.0123456) == "12.346" and iteration.fmt is seconds_as_ms


def test_seconds_and_percents_name_their_unit_in_the_header():
    (iteration,) = seconds(iteration_s="iteration")
    error, mfu = percents(in_percent(1, signed=True), error="error", mfu="MFU")
    assert (iteration.header, error.header, mfu.header) == ("iteration (s)", "error (%)",
                                                           "MFU (%)")
    assert (iteration.fmt(1.23456), error.fmt(0.0314), error.fmt(-0.0314)) == \
        ("1.235", "+3.1", "-3.1")
    assert percents(coverage="covered")[0].fmt(0.5) == "50.00"


def test_formatters_scale_to_the_unit_with_the_decimals_asked():
    assert (in_ms(2)(0.0123456), in_us(1)(0.0000123456), in_percent(0)(0.456),
            fixed(1)(12.34)) == ("12.35", "12.3", "46", "12.3")


def test_beside_paper_pairs_our_key_with_the_papers_in_one_format():
    ours, paper = beside_paper("themis_avg", "Themis avg", as_ratio)
    assert (ours.key, paper.key, paper.header) == ("themis_avg", "paper_themis_avg", "paper")
    assert ours.fmt is paper.fmt is as_ratio


def test_standard_metrics_are_one_column_each():
    assert standard("dp", "time_over_bound") == [STANDARD["dp"], STANDARD["time_over_bound"]]
    assert STANDARD["time_over_bound"].fmt(1.234) == "1.23x"
    assert (STANDARD["mfu"].header, STANDARD["mfu"].fmt(0.4567)) == ("MFU (%)", "45.7")
