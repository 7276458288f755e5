"""Sliding-window and chunked attention per layer pattern: the pairs each layer needs and a
flash kernel executes (against brute force over the mask), the model FLOP convention, the
seconds a windowed layer saves in the job evaluator, and memory left unchanged."""

from __future__ import annotations

import pytest

from dlsched.errors import ConfigError
from dlsched.job.attention_layers import (
    causal_pairs,
    check_pattern,
    chunked_pairs,
    executed_pairs,
    kind_counts,
    layer_kind,
    mfu_keys,
    sliding_pairs,
    useful_pairs,
    window_ratio,
)
from dlsched.job.compute.attention_window import core_op, layer_savings, stage_savings
from dlsched.job.model_spec import Model, bundled_specs

SPECS = bundled_specs()


def _allowed(kind: str, i: int, j: int, w: int) -> bool:
    """Hugging Face's masks: causal, sliding (``i - w < j``), chunked (same chunk)."""
    if j > i:
        return False
    if kind == "S":
        return i - j < w
    if kind == "C":
        return i // w == j // w
    return True


@pytest.mark.parametrize(("s", "w"), [(1, 1), (7, 3), (16, 16), (37, 5), (64, 100), (50, 8)])
def test_pair_formulas_equal_brute_force(s: int, w: int) -> None:
    for kind, formula in (("F", causal_pairs(s)), ("S", sliding_pairs(s, w)),
                          ("C", chunked_pairs(s, w))):
        brute = sum(_allowed(kind, i, j, w) for i in range(s) for j in range(s))
        assert formula == brute == useful_pairs(kind, s, w)


@pytest.mark.parametrize(("s", "w", "block"), [(40, 6, 8), (64, 16, 8), (50, 13, 4),
                                               (33, 10, 8), (24, 24, 8), (17, 100, 4)])
def test_executed_tiles_equal_brute_force_over_blocks(s: int, w: int, block: int) -> None:
    for kind in "FSC":
        tiles = 0
        for q0 in range(0, s, block):
            for k0 in range(0, s, block):
                rows, cols = range(q0, min(q0 + block, s)), range(k0, min(k0 + block, s))
                if any(_allowed(kind, i, j, w) for i in rows for j in cols):
                    tiles += len(rows) * len(cols)
        assert executed_pairs(kind, s, w, block) == tiles
        assert tiles >= useful_pairs(kind, s, w)


def test_gpt_oss_window_at_4096_tokens() -> None:
    # 32 query blocks of 128; the sliding layer computes the diagonal tile and the one before
    # it (1 for the first block): (2 x 32 - 1) x 128^2 of the causal 528 x 128^2 tiles
    assert executed_pairs("S", 4096, 128) == 63 * 128 * 128
    assert executed_pairs("F", 4096, 128) == 528 * 128 * 128
    assert window_ratio("S", 4096, 128) == pytest.approx(63 / 528)
    # useful: s w - w (w - 1) / 2
    assert sliding_pairs(4096, 128) == 4096 * 128 - 128 * 127 // 2
    # chunks of the whole sequence or longer save nothing; 4 chunks of 8192 in 32768 save 3/4
    assert window_ratio("C", 8192, 8192) == 1.0
    assert window_ratio("C", 32768, 8192) == pytest.approx(4 * 64 * 65 / (256 * 257))


def test_patterns_are_counted_per_layer_range() -> None:
    assert [layer_kind("SF", i) for i in range(4)] == ["S", "F", "S", "F"]
    assert [layer_kind("CCCF", i) for i in range(8)] == list("CCCFCCCF")
    for pattern in ("SF", "CCCF", "SSSSSF", ""):
        for start in range(0, 9):
            for stop in range(start, 13):
                counts = kind_counts(pattern, start, stop)
                assert counts == {kind: sum(layer_kind(pattern, i) == kind
                                            for i in range(start, stop)) for kind in "FSC"}


def test_bad_patterns_name_the_field() -> None:
    with pytest.raises(ConfigError, match="attention_pattern"):
        check_pattern("SX", 128)
    with pytest.raises(ConfigError, match="attention_window"):
        check_pattern("SF", 0)
    with pytest.raises(ConfigError, match="attention_window"):
        check_pattern("", 128)
    with pytest.raises(ConfigError, match="attention_pattern"):
        SPECS["gpt-oss-20b"].replace(attention_pattern="sf")


def test_model_flop_counts_the_window_span() -> None:
    oss = SPECS["gpt-oss-120b"]
    full = oss.replace(attention_pattern="", attention_window=0)
    a, s = oss.heads * oss.head_dim, oss.seq
    # 18 sliding layers count 128 keys per query, 18 full ones s (causal not discounted)
    assert mfu_keys("S", s, 128) == 128 and mfu_keys("F", s, 128) == s
    saved = 3 * 18 * 4 * a * (s - 128)
    assert full.model_flops_per_token() - oss.model_flops_per_token() == pytest.approx(saved)
    maverick = SPECS["llama4-maverick"]
    assert maverick.attention_core_flops() == 4 * maverick.seq * 40 * 128  # chunk = sequence
    long = maverick.replace(seq=32768)
    assert long.attention_core_flops() == pytest.approx(4 * 40 * 128 * (36 * 8192 + 12 * 32768)
                                                        / 48)


def test_a_windowed_layer_saves_its_skipped_tiles() -> None:
    oss = SPECS["gpt-oss-120b"]
    saved = layer_savings(oss, 1, "h100", "bf16", 1, False, "none")
    op = core_op(oss)
    assert op is not None and op.kind == "attention"
    from dlsched.job.compute.layer_costs import gpu_compute

    compute = gpu_compute("h100", "bf16")
    full_f = compute.work(op, 1).gpu_s
    forward, backward = saved["S"]
    # the kernel keeps 63/528 of its tiles: the rest of its time is saved unless memory-bound
    assert 0 < forward <= full_f * (1 - 63 / 528) + 1e-12
    assert backward > forward  # the backward recomputes the scores: 2.5x the FLOP
    rerun = layer_savings(oss, 1, "h100", "bf16", 1, False, "selective")["S"]
    assert rerun[1] == pytest.approx(backward + forward)
    assert layer_savings(oss, 1, "h100", "bf16", 1, False, "none", attention="unfused") == {}
    assert layer_savings(SPECS["llama4-maverick"], 1, "h100", "bf16", 1, False,
                         "none")["C"] == (0.0, 0.0)  # one chunk is the whole sequence
    spans = (range(0, 18), range(18, 36))
    per_stage = stage_savings(oss, spans, saved)
    assert per_stage == [(9 * forward, 9 * backward)] * 2


def _plan_row(spec: Model) -> dict[str, float]:
    from dlsched.job.cluster import node_cluster
    from dlsched.job.evaluation.evaluate import Job, evaluate
    from dlsched.job.execution import Execution

    job = Job(spec, node_cluster("dgx-h100", 16))
    layout = Execution(tp=1, pp=2, dp=8, microbatch_size=1, global_batch=64, ep=8)
    result = evaluate(job, layout)
    return {"time": result.iteration_s, "memory": result.memory_bytes}


def test_planner_prices_the_window_and_keeps_memory() -> None:
    oss = SPECS["gpt-oss-20b"]
    full = oss.replace(attention_pattern="", attention_window=0)
    windowed, dense = _plan_row(oss), _plan_row(full)
    assert windowed["time"] < dense["time"]
    assert windowed["memory"] == dense["memory"]
