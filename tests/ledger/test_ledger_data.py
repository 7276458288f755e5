"""The ledger's data: every file loads under the schema, the configurations are consistent,
and the published numbers agree with each other and with the papers' own formulas."""

from __future__ import annotations

import tomllib
from collections import Counter
from importlib import resources
from pathlib import Path

import pytest
import yaml

from dlsched.errors import ConfigError
from dlsched.job.evaluation.pipeline_split import stage_layers
from dlsched.ledger import SOURCES, load_ledger
from dlsched.ledger.formulas import (
    korthikanti_model_flops,
    parameter_count,
    sc21_iteration_flops,
    sc21_training_days,
)
from dlsched.ledger.schema import LedgerRow, Measurement

ROWS = load_ledger()
BY_ID = {row.id: row for row in ROWS}
A100_PEAK = 312e12  # FLOP/s, A100 dense FP16/BF16 (datasheet), the peak both papers use


def test_every_source_loads_with_its_published_row_count() -> None:
    counts = Counter(row.source for row in ROWS)
    assert counts == {"sc21": 10, "korthikanti": 8, "megatron-h100": 9, "torchtitan": 42,
                      "megatron-bridge": 15, "dgxc": 20, "megatron-bridge-moe": 70}
    assert len(ROWS) >= 50
    assert [row.id for row in load_ledger("korthikanti")] == \
        [row.id for row in ROWS if row.source == "korthikanti"]


def test_ids_are_unique_across_the_raw_files() -> None:
    ids = []
    for source in SOURCES:
        text = resources.files("dlsched").joinpath(f"ledger/data/{source}.yaml").read_text()
        ids += [entry["id"] for entry in yaml.safe_load(text)]
    assert len(ids) == len(set(ids)) == len(ROWS)


def test_unknown_source_is_refused_with_the_accepted_ones() -> None:
    with pytest.raises(ConfigError, match=r"^source: 'sc22'.*accepted: sc21, korthikanti"):
        load_ledger("sc22")


def test_validate_source_help_names_every_source() -> None:
    """``validate --source``'s help lists every ledger source (it once omitted
    megatron-bridge-moe), each by its exact name."""
    import re
    from typing import get_type_hints

    from dlsched.cli.validate import validate

    help_text = get_type_hints(validate, include_extras=True)["source"].__metadata__[0].help
    listed = re.search(r"rows: ([^(]*) \(", help_text).group(1)
    assert [name.strip() for name in listed.split(",")] == list(SOURCES)


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.id)
def test_parallel_degrees_compose_to_the_gpu_count(row: LedgerRow) -> None:
    """tp x pp x dp x cp covers the job; EP divides the data-parallel group within the expert
    layers (Megatron-LM), so it must divide dp x cp and does not enter the product; with an
    expert TP of its own (MoE parallel folding) EP x expert TP divides a stage's tp x cp x dp
    ranks."""
    par = row.parallel
    assert par.tp * par.pp * par.dp * par.cp == row.hardware.gpus
    if par.expert_tp is None:
        assert (par.dp * par.cp) % par.ep == 0
    else:
        assert (par.tp * par.dp * par.cp) % (par.ep * par.expert_tp) == 0
    assert row.hardware.gpus % row.hardware.gpus_per_node == 0 or \
        row.hardware.gpus < row.hardware.gpus_per_node


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.id)
def test_batches_and_stages_divide(row: LedgerRow) -> None:
    par, model = row.parallel, row.model
    if par.microbatch_size is not None:
        assert par.global_batch % (par.microbatch_size * par.dp) == 0
    if par.chunks is not None and row.supported and row.source not in ("torchtitan",
                                                                        "megatron-bridge"):
        # Megatron-LM (2021-2022) requires equal layers per (virtual) stage, Megatron-Core as
        # NeMo (dgxc) runs it the row's split (126 + 2 over 64 for its 405B) or layout
        # (DeepSeek-V3's, with its MTP module); torchtitan splits at user-given points (its
        # 405B: 126 layers over 8 stages), Megatron-Bridge's dense rows do not say how theirs
        # split; a refused row may be refused for its split
        stage_layers(model.layers, par.pp, par.chunks, row.execution.pipeline_split,
                     model.mtp_layers)
    assert model.heads % par.tp == 0 and model.kv_heads % par.tp in (0, model.kv_heads)


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.id)
def test_a_supported_row_has_everything_the_evaluator_needs(row: LedgerRow) -> None:
    """A supported row states everything (CP rows their algorithm, MoE rows their router's
    balance); ledger.predict and the evaluator refuse what they cannot price with reasons of
    their own, so no supported row carries a reason that could go stale."""
    par = row.parallel
    if row.supported:
        assert row.unpublished == () and row.reason is None
        assert par.precision in ("bf16", "fp16") or par.fp8_recipe is not None
        assert par.cp == 1 or par.cp_algorithm in ("ring", "all-to-all", "all-gather")
        assert not row.model.experts or row.model.router_balance is not None
    else:
        assert row.reason
    assert (par.ep > 1 or par.expert_tp is not None) <= (row.model.experts > 0)


