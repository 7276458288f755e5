"""``dlsched sweep`` refuses damaged results files and grids whose rows would be mislabelled."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

GRID = {"name": "small", "domain": "collective",
        "axes": {"topology": ["2D-SW_SW"], "size": ["1 MB", "64 MB"],
                 "policy": ["baseline", "themis"], "chunks": [1, 2, 3, 4, 5, 6, 7, 8]}}
PAGE = 4096


@pytest.fixture
def results(tmp_path: Path, run_cli) -> tuple[Path, Path]:
    """A grid file and its finished results file (32 rows)."""
    grid = tmp_path / "g.yaml"
    grid.write_text(yaml.safe_dump(GRID))
    db = tmp_path / "g.db"
    code, _, err = run_cli("sweep", str(grid), "--db", str(db), "--jobs", "1", "--quiet")
    assert code == 0, err
    return grid, db


@pytest.mark.parametrize("page", [3, 5, 6])
def test_a_results_file_with_damaged_pages_is_refused_in_one_line(
        results: tuple[Path, Path], run_cli, page: int) -> None:
    """Bytes of one page overwritten (page 3: the meta table's text; 5, 6: the scenarios
    table's tree): --resume and summary (and export, which reads no meta, for a damaged
    tree) exit 2 with one line naming the file, instead of a traceback."""
    grid, db = results
    data = bytearray(db.read_bytes())
    assert len(data) >= (page + 1) * PAGE
    for index in range(page * PAGE + 100, (page + 1) * PAGE, 50):
        data[index] = 0xAB
    db.write_bytes(bytes(data))
    export = ("sweep", "export", str(db), "--csv", str(db.with_suffix(".csv")))
    for args in (("sweep", str(grid), "--db", str(db), "--resume", "--jobs", "1"),
                 ("sweep", "summary", str(db)), *([export] if page != 3 else [])):
        code, _, err = run_cli(*args)
        assert code == 2, (args, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert f"'{db}' is damaged" in err


@pytest.mark.parametrize("network", [None, "usbyte-8"])
def test_a_dataparallel_grid_with_workers_its_network_does_not_describe_is_refused(
        tmp_path: Path, run_cli, network: str | None) -> None:
    """workers 2 and 4 with the 8-rank preset (given or the default): the grid is refused
    before any scenario runs (its rows would say workers=2 but be priced for 8), with the
    message dataparallel gives; nothing is written."""
    grid = {"name": "dp", "domain": "dataparallel",
            "axes": {"workers": [2, 4], "policy": ["wfbp", "usbyte"]},
            "fixed": {"model": "resnet50"} | ({"network": network} if network else {})}
    path = tmp_path / "dp.yaml"
    path.write_text(yaml.safe_dump(grid))
    for extra in ((), ("--dry-run",)):
        code, _, err = run_cli("sweep", str(path), "--db", str(tmp_path / "dp.db"), *extra)
        assert code == 2, err
        assert "does not match network 'usbyte-8'" in err and "accepted: 8" in err
    assert not (tmp_path / "dp.db").exists()


def test_a_dataparallel_scenario_priced_for_other_ranks_is_an_error_row() -> None:
    """Combinations across axes that the grid check does not see are refused when the
    scenario runs (an error row), never stored as a mislabelled result."""
    from dlsched.errors import ConfigError
    from dlsched.sweep.domains import run_dataparallel_scenario

    with pytest.raises(ConfigError, match="does not match network"):
        run_dataparallel_scenario({"model": "resnet50", "workers": 2, "network": "usbyte-8",
                                   "device": "v100", "efficiency": None, "batch_size": 32,
                                   "policy": "wfbp"})


def test_dry_run_samples_every_value_of_every_parameter() -> None:
    """The dry run's sample walks each parameter's values in turn: with as many samples as
    the largest axis, every value of every axis is timed at least once (a grid whose cost
    hides in one policy is not estimated from the cheap ones only); indices are distinct and
    the same on every run."""
    from dlsched.sweep.estimate import stratified_sample
    from dlsched.sweep.grid import grid_from_data

    grid = grid_from_data({
        "name": "g", "domain": "collective",
        "axes": {"size": ["1 MB", "2 MB", "4 MB"], "policy": ["baseline", "themis", "dlsched"],
                 "chunks": [1, 2, 4, 8, 16]},
        "zip": [{"concurrency": [1, 2], "intra": ["fifo", "scf"]}]})
    sample = stratified_sample(grid, 5)
    assert sample == stratified_sample(grid, 5) and len(set(sample)) == len(sample) == 5
    chosen = [grid.scenario(i) for i in sample]
    for name, values in (("policy", {"baseline", "themis", "dlsched"}),
                         ("chunks", {1, 2, 4, 8, 16}), ("intra", {"fifo", "scf"})):
        assert {s[name] for s in chosen} == values, name


def test_durations_are_printed_in_readable_units() -> None:
    """Seconds below a minute, minutes and seconds, hours and minutes (was '6120 s')."""
    from dlsched.units import format_duration

    assert format_duration(7.9) == "7.9 s"
    assert format_duration(171.2) == "2 min 51 s"
    assert format_duration(6120) == "1 h 42 min"
    assert format_duration(0.0021) == "2.1 ms"


def test_sweep_run_and_dry_run_print_json(tmp_path: Path, run_cli) -> None:
    """``sweep GRID --json``: what ran as one JSON row (32 stored, none skipped); ``--dry-run
    --json`` a row per timed scenario, the counts and an estimate in seconds (0 to run after
    the sweep, with --resume)."""
    import json

    grid = tmp_path / "g.yaml"
    grid.write_text(yaml.safe_dump(GRID))
    db = tmp_path / "g.db"
    code, out, err = run_cli("sweep", str(grid), "--db", str(db), "--jobs", "1", "--json")
    assert code == 0, err
    [ran] = json.loads(out)["rows"]
    assert (ran["ran"], ran["skipped"], ran["stored"], ran["errors"]) == (32, 0, 32, 0)
    code, out, err = run_cli("sweep", str(grid), "--db", str(db), "--dry-run", "--resume",
                             "--json")
    assert code == 0, err
    estimate = json.loads(out)
    assert (estimate["scenarios"], estimate["distinct"], estimate["to_run"]) == (32, 32, 0)
    assert estimate["estimate_s"] == 0 and all(row["seconds"] > 0 for row in estimate["rows"])


@pytest.mark.parametrize(("args", "message"), [
    (("summary", "--baseline", "nccl"), "--baseline: no rows for policy 'nccl'; accepted: "
                                        "baseline, themis"),
    (("summary", "--by", "latency"), "--by: latency does not vary in this sweep; accepted: "
                                     "chunks, size"),
    (("plot", "--heatmap", "{tmp}/h.png", "--x", "latency"),
     "--x: 'latency' does not vary in this sweep; accepted: chunks, size"),
    (("plot", "--heatmap", "{tmp}/h.png", "--y", "op"),
     "--y: 'op' does not vary in this sweep; accepted: chunks, size"),
])
def test_summary_and_plot_options_are_named(results: tuple[Path, Path], run_cli, args,
                                            message: str) -> None:
    """An option naming a policy or a parameter the sweep lacks: one line starting with the
    option and the accepted values (were the library's field names, 'baseline:' and 'by:',
    the plot's after its work began)."""
    _, db = results
    tmp = db.parent
    code, _, err = run_cli("sweep", args[0], str(db), *(a.format(tmp=tmp) for a in args[1:]))
    assert code == 2 and err.startswith(f"error: {message}"), err
    assert not (tmp / "h.png").exists()
