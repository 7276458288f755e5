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
    skipped = {s["planner"]: s["reason"] for s in document["skipped"]}
    # DualPipe and DualPipeV (issue 50) hold two stages per GPU: none of theirs fits either
    assert list(skipped) == ["interleaved", "dualpipe", "dualpipev"]
    assert all("no configuration" in reason for reason in skipped.values())
    assert "note: interleaved skipped" in err


def test_a_single_infeasible_planner_is_still_an_error(tmp_path: Path, run_cli) -> None:
    """Asked for alone, the planner's own error stands (exit 2, one line)."""
    code, _, err = run_cli("pipeline", "plan", "--model", "gpt2-medium", "--devices",
                           str(_small_devices(tmp_path)), "--microbatches", "4",
                           "--microbatch-size", "2", "--planner", "interleaved",
                           "--link-sharing", "ps")
    assert code == 2 and err.startswith("error: interleaved: no configuration fits"), err


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "astra"
ASTRA = ("--astra-network", str(EXAMPLES / "network_3d.yml"), "--astra-system",
         str(EXAMPLES / "system_themis.json"), "--size", "1 MB")


@pytest.mark.parametrize(("command", "flag", "value", "key"), [
    ("collective", "--chunks", "8", "preferred-dataset-splits is 64"),
    ("collective", "--concurrency", "2", "active-chunks-per-dimension is 1"),
    ("collective", "--intra", "fifo", "intra-dimension-scheduling is scf"),
    ("train", "--chunks", "8", "preferred-dataset-splits is 64"),
])
def test_an_option_contradicting_the_system_file_is_refused(run_cli, command: str, flag: str,
                                                            value: str, key: str) -> None:
    """``--astra-system`` (64 splits, 1 active chunk, smallestFirst) with ``--chunks 8``: the
    old command ran 64 chunks and printed "given 64 chunks"; now refused in one line."""
    args = ASTRA if command == "collective" else ASTRA[2:4]
    code, _, err = run_cli(command, *args, flag, value)
    assert code == 2 and err.startswith(f"error: {flag}: {value} contradicts --astra-system")
    assert key in err and len(err.strip().splitlines()) == 1, err


def test_the_system_files_own_values_may_be_repeated(run_cli) -> None:
    """``--chunks 64`` says what the file says: no contradiction, the run goes on."""
    code, out, err = run_cli("collective", *ASTRA, "--chunks", "64", "--policy", "baseline",
                             "--json")
    assert code == 0, err
    assert {row["chunks"] for row in json.loads(out)["rows"]} == {64}


def test_one_algorithm_for_every_dimension_is_noted(tmp_path: Path, run_cli) -> None:
    """A system file giving all-reduce one implementation for the 3-dimension network runs it
    on every dimension (ASTRA's FullyConnected 'direct' becomes 'ring'): said on stderr."""
    system = json.loads((EXAMPLES / "system_themis.json").read_text())
    system["all-reduce-implementation"] = ["ring"]
    path = tmp_path / "one.json"
    path.write_text(json.dumps(system))
    code, _, err = run_cli("collective", *ASTRA[:2], "--astra-system", str(path), "--size",
                           "1 MB", "--policy", "baseline", "--json")
    assert code == 0, err
    assert ("note: all-reduce-implementation gives one algorithm (ring) for 3 dimensions: "
            "every dimension runs it, in place of their own (FullyConnected direct, Ring ring, "
            "Switch") in " ".join(err.split())


def test_a_formula_network_without_latency_is_noted(run_cli) -> None:
    """``--network ring:10Gb/s`` takes a per-step latency of 0 s: said, with an example."""
    code, _, err = run_cli("dataparallel", "--model", "vgg16", "--network", "ring:10Gb/s",
                           "--policy", "wfbp", "--json")
    assert code == 0, err
    assert "note: --network 'ring:10Gb/s' gives no per-step latency: 0 s is assumed" in err
    code, _, err = run_cli("dataparallel", "--model", "vgg16", "--network", "ring:10Gb/s,5us",
                           "--policy", "wfbp", "--json")
    assert code == 0 and "note" not in err, err


def test_an_unknown_baseline_is_refused_before_the_sweep(run_cli, grid: Path) -> None:
    """``baseline: bogus`` was accepted, the sweep ran, and only ``summary`` failed."""
    grid.write_text(GRID.replace("[baseline]", "[baseline, themis]") + "baseline: bogus\n")
    code, _, err = run_cli("sweep", str(grid), "--db", "r.db")
    assert code == 2 and err.startswith("error: baseline: 'bogus' is not a policy of this "
                                        "grid; accepted: baseline, themis"), err
    assert not (grid.parent / "r.db").exists()