# Parameter counts. Hand-checked: GPT-3 175B (h 12288, l 96, V 51200, s 2048, tied, biases,
# LayerNorm): 12 l h^2 = 173,946,175,488 + per layer 4h + (f + h) biases + 4h norms = 159,744
# x 96 = 15,335,424 + token embeddings 629,145,600 + positions 25,165,824 + final norm 24,576
# = 174,615,846,912. Llama 3.1 8B: 2 x 128256 x 4096 = 1,050,673,152 + 32 x (2 x 4096^2 +
# 2 x 4096 x 1024 + 3 x 4096 x 14336 + 2 x 4096 = 218,112,000) + 4096 = 8,030,261,248 (Meta's
# published count). Llama 3.1 70B likewise 70,553,706,496 (Meta's published count).
HAND_COUNTS = {
    "korthikanti-t5-175b-full": 174_615_846_912,
    "torchtitan-2412-t1-8b-fsdp": 8_030_261_248,
    "torchtitan-2506-asynctp-70b-bf16-vanilla-tp": 70_553_706_496,
}
# Published sizes that are rounded labels further than 1% from their shapes (shape count /
# label - 1): SC21's "1.7" and "3.6" (Table 1 prints 1.7 and 3.6 for 1.652B and 3.562B),
# Megatron's H100 "1.7B" (1.745B) and "32B" (31.48B).
LABEL_DEVIATIONS = {
    "sc21-t1-gpt-1.7b": -0.0281,
    "sc21-t1-gpt-3.6b": -0.0105,
    "megatron-h100-gpt-1.7b": 0.0267,
    "megatron-h100-gpt-32b": -0.0163,
}


@pytest.mark.parametrize("row_id", sorted(HAND_COUNTS))
def test_parameter_count_matches_the_hand_count(row_id: str) -> None:
    assert parameter_count(BY_ID[row_id].model) == HAND_COUNTS[row_id]


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.id)
def test_shapes_give_the_published_parameter_counts(row: LedgerRow) -> None:
    deviation = parameter_count(row.model) / row.model.params_published - 1
    expected = LABEL_DEVIATIONS.get(row.id)
    if expected is None:
        assert abs(deviation) < 0.01
    else:
        assert deviation == pytest.approx(expected, abs=5e-4)


def test_parameter_count_of_a_moe_layer_holds_every_expert() -> None:
    dense = BY_ID["torchtitan-2412-t1-8b-fsdp"].model
    moe = dense.model_copy(update={"experts": 8, "top_k": 2})
    h, f = dense.hidden, dense.ffn_hidden
    assert parameter_count(moe) - parameter_count(dense) == dense.layers * (7 * 3 * h * f + 8 * h)


def test_sc21_eq3_and_eq4_reproduce_the_papers_84_days_for_1t() -> None:
    """SC21 Section 5.1: the 1T model on 3072 A100s at 163 TFLOP/s (Table 1's last row) trains
    450B tokens in about 84 days by Eq. 4, 8TP/(nX). Eq. 3 for that row: 96 x 3072 x 2048 x
    128 x 25600^2 x (1 + 2048/153600 + 51200/3276800) = 5.1390e19 FLOP per iteration, i.e.
    102.6 s per iteration at 163 TFLOP/s on 3072 GPUs; 450e9 / (3072 x 2048) = 71,526
    iterations = 85.0 days (Eq. 3 counts the attention and logit terms Eq. 4 drops)."""
    row = BY_ID["sc21-t1-gpt-1008b"]
    rate = row.measured[0].si()
    days = sc21_training_days(parameter_count(row.model), 450e9, row.hardware.gpus, rate)
    assert days == pytest.approx(84, abs=0.5)
    flops = sc21_iteration_flops(row.model, row.parallel.global_batch)
    assert flops == pytest.approx(5.1390e19, rel=1e-4)
    iteration_s = flops / (rate * row.hardware.gpus)
    assert iteration_s == pytest.approx(102.6, abs=0.05)
    iterations = 450e9 / (row.parallel.global_batch * row.model.seq)
    assert iterations * iteration_s / 86400 == pytest.approx(85.0, abs=0.05)


