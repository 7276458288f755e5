"""The mixture-of-experts rows: a row's model is a model file's type (``job.model_spec.Model``)
and reaches the evaluator as it is, the
Qwen3 MoE shapes count their models' parameters, and ``validate`` reports the MoE rows of
every source as their own line."""

from __future__ import annotations

import pytest

from dlsched.job.model_spec import Model, bundled_specs
from dlsched.ledger import load_ledger
from dlsched.ledger.formulas import parameter_count
from dlsched.ledger.predict import Prediction, job_and_layout, predict_row
from dlsched.ledger.schema import LedgerRow
from dlsched.ledger.score import source_stats, summarize

ROWS = {row.id: row for row in load_ledger()}
Q30 = "mbridge-moe-2602-gb200-qwen3-30b-a3b-mxfp8"
Q235 = "mbridge-moe-2602-b200-qwen3-235b-a22b-mxfp8"


def test_a_rows_model_is_the_one_model_type_and_reaches_the_evaluator_as_it_is() -> None:
    """No second copy of a model's fields: the ledger's model section is declared as
    ``Model``, a loaded row's model is a ``Model``, and the evaluator's job holds that same
    object (no translator)."""
    assert LedgerRow.model_fields["model"].annotation is Model
    row = ROWS[Q30]
    assert type(row.model) is Model
    job, _ = job_and_layout(ROWS["sc21-t1-gpt-1.7b"])
    assert job.spec is ROWS["sc21-t1-gpt-1.7b"].model


def test_qwen3_30b_a3b_counts_by_hand() -> None:
    """Per layer: QKV 2048 x (32 + 2 x 4) x 128 = 10,485,760, output 4096 x 2048 = 8,388,608,
    two RMSNorms 4,096, QK norms 256, router 2048 x 128 = 262,144, 128 experts of
    3 x 2048 x 768 = 4,718,592 each; x 48 layers = 29,909,790,720; untied 151,936 x 2048
    embeddings twice, 622,329,856, and the final norm 2,048: 30,532,122,624 (the card's 30.5B);
    8 of the 128 experts active: 3,353,032,704 (3.3B)."""
    shape = ROWS[Q30].model
    spec = shape
    assert spec.parameters() == parameter_count(shape) == 30_532_122_624
    assert spec.active_parameters() == 3_353_032_704
    assert (spec.head_dim, spec.attention_width, spec.qk_norm) == (128, 4096, True)
    assert (spec.experts, spec.top_k, spec.expert_ffn_hidden) == (128, 8, 768)


def test_qwen3_235b_a22b_counts_its_card() -> None:
    """235,093,634,560 parameters and 22.19B active (the card's 235B and 22B) by the
    evaluator's count and the ledger's independent formula alike."""
    shape = ROWS[Q235].model
    assert shape.parameters() == parameter_count(shape) == 235_093_634_560
    assert shape.active_parameters() == pytest.approx(22.19e9, rel=1e-3)


def test_a_rows_model_is_validated_as_a_model_file() -> None:
    """The row's fields read as a model file's; the sources' spellings ``norm`` and
    ``position_embedding`` are the file's ``rms_norm`` and ``learned_positions``; a dense row's
    absent experts are the file's 0; the same section as a file gives an equal model."""
    model = ROWS[Q30].model
    assert model.rms_norm and not model.learned_positions
    assert (model.head_dim, model.qk_norm, model.vocab) == (128, True, 151936)
    dense = next(row for row in ROWS.values() if not row.model.experts)
    assert dense.model.experts == 0
    document = ROWS["sc21-t1-gpt-1.7b"].model.model_dump()
    assert Model.load(document, "a file") == ROWS["sc21-t1-gpt-1.7b"].model
    assert not Model(layers=1, hidden=8, heads=2, seq=4, vocab=8, norm="layernorm",
                     position_embedding="rope").learned_positions


def test_gpt_oss_rows_are_priced_with_their_module_recomputation() -> None:
    """GPT-OSS's shape is stated (windows, sinks, biases; 116,829,156,672 parameters by both
    counts) and every row is priced with its scripts' per-module recomputation (the norms and
    the experts' activation rerun: ``job.compute.module_recompute``), which the backward
    pays for: without it the same row comes out faster. The Blackwell Ultra rows' scripts set
    no recomputation (the GB300 / B300 presets at df0289c name no modules) and are priced so."""
    from dataclasses import replace

    from dlsched.job.evaluation.evaluate import evaluate
    from dlsched.ledger.predict import job_and_layout
    rows = [row for row in ROWS.values() if row.model.name == "gpt-oss-120b"]
    assert len(rows) == 11
    for row in rows:
        assert parameter_count(row.model) == row.model.parameters() \
            == 116_829_156_672
        ultra = row.hardware.gpu in ("b300", "gb300")
        assert row.parallel.recompute_modules == (() if ultra else ("layernorm", "moe_act"))
        assert (row.parallel.recompute == "none") == ultra
        [prediction] = predict_row(row)
        assert prediction.predicted is not None and prediction.reason is None
    job, layout = job_and_layout(rows[0])
    assert layout.recompute == "modules:moe_act,layernorm"
    plain = evaluate(job, replace(layout, recompute="none"))
    assert evaluate(job, layout).iteration_s > plain.iteration_s


