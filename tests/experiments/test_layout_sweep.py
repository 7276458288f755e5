"""Hagemann et al.'s layout sweep (``dlsched reproduce layouts``): the bundled data is what its
provenance names, the global batch follows from the sheets' own counts, uneven pipeline splits
are placed as the runs' code places them, bad data and unpriced kernels are refused, and the
whole sweep still gives the numbers docs/validation.md records."""

from __future__ import annotations

import hashlib
import math
from importlib import resources

import pytest
import yaml

from dlsched.errors import ConfigError
from dlsched.experiments import layout_sweep
from dlsched.experiments.layout_sweep import (
    HEADER,
    Trial,
    load_trials,
    memory_check,
    parse_trials,
    pipeline_layout,
    sheet_parameters,
)

DATA = resources.files("dlsched.experiments").joinpath("data")
# docs/validation.md, "Hagemann et al.'s multi-node layout sweep" (2026-12-07, a100 preset on
# dgx-a100, the settings of the module docstring).
RECORDED = {"rows": 273, "mean_abs_error": 0.1061, "bias": -0.0338, "groups": 22,
            "mean_kendall_tau": 0.675, "first_within_3pct": 15, "worst_first_ratio": 1.284}
MEMORY = {"ran_admitted": 264, "ran_refused": 9, "oom_refused": 292, "oom_admitted": 85}


def test_the_bundled_csv_is_the_one_its_provenance_names() -> None:
    """SHA-256 as recorded; 984 trials in the ten sheets, 401 of them ran, each layout's TP x
    PP dividing its GPUs."""
    source = yaml.safe_load(DATA.joinpath("layout_sweep.source.yaml").read_text())
    digest = hashlib.sha256(DATA.joinpath("layout_sweep.csv").read_bytes()).hexdigest()
    assert digest == source["sha256"]
    trials = load_trials()
    assert len(trials) == 984 and set(layout_sweep.SWEEPS) == set(source["sheets"])
    assert sum(t.outcome == "ok" for t in trials) == 401
    assert all(t.gpus % (t.tp * t.pp) == 0 for t in trials)


def test_the_sheets_own_flop_counts_give_the_shapes_vocabulary_and_batch() -> None:
    """Undoing each sheet's Megatron TFLOP/s with its code's formula at GLOBAL_BATCH gives the
    parameter count of the SHAPES at the 128,000-token vocabulary: the least in every sheet
    within 0.02% (the sheets average per-step rates, which can only raise a row's count), no
    row below it; at LLaMA's 32,000 tokens the shapes would hold 7-9% fewer parameters, and
    twice the batch would halve the count."""
    least: dict[str, float] = {}
    for trial in (t for t in load_trials() if t.outcome == "ok"):
        ratio = sheet_parameters(trial) / trial.spec().parameters()
        least[trial.sweep] = min(ratio, least.get(trial.sweep, math.inf))
    assert set(least) == set(layout_sweep.SWEEPS)
    assert all(0.9999 <= value <= 1.0002 for value in least.values()), least
    with pytest.raises(ConfigError, match="did not run"):
        sheet_parameters(next(t for t in load_trials() if t.outcome == "oom"))


def test_uneven_pipeline_splits_spread_the_remainder_over_the_first_stages() -> None:
    """60 layers over 8 stages: 8, 8, 8, 8, 7, 7, 7, 7 (Aleph Alpha's pipe_partition_uniform);
    the evaluator places exactly those layers; an even split stays Megatron's ``even``."""
    assert pipeline_layout(40, 4) == "even"
    split = pipeline_layout(60, 8)
    assert split == "layout:Et*8|t*8|t*8|t*8|t*7|t*7|t*7|t*7L"
    trial = Trial("30b-8k-128gpu", 1, 128, 10.0, "ok", "disabled", "flash_attention2", 1, 2,
                  8, False, 100.0, 120.0)
    assert [len(stage) for stage in trial.layout().stage_layers(60)] == [8] * 4 + [7] * 4