@pytest.mark.parametrize("row", load_ledger("sc21"), ids=lambda row: row.id)
def test_sc21_tflops_stay_under_the_a100_peak_and_match_the_existing_table(row: LedgerRow) -> None:
    """The ledger's SC21 rows are the facts dlsched.experiments.megatron already prices."""
    from dlsched.experiments.megatron import ROWS as MEGATRON_ROWS

    mine = next(r for r in MEGATRON_ROWS if r.layers == row.model.layers)
    par = row.parallel
    assert (mine.hidden, mine.heads, mine.tp, mine.pp, mine.gpus, mine.batch, mine.microbatch,
            mine.chunks) == (row.model.hidden, row.model.heads, par.tp, par.pp,
                             row.hardware.gpus, par.global_batch, par.microbatch_size,
                             par.chunks)
    assert mine.published_tflops == row.value("tflops_per_gpu")
    assert mine.torch_ddp == ("dp_grad_reduce" in par.overlap)
    assert mine.iteration_flops() == pytest.approx(
        sc21_iteration_flops(row.model, par.global_batch), rel=1e-12)
    assert row.measured[0].si() < A100_PEAK


@pytest.mark.parametrize("row", [r for r in load_ledger("korthikanti") if r.value("mfu")],
                         ids=lambda row: row.id)
def test_korthikanti_mfu_agrees_with_its_iteration_time(row: LedgerRow) -> None:
    """MFU = model FLOP (72 B s l h^2 (1 + s/6h + V/12hl)) / (time x GPUs x 312 TFLOP/s):
    e.g. 175B, 64 GPUs, 13.75 s: 1.4109e17 / 2.7456e17 = 51.39% (published 51.4%)."""
    flops = korthikanti_model_flops(row.model, row.parallel.global_batch)
    mfu = flops / (row.value("iteration_s") * row.hardware.gpus * A100_PEAK)
    assert mfu == pytest.approx(row.value("mfu"), abs=0.002)
    assert row.value("hfu") >= row.value("mfu")


def test_korthikanti_pairs_differ_only_in_recomputation_and_sequence_parallelism() -> None:
    rows = load_ledger("korthikanti")
    for full, present in zip(rows[::2], rows[1::2], strict=True):
        assert (full.parallel.recompute, full.parallel.sequence_parallel) == ("full", False)
        assert (present.parallel.recompute, present.parallel.sequence_parallel) == \
            ("selective", True)
        same = {"recompute", "sequence_parallel"}
        assert full.parallel.model_dump(exclude=same) == present.parallel.model_dump(exclude=same)
        assert full.model == present.model and full.hardware == present.hardware
        assert present.value("iteration_s") < full.value("iteration_s")


# Megatron-LM README H100 table, last column: aggregate petaFLOP/s (images/model_table.png).
H100_AGGREGATE_PFLOPS = {"1.7b": 19.6, "7.1b": 44.7, "16b": 93.9, "32b": 176.5, "70b": 322.3,
                         "119b": 645.9, "177b": 997.2, "314b": 1457.4, "462b": 2825.6}


@pytest.mark.parametrize("row", load_ledger("megatron-h100"), ids=lambda row: row.id)
def test_megatron_h100_columns_agree(row: LedgerRow) -> None:
    """Per-GPU TFLOP/s x GPUs rounds to the published aggregate, and MFU (whole percent) is
    per-GPU TFLOP/s over H100 SXM's dense BF16 peak (989 TFLOP/s, datasheet 989.4: the 462B
    row's 459.9 TFLOP/s is 46.50% of 989 and 46.48% of 989.4, printed 47%)."""
    tflops = row.value("model_tflops_per_gpu")
    aggregate = H100_AGGREGATE_PFLOPS[row.id.removeprefix("megatron-h100-gpt-")]
    assert round(tflops * row.hardware.gpus / 1000, 1) == aggregate
    assert abs(tflops / 989.0 - row.value("mfu")) <= 0.005


