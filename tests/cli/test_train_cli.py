"""``dlsched train`` and the themis-training reproduction's functions."""

import json

from dlsched.experiments import themis_training


def test_train_json_rows_and_files(run_cli, tmp_path):
    """--json prints a row per policy with the required fields; traces and a plot are written."""
    code, out, _ = run_cli("train", "--workload", "dlrm", "--topology", "2D-SW_SW",
                           "--policy", "baseline,themis,ours,ideal", "--chunks", "8", "--json",
                           "--trace", str(tmp_path / "t.json"), "--plot", str(tmp_path / "p.png"))
    assert code == 0
    rows = json.loads(out)["rows"]
    assert [r["policy"] for r in rows] == ["baseline", "themis", "dlsched", "ideal"]
    for row in rows:
        assert {"workload", "topology", "latency", "policy", "iteration_s", "compute_s",
                "exposed_comm_s"} <= row.keys()
        assert row["iteration_s"] >= row["compute_s"]
    trace = json.loads((tmp_path / "t.json").read_text())  # one file, a process per policy
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert {"compute", "dim1 SW", "dim2 SW"} <= names
    processes = {e["args"]["name"].split(":")[0] for e in trace["traceEvents"]
                 if e.get("name") == "process_name"}
    assert processes == {"baseline", "themis", "dlsched", "ideal"}
    assert not list(tmp_path.glob("t-*.json"))
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_train_bad_input_exits_2(run_cli):
    """Unknown workload, policy or latency setting: exit code 2 naming the field."""
    for args, field in ((("--workload", "alexnet"), "workload"),
                        (("--policy", "fastest"), "policy"), (("--latency", "some"), "latency")):
        code, _, err = run_cli("train", *args)
        assert code == 2 and field in err


def test_reproduction_rows_and_summary_on_one_scenario():
    """A scenario gives one row per policy with speedups; the summary carries the paper."""
    scenario = themis_training.Scenario("dlrm", "3D-FC_Ring_SW", "zero", chunks=8)
    rows = themis_training.run_scenario(scenario)
    assert [r["policy"] for r in rows] == list(themis_training.POLICIES)
    summary = themis_training.summarize(rows)
    assert summary[0]["paper_themis_avg"] == 1.30
    assert summary[0]["dlsched_over_themis_min"] >= 1.0
    assert summary[0]["ideal_avg"] >= summary[0]["dlsched_avg"]


def test_train_runs_the_astra_sim_examples(run_cli):
    """ASTRA-sim network + system + text workload run through train; the transformer's
    model-parallel collectives land on the first dimensions only."""
    code, out, _ = run_cli("train", "--astra-network", "examples/astra/network_3d.yml",
                           "--astra-system", "examples/astra/system_themis.json",
                           "--astra-workload", "examples/astra/workload_transformer.txt",
                           "--json")
    assert code == 0
    rows = json.loads(out)["rows"]
    ideal = rows[-1]["iteration_s"]
    assert all(r["iteration_s"] >= ideal * (1 - 1e-9) for r in rows)
    assert rows[0]["workload"] == "workload_transformer"
