"""One scenario schema per domain (the command's options come from it:
``tests/cli/test_options_from_schema.py``): a swept scenario gives the same numbers as the
command with those options, the command and the grid accept the same values, the microbatch
limit holds in the API, and the results store is typed, indexed and versioned."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from sweep_cases import thread_engine

from dlsched.errors import ConfigError
from dlsched.pipeline import PipelineProblem
from dlsched.pipeline.chains.model_source import load_chain
from dlsched.sweep import ResultStore, SweepJob, grid_from_data, read_rows, run_sweep
from dlsched.sweep.store import SCHEMA_VERSION
from dlsched.validation import MAX_MICROBATCHES


def _sweep_rows(tmp_path: Path, grid: dict) -> list[dict]:
    job = SweepJob.from_grid(grid_from_data(grid))
    with ResultStore(tmp_path / "r.db", job.columns, job.meta) as store, thread_engine() as eng:
        run_sweep(job, store, eng)
    return read_rows(tmp_path / "r.db")


def test_pipeline_sweep_varies_every_knob_as_the_command(run_cli, tmp_path, chain_file):
    """Recomputation, tensor parallelism, link sharing, one GPU per stage and the memory
    reserve swept: each row equals ``pipeline plan --json`` with the same options."""
    axes = {"recompute": ["none", "all"], "link_sharing": ["fifo", "ps"],
            "for_torch": [False, True]}
    fixed = {"model": str(chain_file), "devices": "1x8-NVLink", "microbatches": 4,
             "tensor_parallel": 1, "memory_reserve": "2 GiB", "planner": "1f1b"}
    rows = _sweep_rows(tmp_path, {"domain": "pipeline", "axes": axes, "fixed": fixed})
    assert len(rows) == 8 and {row["status"] for row in rows} == {"ok"}
    assert {row["memory_reserve"] for row in rows} == {2 * 2**30}
    for row in rows:
        args = ["--recompute", row["recompute"], "--link-sharing", row["link_sharing"],
                *(["--for-torch"] if row["for_torch"] else [])]
        code, out, _ = run_cli("pipeline", "plan", "--model", str(chain_file), "--devices",
                               "1x8-NVLink", "--microbatches", "4", "--tensor-parallel", "1",
                               "--memory-reserve", "2 GiB", "--planner", "1f1b", "--json",
                               *args)
        assert code == 0
        cli = json.loads(out)["rows"][0]
        for metric in ("iteration_s", "bound_s", "peak_memory_bytes", "stages", "gpus_used"):
            assert row[metric] == cli[metric], (metric, row)


def test_dataparallel_sweep_varies_in_flight_and_compute_as_the_command(run_cli, tmp_path):
    axes = {"in_flight": [1, 3], "backward_ratio": [2.0, 3.0]}
    fixed = {"model": "vgg16", "network": "ring:10Gb/s,5us", "workers": 4, "policy": "wfbp",
             "efficiency": 0.4}
    rows = _sweep_rows(tmp_path, {"domain": "dataparallel", "axes": axes, "fixed": fixed})
    assert {row["status"] for row in rows} == {"ok"}
    for row in rows:
        code, out, _ = run_cli("dataparallel", "--model", "vgg16", "--network",
                               "ring:10Gb/s,5us", "--workers", "4", "--policy", "wfbp",
                               "--efficiency", "0.4", "--in-flight", str(row["in_flight"]),
                               "--backward-ratio", str(row["backward_ratio"]), "--json")
        assert code == 0
        cli = json.loads(out)[0] if isinstance(json.loads(out), list) else \
            json.loads(out)["rows"][0]
        assert row["time_s"] == cli["time_s"] and row["messages"] == cli["messages"]
    times = {(row["in_flight"], row["backward_ratio"]): row["time_s"] for row in rows}
    assert times[(1, 3.0)] > times[(1, 2.0)]  # a slower backward (with --efficiency) is slower


def test_training_sweep_takes_the_commands_latency_switch(tmp_path):
    rows = _sweep_rows(tmp_path, {"domain": "training",
                                  "axes": {"latency": ["table", "zero"]},
                                  "fixed": {"workload": "resnet152", "policy": "baseline"}})
    table, zero = sorted(rows, key=lambda row: row["latency"])
    assert table["status"] == zero["status"] == "ok"
    assert zero["iteration_s"] <= table["iteration_s"]  # no step latency is never slower


def test_microbatch_limit_holds_in_the_api_and_the_grid(chain_file):
    chain, graph = load_chain(str(chain_file), 1), None
    from dlsched.hardware import load_devices

    graph = load_devices("1x8-NVLink")
    assert PipelineProblem(chain, graph, MAX_MICROBATCHES).num_microbatches == MAX_MICROBATCHES
    with pytest.raises(ConfigError, match="microbatches: microbatch count 4097 is out of range"):
        PipelineProblem(chain, graph, MAX_MICROBATCHES + 1)
    with pytest.raises(ConfigError, match=r"axes.microbatches\[0\]"):
        grid_from_data({"domain": "pipeline", "axes": {"microbatches": [MAX_MICROBATCHES + 1]}})


def test_store_columns_are_typed_indexed_and_versioned(tmp_path):
    job = SweepJob.from_grid(grid_from_data({"domain": "pipeline",
                                             "axes": {"microbatches": [4]}}))
    with ResultStore(tmp_path / "r.db", job.columns, job.meta):
        pass
    db = sqlite3.connect(tmp_path / "r.db")
    types = {row[1]: row[2] for row in db.execute("PRAGMA table_info(scenarios)")}
    assert types["microbatches"] == "INTEGER" and types["memory_fragmentation"] == "REAL"
    assert types["model"] == "TEXT" and types["for_torch"] == "INTEGER"
    assert types["iteration_s"] == "NUMERIC" and types["idx"] == "INTEGER"
    indexes = [row[1] for row in db.execute("PRAGMA index_list(scenarios)")]
    assert "scenarios_status" in indexes
    plan = " ".join(str(r) for r in db.execute(
        "EXPLAIN QUERY PLAN SELECT key FROM scenarios WHERE status = 'ok'"))
    assert "scenarios_status" in plan
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    db.close()


def test_a_file_of_another_layout_version_is_refused_in_one_line(tmp_path):
    old = tmp_path / "old.db"
    db = sqlite3.connect(old)
    db.execute("CREATE TABLE scenarios (key TEXT PRIMARY KEY, idx, status)")
    db.execute("CREATE TABLE sweep (name TEXT PRIMARY KEY, value TEXT)")
    db.commit()
    db.close()
    job = SweepJob.from_grid(grid_from_data({"domain": "pipeline"}))
    for action in (lambda: ResultStore(old, job.columns, job.meta), lambda: read_rows(old)):
        with pytest.raises(ConfigError) as error:
            action()
        message = str(error.value)
        assert "\n" not in message and "layout version 0" in message \
            and f"reads version {SCHEMA_VERSION}" in message
    db = sqlite3.connect(old)  # not altered
    assert db.execute("PRAGMA user_version").fetchone()[0] == 0
    assert [row[1] for row in db.execute("PRAGMA table_info(scenarios)")] == \
        ["key", "idx", "status"]


@pytest.mark.parametrize(("field", "value"), [
    ("memory_reserve", "2 TiB"), ("memory_reserve", "1 GiB"), ("memory_fragmentation", "nan"),
    ("memory_fragmentation", "0"), ("state_bytes", "0"), ("state_bytes", "20"),
    ("tensor_parallel", "+2"), ("tensor_parallel", "1,1"), ("recompute", "full,none"),
    ("recompute", "some"), ("precision", "fp8"), ("microbatch_size", "0")])
def test_the_command_and_the_grid_accept_the_same_values(run_cli, chain_file, field, value):
    """``pipeline plan`` validates its options with the grid's schema: a value is refused by
    both or by neither (the command refused a 2 TiB reserve the grid took, and took a '+2'
    tensor-parallel degree the grid refused)."""
    try:
        grid_from_data({"domain": "pipeline", "fixed": {field: value}})
        grid_accepts = True
    except ConfigError:
        grid_accepts = False
    code, _, err = run_cli("pipeline", "plan", "--model", str(chain_file), "--devices",
                           "1x8-NVLink", "--microbatches", "4", "--planner", "1f1b", "--json",
                           f"--{field.replace('_', '-')}", value)
    assert code in (0, 2) and (code == 0) == grid_accepts, err
    if code == 2:
        assert f"--{field.replace('_', '-')}" in err and "\n" not in err.strip()


@pytest.mark.parametrize(("command", "domain", "field", "value"), [
    (("dataparallel", "--model", "vgg16", "--policy", "wfbp"), "dataparallel", "in_flight", "0"),
    (("dataparallel", "--model", "vgg16", "--policy", "wfbp"), "dataparallel", "in_flight", "3"),
    (("dataparallel", "--model", "vgg16", "--policy", "wfbp"), "dataparallel", "efficiency",
     "2"),
    (("dataparallel", "--model", "vgg16", "--policy", "wfbp"), "dataparallel", "workers", "4"),
    (("train", "--policy", "baseline"), "training", "iterations", "1001"),
    (("train", "--policy", "baseline"), "training", "iterations", "1"),
    (("train", "--policy", "baseline"), "training", "chunks", "0")])
def test_dataparallel_and_train_take_the_grids_values(run_cli, command, domain, field, value):
    """``dataparallel`` and ``train`` validate their options with the grid's schema too: a
    value is refused by both, with the option named, or by neither."""
    try:
        grid_from_data({"domain": domain, "fixed": {field: value}})
        grid_accepts = True
    except ConfigError:
        grid_accepts = False
    option = f"--{field.replace('_', '-')}"
    code, _, err = run_cli(*command, "--json", option, value)
    assert code in (0, 2) and (code == 0) == grid_accepts, err
    if code == 2:
        assert err.startswith(f"error: {option}: ") and "\n" not in err.strip()