def test_torchtitan_memory_fits_the_gpu_and_tps_falls_with_context() -> None:
    capacity = {"h100-hbm2e-96gb": 96e9, "h200": 141e9, "b200": 180e9,  # bytes, NVIDIA datasheets
                "mi300x": 192e9}  # AMD Instinct MI300X data sheet
    rows = load_ledger("torchtitan")
    for row in rows:
        memory = next((m for m in row.measured if m.metric == "memory_gib_per_gpu"), None)
        if memory is not None:
            assert memory.si() < capacity[row.hardware.gpu]
    table2 = [row for row in rows if "-t2-" in row.id]
    assert [row.parallel.cp for row in table2] == [1, 2, 4, 8]
    assert all(row.model.seq == 32768 * row.parallel.cp for row in table2)
    tps = [row.value("tokens_per_s_per_gpu") for row in table2]
    assert tps == sorted(tps, reverse=True)


def test_measurements_convert_to_internal_units() -> None:
    assert Measurement(metric="tflops_per_gpu", value=137).si() == 137e12
    assert Measurement(metric="memory_gib_per_gpu", value=82.4).si() == 82.4 * 2**30
    assert Measurement(metric="iteration_s", value=1.42).unit == "s"


def _row_dict(row_id: str) -> dict:
    return BY_ID[row_id].model_dump()


def test_schema_refuses_an_unsupported_row_without_reason() -> None:
    data = _row_dict("torchtitan-2412-t1-8b-fsdp") | {"supported": False}
    with pytest.raises(ValueError, match="needs a reason"):
        LedgerRow.model_validate(data)


def test_schema_refuses_an_empty_field_not_declared_unpublished() -> None:
    data = _row_dict("sc21-t1-gpt-39.1b")
    data["parallel"]["microbatch_size"] = None
    with pytest.raises(ValueError, match="unpublished must name"):
        LedgerRow.model_validate(data)
    data["unpublished"] = ["microbatch_size"]
    assert LedgerRow.model_validate(data).parallel.microbatch_size is None


def test_schema_refuses_unknown_fields_and_repeated_metrics() -> None:
    data = _row_dict("sc21-t1-gpt-39.1b")
    with pytest.raises(ValueError, match="extra"):
        LedgerRow.model_validate(data | {"tflops": 138})
    data["measured"] = [{"metric": "tflops_per_gpu", "value": 1}] * 2
    with pytest.raises(ValueError, match="at most once"):
        LedgerRow.model_validate(data)


def test_the_yaml_files_are_installed_as_package_data() -> None:
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert "ledger/data/*.yaml" in pyproject["tool"]["setuptools"]["package-data"]["dlsched"]


# Megatron-Bridge performance summary (df0289c): each row's published GA column.
BRIDGE_GA = {"2602-h100-llama3.1-405b-cp2": 192, "2511-h100-llama3.1-405b-cp2": 64,
             "2509-h100-llama3.1-405b-cp2": 64, "2602-h100-llama3-70b": 128,
             "2511-h100-llama3-70b": 64, "2511-b200-llama3.1-405b-cp2": 32,
             "2511-b200-llama3.1-405b-cp2-mxfp8": 32, "2602-gb200-llama3-70b-mxfp8": 32,
             "2602-gb200-llama3.1-405b": 384, "2602-gb200-llama3.1-405b-mxfp8": 384,
             "2602-gb300-llama3-70b-mxfp8": 16, "2602-gb300-llama3-70b-nvfp4": 16,
             "2602-gb300-llama3.1-405b": 192, "2602-gb300-llama3.1-405b-mxfp8": 192,
             "2602-gb300-llama3.1-405b-nvfp4": 192}


@pytest.mark.parametrize("row", load_ledger("megatron-bridge"), ids=lambda row: row.id)
def test_megatron_bridge_columns_agree(row: LedgerRow) -> None:
    """TP x PP x CP x DP = GPUs (1024 = 8 x 8 x 2 x 8) and GBS / (MBS x DP) = the published
    gradient accumulations (1536 / 8 = 192); the vocabulary is 128,256 padded to a multiple of
    128 x TP (the scripts' should_pad_vocab: 129,024 at TP 8, 128,512 at TP 4, 128,256 at TP 2);
    an FP8 row names its recipe (NVFP4 rows nvfp4), a refused row its reason."""
    par = row.parallel
    assert par.tp * par.pp * par.cp * par.dp == row.hardware.gpus
    assert par.global_batch // (par.microbatch_size * par.dp) == \
        BRIDGE_GA[row.id.removeprefix("megatron-bridge-")]
    assert row.model.vocab == {8: 129024, 4: 128512, 2: 128256, 1: 128256}[par.tp]
    assert row.model.vocab % (128 * par.tp) == 0 and row.model.vocab - 128256 < 128 * par.tp
    assert par.precision is None or par.fp8_recipe in ("current", "mxfp8", "nvfp4")
    assert (par.fp8_recipe == "nvfp4") == row.id.endswith("-nvfp4")
    assert row.supported or row.reason