def test_bad_data_and_unpriced_kernels_are_refused_naming_what() -> None:
    """A wrong header, an unknown outcome and a time on a failed trial name the line; a kernel
    the evaluator does not price names the kernel."""
    head = ",".join(HEADER)
    with pytest.raises(ConfigError, match="header"):
        parse_trials("a,b\n")
    with pytest.raises(ConfigError, match="line 2"):
        parse_trials(head + "\ns,1,8,,crashed,disabled,fused,1,1,1,false,,\n")
    with pytest.raises(ConfigError, match="line 2"):
        parse_trials(head + "\ns,1,8,3.0,oom,disabled,fused,1,1,1,false,,\n")
    torch_attention = Trial("13b-2k-64gpu", 1, 64, None, "oom", "disabled", "torch", 1, 1, 1,
                            False)
    with pytest.raises(ConfigError, match="kernel 'torch': not priced"):
        torch_attention.layout()


def test_the_memory_check_counts_each_outcome_against_the_admission() -> None:
    """Hand-made rows: two that ran (one admitted), two out of memory (one refused); refused
    and unpriced rows (fits None) are not counted."""
    rows = [{"outcome": "ok", "fits": True}, {"outcome": "ok", "fits": False},
            {"outcome": "oom", "fits": False}, {"outcome": "oom", "fits": True},
            {"outcome": "oom", "fits": None}, {"outcome": "error", "fits": True}]
    assert memory_check(rows) == {"ran_admitted": 1, "ran_refused": 1, "oom_admitted": 1,
                                  "oom_refused": 1}


def test_the_whole_sweep_gives_the_recorded_numbers() -> None:
    """Every sheet priced: the totals, the group ranking and the memory check as recorded;
    every trial that ran with a priced kernel is priced (none refused)."""
    rows = [r for s in layout_sweep.scenarios() for r in layout_sweep.run_scenario(s)]
    document = layout_sweep.document(rows)
    summary = document["summary"]
    for key, value in RECORDED.items():
        assert summary[key] == pytest.approx(value, abs=5e-4), key
    assert document["memory_check"] == MEMORY
    assert document["refused_ran"] == [] and document["unpriced_ran"] == 128
    assert all(math.isfinite(r["predicted_s"]) for r in rows if r["refused"] is None)


def test_the_command_prints_one_sheet_as_json_and_refuses_unknown_sheets(run_cli) -> None:
    """``dlsched reproduce layouts --sweeps S --json``: the sheet's own totals (one group per
    kernel and SP setting) and every row of that sheet; an unknown sheet names the accepted
    ones."""
    import json

    code, out, _ = run_cli("reproduce", "layouts", "--sweeps", "65b-2k-128gpu", "--json",
                           "--jobs", "1")
    assert code == 0
    document = json.loads(out)
    assert {r["sweep"] for r in document["rows"]} == {"65b-2k-128gpu"}
    assert document["summary"]["rows"] == 43 and document["summary"]["groups"] == 2
    code, _, err = run_cli("reproduce", "layouts", "--sweeps", "65b")
    assert code == 2 and "--sweeps: unknown ['65b']; accepted: 13b-2k-64gpu" in err


def test_the_plot_draws_every_priced_trial_and_refuses_another_suffix(run_cli, tmp_path):
    """``--plot F.png`` writes a PNG of the sheet's 43 priced trials and says so; a path not
    ending in .png is refused before any work."""
    path = tmp_path / "sweep.png"
    code, out, _ = run_cli("reproduce", "layouts", "--sweeps", "65b-2k-128gpu", "--plot",
                           str(path), "--jobs", "1")
    assert code == 0 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "wrote PNG plot (43 trials)" in out
    code, _, err = run_cli("reproduce", "layouts", "--plot", str(tmp_path / "sweep.jpg"))
    assert code == 2 and "--plot" in err and ".png" in err
