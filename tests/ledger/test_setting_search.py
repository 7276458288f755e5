"""Rows with unpublished settings against dlsched's best over them (``ledger.setting_search``)."""

from __future__ import annotations

import json
from functools import cache

import pytest
from typer.testing import CliRunner

from dlsched.cli.app import app
from dlsched.ledger import load_ledger
from dlsched.ledger.predict import predict_row
from dlsched.ledger.schema import LedgerRow
from dlsched.ledger.setting_search import (
    Candidate,
    SettingSearch,
    candidates,
    filled,
    search,
    search_rows,
    searchable,
)


@cache
def _row(row_id: str) -> LedgerRow:
    return next(row for row in load_ledger() if row.id == row_id)


def test_candidates_of_the_70b_row_by_hand() -> None:
    """70B: global batch 384 over DP 48 = 8 sequences per replica, micro-batch 1, 2, 4, 8;
    84 layers over PP 2 = 42 per stage, VP any divisor of 42 (8) while the 8, 4, 2
    microbatches are a multiple of PP 2, VP 1 only at micro-batch 8 (one microbatch):
    3 x (3 x 8) + 3 x 1 = 75 settings."""
    settings = candidates(_row("megatron-h100-gpt-70b"))
    assert len(settings) == 75 == len(set(settings))
    assert {c for size, _, c in settings if size == 4} == {1, 2, 3, 6, 7, 14, 21, 42}
    assert {(mode, c) for size, mode, c in settings if size == 8} == \
        {("none", 1), ("selective", 1), ("full", 1)}


def test_a_pp1_row_keeps_its_published_vp() -> None:
    """1.7B: PP 1 (VP 1 published), 192 / 48 = 4 per replica: 3 sizes x 3 modes."""
    settings = candidates(_row("megatron-h100-gpt-1.7b"))
    assert sorted(settings) == sorted((size, mode, 1) for size in (1, 2, 4)
                                      for mode in ("none", "selective", "full"))


def test_the_best_is_the_best_admitted_of_every_setting() -> None:
    """Exhaustive on the 32B row: every setting priced by hand through ``predict_row``."""
    row = _row("megatron-h100-gpt-32b")
    found = search(row)
    priced = []
    for size, mode, chunks in candidates(row):
        prediction = next(p for p in predict_row(filled(row, size, mode, chunks))
                          if p.metric == "model_tflops_per_gpu")
        priced.append((prediction.predicted, prediction.admitted, (size, mode, chunks)))
    admitted = max(p for p in priced if p[1])
    assert found.priced == len(priced) == 9
    assert found.best is not None
    assert found.best.predicted == admitted[0]
    assert (found.best.microbatch_size, found.best.recompute, found.best.chunks) == admitted[2]
    refused = [p for p in priced if not p[1] and p[0] > admitted[0]]
    assert (found.best_refused is None) == (not refused)


def test_headroom_sign_for_rates_and_times() -> None:
    """A rate: best / published - 1; a time: published / best - 1; both > 0 when dlsched's
    best setting is faster than the run."""
    row = _row("megatron-h100-gpt-1.7b")
    fast = Candidate(4, "none", 1, 500.0, True, 40.0)
    rate = SettingSearch(row, "model_tflops_per_gpu", 400.0, fast, None, 9)
    assert rate.headroom(fast) == pytest.approx(0.25)
    quick = Candidate(4, "none", 1, 2.0, True, 40.0)
    time = SettingSearch(row, "iteration_s", 2.5, quick, None, 9)
    assert time.headroom(quick) == pytest.approx(0.25)
    assert rate.headroom(None) is None
    assert rate.record()["setting"] == "mb 4, none, VP 1"


def test_only_rows_with_searchable_gaps_are_searched() -> None:
    assert not searchable(_row("sc21-t1-gpt-1.7b"))  # supported
    precision = _row("megatron-bridge-2509-h100-llama3.1-405b-cp2")  # precision unpublished
    assert not searchable(precision)
    with pytest.raises(ValueError, match="not searched"):
        search(precision)
    assert [found.row.source for found in search_rows(load_ledger())] == ["megatron-h100"] * 9


def test_model_tflops_is_megatrons_flop_count() -> None:
    """The metric counts Megatron-Core r0.8.0's num_floating_point_operations: for the 1.7B
    GPT (B 192, s 4096, L 24, h 2048, V 131,072, 4h FFN, no GQA)
    12 B s L h^2 (1 + 1 + s/h + 4 + V / 2Lh) = 12 x 192 x 4096 x 24 x 2048^2 x 9.3333
    = 8.8665e15 FLOP per iteration, whatever the recomputation."""
    row = _row("megatron-h100-gpt-1.7b")
    flops = 12 * 192 * 4096 * 24 * 2048**2 * (1 + 1 + 4096 / 2048 + 4
                                              + 131072 / (2 * 24 * 2048))
    assert flops == pytest.approx(8.8665e15, rel=1e-4)
    for mode in ("none", "full"):
        prediction = next(p for p in predict_row(filled(row, 2, mode, 1))
                          if p.metric == "model_tflops_per_gpu")
        iteration = prediction.breakdown["iteration_s"]
        assert prediction.predicted * 1e12 * iteration * 48 == pytest.approx(flops, rel=1e-9)


def test_no_published_rate_beats_dlscheds_best() -> None:
    """The one-sided check on the bundled rows: every run at most dlsched's best admitted
    setting (a slower evaluator, or a memory check refusing what ran, fails it)."""
    found = search_rows(load_ledger("megatron-h100"))
    assert len(found) == 9
    for each in found:
        assert each.best is not None, each.row.id
        assert each.headroom(each.best) >= 0, each.row.id


def test_validate_prints_and_writes_the_bounds() -> None:
    result = CliRunner().invoke(app, ["validate", "--source", "megatron-h100", "--json"])
    assert result.exit_code == 0, result.output
    bounds = json.loads(result.output)["bounds"]
    assert [b["id"] for b in bounds] == [row.id for row in load_ledger("megatron-h100")]
    assert all(b["unit"] == "model TFLOP/s per GPU" and b["best"] > 0 for b in bounds)
    table = CliRunner().invoke(app, ["validate", "--source", "megatron-h100"])
    assert table.exit_code == 0
    assert "Published rate above dlsched's best: 0 of 9 rows" in table.output


def test_model_tflops_equals_the_executed_rate_without_recomputation() -> None:
    """Without recomputation every FLOP executed is a model FLOP; with full recomputation the
    executed rate counts the layers' forward again: more than the model rate."""
    row = _row("megatron-h100-gpt-1.7b")
    data = filled(row, 4, "none", 1).model_dump(exclude_unset=True)
    data["measured"] = [{"metric": "tflops_per_gpu", "value": 1.0},
                        {"metric": "model_tflops_per_gpu", "value": 1.0}]
    plain = {p.metric: p.predicted for p in predict_row(LedgerRow.model_validate(data))}
    assert plain["model_tflops_per_gpu"] == pytest.approx(plain["tflops_per_gpu"], rel=1e-12)
    data["parallel"]["recompute"] = "full"
    full = {p.metric: p.predicted for p in predict_row(LedgerRow.model_validate(data))}
    assert full["tflops_per_gpu"] > 1.2 * full["model_tflops_per_gpu"]
