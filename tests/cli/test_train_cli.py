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
    trace = json.loads((tmp_path / "t-dlsched.json").read_text())
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert {"compute", "dim1 SW", "dim2 SW"} <= names
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
    rows = themis_training.reproduce([scenario])
    assert [r["policy"] for r in rows] == list(themis_training.POLICIES)
    summary = themis_training.summarize(rows)
    assert summary[0]["paper_themis_avg"] == 1.30
    assert summary[0]["dlsched_over_themis_min"] >= 1.0
    assert summary[0]["ideal_avg"] >= summary[0]["dlsched_avg"]
