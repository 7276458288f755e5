"""`dlsched collective --astra-network/--astra-system` runs a collective from ASTRA-sim files."""

import json
from pathlib import Path

EXAMPLES = Path(__file__).parents[2] / "examples" / "astra"


def test_collective_from_astra_files(run_cli):
    """The system's Themis+SCF, 64 chunks run first on the YAML's 1024-NPU network."""
    code, out, _ = run_cli("collective", "--astra-network", str(EXAMPLES / "network_3d.yml"),
                           "--astra-system", str(EXAMPLES / "system_themis.json"),
                           "--policy", "baseline", "--size", "16 MB", "--json")
    assert code == 0
    rows = json.loads(out)["rows"]
    assert [r["policy"] for r in rows] == ["themis", "baseline"]
    assert rows[0]["topology"] == "network_3d" and rows[0]["chunks"] == 64
    assert rows[0]["intra"] == "scf" and rows[0]["concurrency"] == 1
    assert all(r["time_s"] >= r["bound_s"] for r in rows)


def test_bad_astra_file_exits_2_naming_file_and_field(run_cli, tmp_path):
    bad = tmp_path / "net.yml"
    bad.write_text("topology: [Ring]\nnpus_count: [1]\nbandwidth: [10]\nlatency: [1]\n")
    code, _, err = run_cli("collective", "--astra-network", str(bad))
    assert code == 2
    assert f"{bad}:2: npus_count[0]" in " ".join(err.split())
