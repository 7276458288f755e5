"""Flag pairs that contradict are refused, defaults that change a result are printed, and a
comparison goes on without a baseline that finds no plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

GRID = "domain: collective\naxes: {policy: [baseline]}\nfixed: {size: 1 MB, chunks: 2}\n"


@pytest.fixture
def grid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "g.yaml"
    path.write_text(GRID)
    return path


@pytest.mark.parametrize(("flags", "needle"), [
    (("--resume", "--overwrite"), "error: --overwrite: contradicts --resume"),
    (("--retry-errors",), "error: --retry-errors: reruns the error rows of a resumed sweep; "
                          "accepted: with --resume"),
])
def test_sweep_refuses_contradicting_flags(run_cli, grid: Path, flags: tuple[str, ...],
                                           needle: str) -> None:
    """Both were accepted (--overwrite deleted the results --resume meant to continue)."""
    code, _, err = run_cli("sweep", str(grid), "--db", "r.db", *flags)
    assert code == 2 and err.startswith(needle) and len(err.strip().splitlines()) == 1, err
    assert not (grid.parent / "r.db").exists()


def _small_devices(tmp_path: Path) -> Path:
    """Five 4 GiB GPUs: gpt2-medium fits every planner but the interleaved one (its
    virtual stages stash more activations than 4 GiB holds in every configuration)."""
    path = tmp_path / "small.yaml"
    path.write_text("name: small\nservers:\n  - {count: 5, gpu: {flops: 60 TFLOP/s, peak: "
                    "125 TFLOP/s, memory: 4 GiB}, link: {bandwidth: 12 GB/s, latency: 10 us}}\n")
    return path


def test_an_infeasible_baseline_is_skipped_with_a_note(tmp_path: Path, run_cli) -> None:
    """--planner all with one planner that fits no configuration: that planner is skipped
    (named, with its reason, in the JSON and on stderr) and the others are compared; the
    old command failed with "interleaved: no configuration fits"."""
    code, out, err = run_cli("pipeline", "plan", "--model", "gpt2-medium", "--devices",
                             str(_small_devices(tmp_path)), "--microbatches", "4",
                             "--microbatch-size", "2", "--planner", "all", "--link-sharing",
                             "ps", "--json")
    assert code == 0, err
    document = json.loads(out)
    planners = [row["planner"] for row in document["rows"]]
    assert "interleaved" not in planners and {"dlsched", "1f1b", "zb-v"} <= set(planners)
    assert [s["planner"] for s in document["skipped"]] == ["interleaved"]
    assert "no configuration fits" in document["skipped"][0]["reason"]
    assert "note: interleaved skipped" in err


def test_a_single_infeasible_planner_is_still_an_error(tmp_path: Path, run_cli) -> None:
    """Asked for alone, the planner's own error stands (exit 2, one line)."""
    code, _, err = run_cli("pipeline", "plan", "--model", "gpt2-medium", "--devices",
                           str(_small_devices(tmp_path)), "--microbatches", "4",
                           "--microbatch-size", "2", "--planner", "interleaved",
                           "--link-sharing", "ps")
    assert code == 2 and err.startswith("error: interleaved: no configuration fits"), err
