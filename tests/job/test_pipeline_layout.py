"""Megatron-Core's pipeline layout strings (``job.evaluation.pipeline_layout``): stage spans by
hand from Megatron-Bridge's DeepSeek-V3 layouts, refusals naming the field and the syntax, the
ledger's ``pipeline_split: layout`` and the Megatron-LM export."""

from __future__ import annotations

import shlex
from dataclasses import replace

import pytest

from dlsched.errors import ConfigError
from dlsched.job.evaluation.pipeline_layout import parse_layout
from dlsched.job.evaluation.pipeline_split import slots_per_stage, stage_layers
from dlsched.job.execution import Execution
from dlsched.job.exports.writers import megatron_args, torchtitan_toml
from dlsched.job.model_spec import bundled_specs

DSV3 = "layout:Et*4|(t*4|)*14tmL"  # Megatron-Bridge df0289c, deepseek_v3.py (4, 4) / (16, 1)


def test_deepseek_v3_layout_by_hand() -> None:
    """``Et*4|(t*4|)*14tmL`` over PP 4 x VP 4: stage 0 the embedding and layers 0-3, stages
    1-14 four layers each (stage s: 4s .. 4s + 3), stage 15 layer 60 with the MTP module and
    the loss; pipeline rank r holds stages r, r + 4, r + 8, r + 12: 16 layers on ranks 0-2,
    4 + 4 + 4 + 1 = 13 on rank 3."""
    spans = stage_layers(61, 4, 4, DSV3, 1)
    assert len(spans) == 16
    assert all(spans[s] == range(4 * s, 4 * s + 4) for s in range(15))
    assert spans[15] == range(60, 61)
    layout = Execution(1, 4, 64, 1, 4096, chunks=4, schedule="interleaved", zero=1, ep=64,
                       pipeline_split=DSV3)
    assert [layout.rank_layers(61, r, 1) for r in range(4)] == [16, 16, 16, 13]
    # the same string over PP 16 without interleaving: one stage per rank
    flat = replace(layout, pp=16, dp=16, ep=8, chunks=1, schedule="1f1b")
    assert [flat.rank_layers(61, r, 1) for r in range(16)] == [4] * 15 + [1]


@pytest.mark.parametrize(("text", "stages"), [
    ("Et*2|tL", ("Ett", "tL")),
    ("E|(tt|)*2,L", ("E", "tt", "tt", "L")),  # a bracketed repeat holding the separator
    ("Et,t|t*3mL", ("Ett", "tttmL")),  # commas are cosmetic
    ("Et|(tt|)*30mL", ("Et",) + ("tt",) * 30 + ("mL",)),  # Megatron-Bridge's H100 layout
])
def test_parse_unrolls_repeats(text: str, stages: tuple[str, ...]) -> None:
    assert parse_layout(text) == stages


@pytest.mark.parametrize(("split", "why"), [
    ("layout:Et*4|tx|L", "'x' left"),  # a character outside E, t, m, L
    ("layout:E((t|)*2)*3L", r"'\(\)\*3' left"),  # brackets inside brackets
    ("layout:Et*|tL", r"'\*' left"),  # a repeat without its count
])
def test_bad_syntax_is_refused_naming_the_field_and_syntax(split: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why) as caught:
        Execution(1, 2, 1, 1, 8, pipeline_split=split)
    assert caught.value.field == "pipeline_split"
    assert "accepted: E (embedding), t (decoder layer)" in str(caught.value)


@pytest.mark.parametrize(("text", "why"), [
    ("Et*4|(t*4|)*14tmL", "lists 16 virtual stages, PP 2 x chunks 2 = 4"),
    ("Et*2|t*2|t*2|tmL", r"places 7 decoder \(the model has 61\)"),
    ("tE|tt|tt|tmL", "the embedding must open the first virtual stage"),
    ("Et|tt|ttL|tm", "the loss must close the last virtual stage"),
    ("Et|tt|ttm|tL", "the MTP modules must sit with the loss"),
    ("Et|tt|tt|mtL", "a decoder layer follows an MTP module"),
    ("Et|tt|tt|tL", r"0 mtp \(the model has 1\)"),
])
def test_placements_refused(text: str, why: str) -> None:
    """Six layers and one MTP module over PP 2 x VP 2 (the second case 61 layers)."""
    layers = 61 if "61" in why else 6
    with pytest.raises(ConfigError, match=why) as caught:
        stage_layers(layers, 2, 2, f"layout:{text}", 1)
    assert caught.value.field == "pipeline_split"


def test_unknown_split_names_the_layout_form() -> None:
    with pytest.raises(ConfigError, match="layout:<Megatron-Core layout>") as caught:
        Execution(1, 2, 1, 1, 8, pipeline_split="uneven")
    assert caught.value.field == "pipeline_split"


def test_exports() -> None:
    """Megatron-LM: the layout string itself, no accounting flags and no layers per virtual
    stage (arguments.py derives VP from the layout's 16 stages over PP 4); TorchTitan has no
    per-stage list here: refused naming the field."""
    spec = bundled_specs()["deepseek-v3"]
    layout = Execution(1, 4, 64, 1, 4096, chunks=4, schedule="interleaved", zero=1, ep=64,
                       pipeline_split=DSV3)
    args = shlex.split(megatron_args(spec, layout).splitlines()[-1])
    at = args.index("--pipeline-model-parallel-layout")
    assert args[at + 1] == "Et*4|(t*4|)*14tmL"
    assert "--num-layers-per-virtual-pipeline-stage" not in args
    assert "--account-for-loss-in-pipeline-split" not in args
    llama = bundled_specs()["llama3-8b"]  # 32 layers over PP 2
    halves = Execution(1, 2, 4, 1, 64, zero=1, pipeline_split="layout:Et*16|t*16L")
    assert [halves.rank_layers(32, r) for r in range(2)] == [16, 16]
    with pytest.raises(ConfigError) as caught:
        torchtitan_toml(llama, halves)
    assert caught.value.field == "pipeline_split"
    with pytest.raises(ConfigError, match="a layout lists each virtual stage"):
        slots_per_stage(61, 4, 4, DSV3, 1)



def test_ledger_row_carries_the_layout() -> None:
    """A ledger row's ``pipeline_split: layout`` with ``pipeline_layout`` reaches the
    evaluator as ``layout:<string>``; the string without ``layout`` is refused."""
    from dlsched.ledger import load_ledger
    rows = [row for row in load_ledger() if row.parallel.pipeline_split == "layout"]
    assert rows, "the DeepSeek-V3 rows run Megatron-Bridge's layout"
    for row in rows:
        assert row.execution.pipeline_split == f"layout:{row.parallel.pipeline_layout}"
