"""The collective CLI: JSON output, files, and exit code 2 for bad input."""

import json

import pytest


def test_collective_json_compares_policies(run_cli, tmp_path):
    """--json prints rows for each policy with times, bounds and per-dimension stats."""
    code, out, _ = run_cli("collective", "--size", "100 MB", "--chunks", "16", "--json",
                           "--trace", str(tmp_path / "t.json"), "--plot", str(tmp_path / "p.png"))
    assert code == 0
    rows = json.loads(out)["rows"]
    assert [r["policy"] for r in rows] == ["baseline", "themis", "dlsched"]
    for row in rows:
        assert row["time_s"] >= row["bound_s"] >= row["ideal_s"] * (1 - 1e-12)
        assert 0 < row["utilization"] <= 1
        assert (row["chunks"], row["concurrency"]) == (16, 1)  # as given
        assert row["plan_chunks"] >= 1 and row["plan_concurrency"] >= 1  # as used
    assert [(r["plan_chunks"], r["plan_concurrency"]) for r in rows[:2]] == [(16, 1)] * 2
    trace = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    processes = {e["args"]["name"] for e in trace if e["name"] == "process_name"}
    assert processes == {"baseline: network", "themis: network", "dlsched: network"}
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_collective_table_names_units(run_cli, tmp_path):
    """The terminal table states its units; --csv writes a file."""
    code, out, _ = run_cli("collective", "--policy", "themis", "--size", "64 MiB",
                           "--csv", str(tmp_path / "r.csv"))
    assert code == 0
    assert "time (ms)" in out and "BW util (%)" in out and "bytes sent per NPU (MB)" in out
    assert (tmp_path / "r.csv").read_text().startswith("topology,")


def test_topologies_lists_presets(run_cli):
    """dlsched topologies lists every preset."""
    code, out, _ = run_cli("topologies")
    assert code == 0
    assert "4D-Ring_FC_Ring_SW" in out and "TPUv4-like" in out


@pytest.mark.parametrize(("args", "needle"), [
    (("--topology", "nowhere"), "presets"),
    (("--policy", "magic"), "accepted"),
    (("--op", "broadcast"), "all-reduce"),
    (("--intra", "lifo"), "scf"),
    (("--size", "12 parsecs"), "accepted"),
    (("--chunks", "0"), "chunks"),
    (("--concurrency", "0"), "concurrency"),
])
def test_bad_input_exits_2_with_a_clear_message(run_cli, args, needle):
    """Each bad option gives exit code 2 and a message naming what is accepted."""
    code, _, err = run_cli("collective", *args)
    assert code == 2
    assert needle in err


def test_bad_topology_file_exits_2(run_cli, tmp_path):
    """A topology file with a non-power-of-two halving-doubling size is refused."""
    path = tmp_path / "bad.yaml"
    path.write_text("dims:\n  - {kind: Switch, size: 6, bandwidth: 100 GB/s}\n")
    code, _, err = run_cli("collective", "--topology", str(path))
    assert code == 2
    assert "power-of-two" in err and "dims[0]" in err
