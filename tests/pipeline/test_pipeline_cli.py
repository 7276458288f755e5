"""``dlsched pipeline plan``/``devices`` and the reproduction rows, on a small chain file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlsched.experiments import pipeline as experiment
from dlsched.experiments.pipeline import Scenario, run_scenario, summarize
from dlsched.pipeline import PLANNERS

CHAIN = """
name: toy
blocks:
""" + "".join(f"  - {{name: l{i}, forward_flops: {1 + i % 3}e12, activation: 8 MB, "
              f"params: 200 MB, stash: 64 MB}}\n" for i in range(8))


@pytest.fixture
def chain_file(tmp_path: Path) -> Path:
    path = tmp_path / "toy.yaml"
    path.write_text(CHAIN)
    return path


def test_plan_json_rows(run_cli, chain_file: Path, tmp_path: Path) -> None:
    """--json carries model, devices, planner, iteration_s, bound_s; trace and plot written."""
    trace, plot = tmp_path / "t.json", tmp_path / "p.png"
    code, out, _ = run_cli("pipeline", "plan", "--model", str(chain_file), "--devices",
                           "hetero-islands", "--microbatches", "8", "--planner", "dlsched,gpipe",
                           "--json", "--trace", str(trace), "--plot", str(plot))
    assert code == 0
    payload = json.loads(out)
    rows = payload["rows"]
    assert [r["planner"] for r in rows] == ["dlsched", "gpipe"]
    for row in rows:
        assert {"model", "devices", "planner", "iteration_s", "bound_s"} <= set(row)
        assert row["iteration_s"] >= row["bound_s"] * (1 - 1e-9)
    assert rows[0]["iteration_s"] <= rows[1]["iteration_s"]
    assert payload["orders"].startswith("gpu0:")
    processes = {e["args"]["name"] for e in json.loads(trace.read_text())["traceEvents"]
                 if e["name"] == "process_name"}
    assert {name.split(":")[0] for name in processes} == {"dlsched", "gpipe"}
    assert plot.exists()


def test_plan_tables(run_cli, chain_file: Path) -> None:
    """The human output shows units in headers and the per-GPU order."""
    code, out, _ = run_cli("pipeline", "plan", "--model", str(chain_file), "--devices",
                           "1x8-NVLink", "--microbatches", "4")
    assert code == 0
    assert "(ms)" in out and "(GiB)" in out and "per-GPU order" in out


@pytest.mark.parametrize(("args", "message"), [
    (["--planner", "fastest"], "accepted: dlsched"),
    (["--devices", "nowhere"], "neither a preset"),
    (["--microbatches", "0"], "--microbatches: microbatch count 0 is out of range"),
    (["--link-sharing", "tcp"],
     "--link-sharing: unknown link sharing mode 'tcp'; accepted: fifo, ps"),
])
def test_bad_inputs_exit_2(run_cli, chain_file: Path, args: list[str], message: str) -> None:
    """Bad options exit with code 2 and a message naming the field."""
    code, _, err = run_cli("pipeline", "plan", "--model", str(chain_file), *args)
    assert code == 2
    assert message in " ".join(err.split())


def test_devices_listing(run_cli) -> None:
    """The presets are listed."""
    code, out, _ = run_cli("pipeline", "devices")
    assert code == 0 and "2x8-NVLink-100Gb" in out


def test_reproduction_rows_on_a_chain_file(chain_file: Path) -> None:
    """One scenario: a row per planner, dlsched never slower than any baseline."""
    rows = run_scenario(Scenario(str(chain_file), 1, "hetero-NVLink-PCIe", 16))
    assert [r["planner"] for r in rows] == list(PLANNERS)
    assert all(r["dlsched_speedup"] >= 1 - 1e-9 for r in rows if r["dlsched_speedup"] is not None)
    summary = summarize(rows)
    assert {s["baseline"] for s in summary} <= set(PLANNERS) - {"dlsched"}
    assert all(s["paper_max_speedup"] == 2.57 for s in summary)


def test_reproduce_pipeline_json(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """`reproduce pipeline --json --link-sharing fifo` on two zoo scenarios: required keys, dlsched
    never slower; a bad network mode exits 2 before any work."""
    monkeypatch.setattr(experiment, "SCENARIOS", experiment.SCENARIOS[:2])
    code, out, _ = run_cli("reproduce", "pipeline", "--json", "--link-sharing", "fifo")
    assert code == 0
    payload = json.loads(out)
    assert len(payload["rows"]) == 2 * len(PLANNERS)
    for row in payload["rows"]:
        assert {"model", "devices", "planner", "iteration_s", "bound_s", "network"} <= set(row)
        assert row["network"] == "fifo"
        if row["iteration_s"] is not None:
            assert row["dlsched_speedup"] >= 1 - 1e-9
            assert row["iteration_s"] >= row["bound_s"] * (1 - 1e-9)
    assert {s["baseline"] for s in payload["summary"]} == set(PLANNERS) - {"dlsched"}
    code, _, err = run_cli("reproduce", "pipeline", "--link-sharing", "tcp")
    assert code == 2
    assert "--link-sharing: unknown link sharing mode 'tcp'; accepted: fifo, ps" in err
