"""Grid files: products and zips expand as written, values are validated and normalized, and
every bad field is named."""

from __future__ import annotations

import json

import pytest
from sweep_cases import SMALL_GRID

from dlsched.errors import ConfigError
from dlsched.sweep import grid_from_data, scenario_key


def test_product_times_zip_count_and_order() -> None:
    """2 topologies x 2 sizes x 2 policies x one zip group of 2 = 16; first axis slowest."""
    grid = grid_from_data(SMALL_GRID)
    scenarios = list(grid.scenarios())
    assert grid.count == len(scenarios) == 16
    assert [s["topology"] for s in scenarios[:8]] == ["2D-SW_SW"] * 8
    assert {(s["chunks"], s["concurrency"]) for s in scenarios} == {(4, 1), (8, 2)}
    assert scenarios[0]["size"] == 1_000_000 and scenarios[-1]["size"] == 64_000_000
    assert scenarios[0]["op"] == "all-reduce" and scenarios[0]["latency_scale"] == 1.0
    assert grid.varied == ("topology", "size", "policy", "chunks", "concurrency")


def test_keys_are_stable_and_distinct() -> None:
    """The key depends only on domain and parameters (not on order of insertion)."""
    scenarios = list(grid_from_data(SMALL_GRID).scenarios())
    keys = {scenario_key("collective", s) for s in scenarios}
    assert len(keys) == 16
    first = scenarios[0]
    assert scenario_key("collective", dict(reversed(first.items()))) == \
        scenario_key("collective", first)
    assert scenario_key("pipeline", first) != scenario_key("collective", first)


@pytest.mark.parametrize(("change", "message"), [
    ({"domain": "nope"}, "accepted: collective, dataparallel, pipeline"),
    ({"axes": {"colour": [1]}}, "axes.colour: unknown parameter 'colour'"),
    ({"axes": {"size": ["1 MB", "lots"]}}, "axes.size[1]"),
    ({"axes": {"chunks": [4, 0]}}, "axes.chunks[1]"),
    ({"axes": {"policy": ["themis", "magic"]}}, "axes.policy[1]: unknown collective policy"),
    ({"axes": {"latency_scale": [float("inf")]}}, "axes.latency_scale[0]"),
    ({"zip": [{"chunks": [1, 2], "size": [1, "x"]}]}, "zip[0].size[1]"),
    ({"zip": [{"chunks": [1, 2], "size": [1]}]}, "zip group 0"),
    ({"fixed": {"chunks": 3}, "axes": {"chunks": [1]}}, "also set in fixed"),
    ({"fixed": {"topology": "no-such-net"}}, "fixed.topology"),
    ({"metrics": ["speed"]}, "metrics: unknown ['speed']"),
    ({"axes": {"policy": []}}, "axis 'policy' has no values"),
    ({"extra_key": 1}, "extra_key"),
])
def test_bad_grids_name_the_field(change: dict, message: str) -> None:
    """Each mistake raises ConfigError whose text points at the place in the file."""
    with pytest.raises(ConfigError) as error:
        grid_from_data({"domain": "collective"} | change)
    assert message in str(error.value)


def test_huge_grid_refused_before_expansion() -> None:
    """A grid of 10^12 scenarios is refused by counting, not by expanding it."""
    axis = list(range(1, 1001))
    with pytest.raises(ConfigError, match="at most"):
        grid_from_data({"domain": "collective",
                        "axes": {"chunks": axis, "concurrency": axis, "size": axis,
                                 "latency_scale": axis}})


def test_cli_bad_grid_exits_2(run_cli, tmp_path) -> None:
    """A bad grid file: exit code 2 and the field on stderr; a missing file too; no db."""
    path = tmp_path / "grid.json"
    path.write_text(json.dumps({"domain": "collective", "axes": {"chunks": [8, -1]}}))
    code, _, err = run_cli("sweep", str(path), "--db", str(tmp_path / "r.db"))
    assert code == 2 and "axes.chunks[1]" in " ".join(err.split())
    assert not (tmp_path / "r.db").exists()
    code, _, err = run_cli("sweep", "run", str(tmp_path / "missing.yaml"))
    assert code == 2 and "does not exist" in " ".join(err.split())
    path.write_text(json.dumps({"domain": "collective"}))
    code, _, err = run_cli("sweep", str(path), "--db", str(tmp_path))
    assert code == 2 and "is a directory" in " ".join(err.split())


def test_dry_run_counts_without_writing(run_cli, tmp_path) -> None:
    """--dry-run prints the scenario count and an estimate and writes no results file."""
    path = tmp_path / "grid.json"
    path.write_text(json.dumps(SMALL_GRID))
    code, out, _ = run_cli("sweep", str(path), "--dry-run", "--db", str(tmp_path / "r.db"))
    assert code == 0 and "16 scenarios in the grid" in out and "16 to run" in out
    assert not (tmp_path / "r.db").exists()


def test_training_domain_alias_and_direct_equality() -> None:
    """'ours' is stored as 'dlsched'; a training scenario's metrics equal run_training's."""
    from dlsched.hardware import load_topology
    from dlsched.training import get_workload, run_training

    grid = grid_from_data({"domain": "training", "axes": {"policy": ["baseline", "ours"]},
                           "fixed": {"workload": "dlrm", "topology": "2D-SW_SW"}})
    first, second = grid.scenarios()
    assert second["policy"] == "dlsched"
    net = load_topology("2D-SW_SW")
    direct = run_training(get_workload("dlrm", net.num_npus), net, "baseline", 2, 64)
    assert grid.domain.evaluate(first)["iteration_s"] == direct.iteration_s
    with pytest.raises(ConfigError, match=r"axes\.workload\[1\]"):
        grid_from_data({"domain": "training", "axes": {"workload": ["dlrm", "llama"]}})


def test_ours_means_dlsched_in_every_domain() -> None:
    """``ours`` is read as ``dlsched`` for the collective, data-parallel and pipeline
    policies, as on the command line."""
    for domain, name in (("collective", "policy"), ("dataparallel", "policy"),
                         ("pipeline", "planner")):
        grid = grid_from_data({"domain": domain, "axes": {name: ["ours"]}})
        assert [s[name] for s in grid.scenarios()] == ["dlsched"]