def test_expert_all_to_all_overlap_rows_run_merged() -> None:
    """A row whose script overlaps the EP All-to-Alls runs Megatron-Core's merged steps
    (``moe_a2a_overlap``, ``job.evaluation.a2a_overlap``) and comes out faster than the same
    row with its All-to-Alls blocking."""
    ids = [row.id for row in ROWS.values() if "ep_a2a" in row.parallel.overlap]
    assert len(ids) == 13  # with DeepSeek-V3 26.04.01 on B200 (DeepEP) and 26.08 on GB200,
    # 26.02's B300 Qwen3 235B-A22B (its preset's moe_a2a_overlap) and 26.08's two GB300 Qwen3
    for row_id in ids:
        assert ROWS[row_id].execution.run.moe_a2a_overlap
        [prediction] = predict_row(ROWS[row_id])
        assert prediction.predicted is not None, prediction.reason
    row = ROWS["mbridge-moe-2602-h100-qwen3-30b-a3b-fp8cs"]
    blocking = row.model_copy(update={"parallel": row.parallel.model_copy(update={
        "overlap": tuple(o for o in row.parallel.overlap if o != "ep_a2a")})})
    assert predict_row(row)[0].predicted > predict_row(blocking)[0].predicted


def _fake(row_id: str, error: float | None) -> Prediction:
    row = ROWS[row_id]
    published = row.measured[0].value
    predicted = None if error is None else published * (1 + error)
    return Prediction(row, row.measured[0].metric, published, predicted,
                      None if error is not None else "not priced", True, True)


def test_moe_line_takes_every_sources_moe_rows_and_nothing_else() -> None:
    """Two MoE rows (+10%, -20%) from two sources, one unpriced MoE row and a dense row at
    +50%: the moe line has 3 rows, 2 priced, mean |error| 15%, bias -5%; all has 4 rows."""
    dense = next(row.id for row in ROWS.values() if not row.model.experts)
    grok = next(row.id for row in ROWS.values()
                if row.model.experts and row.source == "dgxc")
    fakes = [_fake(Q30, 0.10), _fake(grok, -0.20), _fake(Q235, None), _fake(dense, 0.50)]
    _, stats = summarize(fakes, ["dgxc", "megatron-bridge-moe"])
    moe = next(s for s in stats if s.source == "moe")
    assert (moe.rows, moe.priced) == (3, 2)
    assert moe.mean_abs_error == pytest.approx(0.15)
    assert moe.mean_signed_error == pytest.approx(-0.05)
    assert next(s for s in stats if s.source == "all").rows == 4
    alone = source_stats("moe", "time", fakes[:3], [None, None, None])
    assert alone.mean_abs_error == pytest.approx(moe.mean_abs_error)


def test_every_bridge_moe_row_agrees_with_one_flop_count_per_token() -> None:
    """Each row's two published numbers (tokens/s and model TFLOP/s, in ``notes``) give one
    model-FLOP count per token per model within 1.5%: 23.0 GFLOP for Qwen3 30B-A3B, 148 GFLOP
    for 235B-A22B, 27.2 (30.7 at 8,192 tokens) for GPT-OSS 120B (the check that left df0289c's
    2,557 tokens/s out: 46 GFLOP), 260 GFLOP for DeepSeek-V3 with its MTP module, 249.4
    without (the 25.11 GB200 rows)."""
    per_token = {("qwen3-30b-a3b", 4096, 0): 23.0e9, ("qwen3-235b-a22b", 4096, 0): 148e9,
                 ("gpt-oss-120b", 4096, 0): 27.2e9, ("gpt-oss-120b", 8192, 0): 30.7e9,
                 ("deepseek-v3", 4096, 1): 260e9, ("deepseek-v3", 4096, 0): 249.4e9}
    rows = [row for row in ROWS.values() if row.source == "megatron-bridge-moe"]
    assert len(rows) == 70
    for row in rows:
        tflops = float(row.notes.split("published model TFLOP/s per GPU ")[1].split(";")[0])
        flop = tflops * 1e12 / row.value("tokens_per_s_per_gpu")
        expected = per_token[row.model.name, row.model.seq, row.model.mtp_layers]
        assert flop == pytest.approx(expected, rel=0.015), row.id


@pytest.mark.parametrize(("name", "count"), [
    ("deepseek-v3", 671_026_404_352), ("gpt-oss-120b", 116_829_156_672),
    ("qwen3-235b-a22b", 235_093_634_560), ("mixtral-8x7b", 46_702_792_704),
    ("llama4-maverick", None), ("llama4-scout", None), ("gpt-oss-20b", 20_914_757_184)])
def test_the_ledgers_own_count_agrees_with_the_evaluators_on_todays_shapes(
        name: str, count: int | None) -> None:
    """formulas.parameter_count (MLA, first-k-dense, sinks, interleaved MoE layers, biased
    routers counted on its own) equals job.model_spec's count, and the cards' where stated
    (DeepSeek-V3 671.0B, GPT-OSS 116.8B / 20.9B, Mixtral 46.7B); the shape round-trips to
    the same spec (a bundled model is the ledger's model type)."""
    spec = bundled_specs()[name]
    assert parameter_count(spec) == spec.parameters()
    if count is not None:
        assert spec.parameters() == count


def test_validate_shows_the_moe_line_beside_a_source_with_moe_rows_only() -> None:
    """``validate("megatron-bridge-moe")`` reports its line, ``moe`` and ``all``; the moe
    line's rows are every source's MoE rows (the source's 45, dgxc's Grok 1 and its five
    DeepSeek-V3 rows: 51); a dense source's
    report has no moe line."""
    from dlsched.ledger.report import validate

    report = validate("megatron-bridge-moe")
    lines = {(s["source"], s["family"]): s for s in report.sources}
    assert {name for name, _ in lines} == {"megatron-bridge-moe", "moe", "all"}
    moe_rows = sum(1 for row in ROWS.values() if row.model.experts)
    assert lines["moe", "time"]["rows"] == moe_rows == 76
    assert lines["moe", "time"]["priced"] >= lines["megatron-bridge-moe", "time"]["priced"]
    assert "moe" not in {s["source"] for s in validate("sc21").sources}