# NVIDIA/dgxc-benchmarking, H100 BF16 tables: per row the published throughput (tokens/s over
# the whole job, the row after the step time), the configuration table's DP and GA columns.
DGXC_PUBLISHED = {
    "llama3.1-8b-bf16-8gpu": (85459, 4, 32), "llama3.1-8b-bf16-16gpu": (170500, 8, 32),
    "llama3.1-8b-bf16-32gpu": (340447, 16, 32), "llama3.1-8b-bf16-64gpu": (680341, 32, 32),
    "llama3.1-8b-bf16-128gpu": (1360683, 64, 32),
    "llama3.1-70b-bf16-64gpu": (71526, 2, 64), "llama3.1-70b-bf16-128gpu": (142955, 4, 64),
    "llama3.1-70b-bf16-256gpu": (285716, 8, 64), "llama3.1-70b-bf16-512gpu": (571821, 16, 64),
    "llama3.1-70b-bf16-1024gpu": (1145202, 32, 64),
    "llama3.1-70b-bf16-2048gpu": (2288843, 64, 64),
    "llama3.1-405b-bf16-512gpu": (106024, 4, 64), "llama3.1-405b-bf16-1024gpu": (211406, 8, 64),
    "llama3.1-405b-bf16-2048gpu": (422175, 16, 64),
    "grok1-314b-bf16-512gpu": (526493, 8, 128)}


@pytest.mark.parametrize("row", [row for row in load_ledger("dgxc")
                                 if row.model.name != "deepseek-v3"], ids=lambda row: row.id)
def test_dgxc_rows_cite_their_table_and_agree_with_its_columns(row: LedgerRow) -> None:
    """Each row cites the README at its commit, the table, the GPU column and the row (the
    step time); sequence x GBS / step time gives the printed throughput (8192 x 128 / 12.27 s =
    85,459 tokens/s), TP x PP x CP x DP = GPUs with the printed DP, GBS / (MBS x DP) the printed
    GA, and every CP row runs CP 2 with the ring exchange."""
    key = row.id.removeprefix("dgxc-2504-h100-").removeprefix("dgxc-2505-h100-")
    tokens_s, dp, ga = DGXC_PUBLISHED[key]
    par, gpus = row.parallel, row.hardware.gpus
    assert row.citation.startswith("NVIDIA/dgxc-benchmarking ")
    assert ("(v25.04.01, 85380ff)" in row.citation) or ("(dfc8039, 2025-07-23)" in row.citation)
    assert f"column {gpus}x H100 GPUs, row Training step time" in row.citation
    assert [m.metric for m in row.measured] == ["iteration_s"]
    assert round(row.model.seq * par.global_batch / row.value("iteration_s")) == \
        pytest.approx(tokens_s, abs=1)
    assert par.dp == dp and par.tp * par.pp * par.cp * par.dp == gpus
    assert par.global_batch // (par.microbatch_size * par.dp) == ga
    assert (par.cp, par.cp_algorithm, par.precision) == (2, "ring", "bf16")
    assert row.supported and row.unpublished == () and row.hardware.inter_node_gbps_per_gpu == 400


# deepseek_v3/pretraining/README.md (68eaf7e; 1f6d9f4 for 512 H100s): per row the printed
# throughput (tokens/s over the job), DP and GA columns, and the stages' layer counts the
# performance script sets (64 / PP - 1 first, 64 / PP - 2 last, the rest shared equally).
DGXC_DEEPSEEK = {
    "dgxc-2505-h100-deepseek-v3-bf16-1024gpu": (644781.55, 32, 256, [3] + [4] * 14 + [2]),
    "dgxc-2505.04-h100-deepseek-v3-bf16-512gpu": (342755.90, 32, 128, [7] + [8] * 6 + [6]),
    "dgxc-2505-gb200-deepseek-v3-bf16-128gpu": (122755.33, 16, 64, [15, 16, 16, 14]),
    "dgxc-2505-gb200-deepseek-v3-bf16-256gpu": (245323.97, 32, 64, [15, 16, 16, 14]),
    "dgxc-2505-gb200-deepseek-v3-bf16-512gpu": (489502.71, 64, 64, [15, 16, 16, 14])}


@pytest.mark.parametrize("row_id", DGXC_DEEPSEEK)
def test_dgxc_deepseek_rows_agree_with_their_tables_and_the_scripts_split(row_id: str) -> None:
    """Each DeepSeek-V3 row: sequence 4096 x GBS / step time gives the printed throughput
    (4096 x 1024 / 34.168 s = 122,755.33 tokens/s), TP 2 x PP x DP = GPUs with the printed DP,
    GBS = 8 x GPUs (launch.sh) with the printed GA; the layout places 64 / PP - 1 layers
    on the first stage and 64 / PP - 2 on the last (61 in all, the MTP module beside the loss);
    the vocabulary is the tokenizer's padded to 1280 x TP 2 (51 x 2560 = 130,560); attention
    is cuDNN's fused kernel on H100 but unfused on GB200 (Transformer Engine <= 2.4 refuses
    head dims over 128 on sm100: MLA's keys are 192 wide)."""
    row = BY_ID[row_id]
    tokens_s, dp, ga, layers = DGXC_DEEPSEEK[row_id]
    par, gpus = row.parallel, row.hardware.gpus
    assert row.citation.startswith("NVIDIA/dgxc-benchmarking deepseek_v3/pretraining/README.md")
    system = {"h100-sxm": "H100", "gb200": "GB200"}[row.hardware.gpu]
    assert f"column {gpus}x {system} GPUs, row Training step time" in row.citation
    assert row.model.seq * par.global_batch / row.value("iteration_s") == \
        pytest.approx(tokens_s, abs=1)
    assert (par.tp, par.dp, par.tp * par.pp * par.dp) == (2, dp, gpus)
    assert par.global_batch == 8 * gpus and par.global_batch // (par.microbatch_size * dp) == ga
    spans = row.execution.stage_layers(row.model.layers, row.model.mtp_layers)
    assert [len(span) for span in spans] == layers and sum(layers) == 61
    assert (layers[0], layers[-1]) == (64 // par.pp - 1, 64 // par.pp - 2)
    assert row.model.vocab == 51 * 1280 * 2 and row.model.mtp_layers == 1
    assert par.attention == ("unfused" if row.hardware.gpu == "gb200" else "fused")
    assert row.supported and row.unpublished == ()


def test_dgxc_grok1_is_an_expert_parallel_row_with_its_folding() -> None:
    """Grok 1 on 512 H100s: 8 experts, top 2, EP 8 carved out of CP 2 x DP 8, expert TP 1 under
    TP 4, token dropping at capacity 1.0; its shape counts 316.5B (the recipe's name: 314b)."""
    row = BY_ID["dgxc-2505-h100-grok1-314b-bf16-512gpu"]
    model, par = row.model, row.parallel
    assert (model.experts, model.top_k, model.capacity_factor, model.router_balance) == (
        8, 2, 1.0, "learned")
    assert (par.ep, par.expert_tp, par.tp, par.cp * par.dp % par.ep) == (8, 1, 4, 0)
    assert parameter_count(model) == pytest.approx(316.46e9, rel=1e-4)


def test_schema_refuses_cp_without_its_algorithm_and_moe_fields_without_experts() -> None:
    data = _row_dict("dgxc-2504-h100-llama3.1-8b-bf16-8gpu")
    data["parallel"]["cp_algorithm"] = None
    with pytest.raises(ValueError, match=r"unpublished must name.*cp_algorithm"):
        LedgerRow.model_validate(data)
    assert LedgerRow.model_validate(data | {"unpublished": ["cp_algorithm"]})
    data = _row_dict("dgxc-2504-h100-llama3.1-8b-bf16-8gpu")
    data["parallel"] |= {"cp": 1, "dp": 8}
    with pytest.raises(ValueError, match="cp_algorithm is for rows with cp > 1"):
        LedgerRow.model_validate(data)
    data = _row_dict("dgxc-2504-h100-llama3.1-8b-bf16-8gpu")
    data["model"]["capacity_factor"] = 1.0
    with pytest.raises(ValueError, match="for MoE models only"):
        LedgerRow.model_validate(data)
    data = _row_dict("dgxc-2504-h100-llama3.1-8b-bf16-8gpu")
    data["parallel"]["ep"] = 2
    with pytest.raises(ValueError, match="ep > 1 and expert_tp are for MoE models"):
        LedgerRow.model_validate(data)
    data = _row_dict("dgxc-2505-h100-grok1-314b-bf16-512gpu")
    data["model"]["router_balance"] = None
    with pytest.raises(ValueError, match=r"unpublished must name.*router_balance"):
        LedgerRow.model_validate(data)
