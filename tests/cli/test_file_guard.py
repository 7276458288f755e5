"""The input/output guard over every command's file options (``cli/paths.py``).

Each case names a command whose output is also an input (or whose two outputs are one file),
spelled four ways: the same text, ``./name`` against the absolute path, a symbolic link and a
hard link. Every spelling must be refused before any work: exit 2, one line naming both
options, no input file changed (hashed before and after) and no file created, in the working
folder or anywhere else under the test's temporary root. The inputs hold placeholder text:
the guard refuses before reading them, so nothing heavy ever runs; a command that read them
first would fail on their content and not name both options.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import pytest

TOPOLOGY = ('{"name": "t", "dims": [{"kind": "Ring", "size": 4, "bandwidth": "100 GB/s", '
            '"latency": "1 us"}]}')

# (case id, arguments with {a} = the input file and {b} = the same file spelled otherwise,
#  file name, the two options the error must name)
CASES = [
    ("collective-topology", "collective --topology {a} --trace {b}", "in.json",
     ("--trace", "--topology")),
    ("collective-astra-network", "collective --astra-network {a} --csv {b}", "net.csv",
     ("--csv", "--astra-network")),
    ("collective-astra-system", "collective --astra-network examples/astra/network_3d.yml "
     "--astra-system {a} --trace {b}", "s.json", ("--trace", "--astra-system")),
    ("collective-plot", "collective --topology {a} --plot {b}", "t.png", ("--plot", "--topology")),
    ("train-topology", "train --topology {a} --trace {b}", "t.json", ("--trace", "--topology")),
    ("train-astra-system", "train --astra-system {a} --trace {b}", "s.json",
     ("--trace", "--astra-system")),
    ("train-astra-workload", "train --astra-workload {a} --csv {b}", "w.csv",
     ("--csv", "--astra-workload")),
    ("dataparallel-profile-csv", "dataparallel --profile {a} --csv {b}", "prof.csv",
     ("--csv", "--profile")),
    ("dataparallel-profile-json", "dataparallel --profile {a} --trace {b}", "prof.json",
     ("--trace", "--profile")),
    ("dataparallel-network", "dataparallel --network {a} --trace {b}", "n.json",
     ("--trace", "--network")),
    ("dataparallel-device", "dataparallel --device {a} --plot {b}", "gpu.png",
     ("--plot", "--device")),
    ("pipeline-plan-model", "pipeline plan --model {a} --save {b}", "chain.json",
     ("--save", "--model")),
    ("pipeline-plan-devices", "pipeline plan --devices {a} --trace {b}", "d.json",
     ("--trace", "--devices")),
    ("pipeline-plan-gpu", "pipeline plan --gpu {a} --csv {b}", "g.csv", ("--csv", "--gpu")),
    ("pipeline-plan-two-outputs", "pipeline plan --save {a} --trace {b}", "x.json",
     ("--save", "--trace")),
    ("pipeline-export-plan", "pipeline export {a} --torch-csv {b}", "plan.csv",
     ("--torch-csv", "PLAN")),
    ("pipeline-export-mapping", "pipeline export {a} --torch-csv o.csv --mapping {b}",
     "plan.json", ("--mapping", "PLAN")),
    ("pipeline-profile-two-outputs", "pipeline profile --chain {a} --devices-out {b}",
     "c.yaml", ("--devices-out", "--chain")),
    ("run-pipeline-plan", "run pipeline {a} --trace {b}", "plan.json", ("--trace", "PLAN")),
    ("run-pipeline-torch-csv-mapping", "run pipeline plan.json --torch-csv o.csv --trace {b}",
     "o.stages.json", ("--trace", "--torch-csv's mapping")),
    ("plan-model", "plan --model {a} --trace {b}", "m.json", ("--trace", "--model")),
    ("plan-cluster", "plan --cluster {a} --csv {b}", "c.csv", ("--csv", "--cluster")),
    ("run-dataparallel-network", "run dataparallel --network {a} --csv {b}", "n.csv",
     ("--csv", "--network")),
    ("sweep-grid-as-db", "sweep {a} --db {b}", "g.yaml", ("--db", "GRID")),
    ("sweep-grid-as-db-overwrite", "sweep {a} --db {b} --overwrite", "g.yaml",
     ("--db", "GRID")),
    ("sweep-grid-as-db-journal", "sweep {a} --db g --overwrite", "g-wal",
     ("--db (its -wal file)", "GRID")),
    ("sweep-export", "sweep export {a} --csv {b}", "r.csv", ("--csv", "DB")),
    ("sweep-summary", "sweep summary {a} --csv {b}", "r.csv", ("--csv", "DB")),
    ("sweep-plot", "sweep plot {a} --line {b}", "r.png", ("--line", "DB")),
    ("compute-calibrate", "compute calibrate {a} --out {b}", "m.yaml", ("--out", "MEASUREMENTS")),
    ("reproduce-two-outputs", "reproduce themis --csv {a} --db {b}", "x.csv", ("--db", "--csv")),
]
SPELLINGS = ["same", "dot-slash-vs-absolute", "symlink", "hardlink"]


def _tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` (relative path -> hash of its bytes; links by target)."""
    files = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder, name)
            relative = str(path.relative_to(root))
            files[relative] = (f"-> {os.readlink(path)}" if path.is_symlink()
                               else hashlib.sha256(path.read_bytes()).hexdigest())
    return files


def _spell(work: Path, name: str, spelling: str) -> tuple[str, str]:
    """The input's text and the output's text naming the same file."""
    if spelling == "same":
        return name, name
    if spelling == "dot-slash-vs-absolute":
        return f"./{name}", str(work / name)
    alias = f"alias-{name}"
    if spelling == "symlink":
        (work / alias).symlink_to(name)
    else:
        os.link(work / name, work / alias)
    return name, alias


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize(("args", "name", "options"), [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_an_output_that_is_an_input_is_refused_before_any_work(
        run_cli, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
        args: str, name: str, options: tuple[str, str], spelling: str) -> None:
    """Exit 2, one line naming both options; no input changed and nothing written."""
    root = tmp_path_factory.getbasetemp()
    work = tmp_path_factory.mktemp("guard")
    examples = Path(__file__).resolve().parents[2] / "examples"
    (work / name).write_text(TOPOLOGY if name.endswith(".json") else "placeholder\n")
    (work / "plan.json").write_text("{}") if name != "plan.json" else None
    (work / "o.csv").write_text("placeholder\n") if name != "o.csv" else None
    (work / "examples").symlink_to(examples)
    first, second = _spell(work, name, spelling)
    monkeypatch.chdir(work)
    before = _tree(root)
    code, out, err = run_cli(*args.format(a=first, b=second).split())
    assert code == 2, (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert re.match(rf"error: {re.escape(options[0])}: '[^']*' is also given to "
                    rf"{re.escape(options[1])}( \(an input\))?( as '[^']*')?; accepted: ",
                    lines[0]), err
    assert _tree(root) == before


def test_two_spellings_of_a_new_output_are_one_file(tmp_path: Path, run_cli,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Outputs that do not exist yet are compared by their resolved path: ``sub/../x.json``
    and ``x.json`` (and a symlinked folder) are one file."""
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to("real")
    monkeypatch.chdir(tmp_path)
    for save, trace in (("x.json", "sub/../x.json"), ("real/p.json", "linked/p.json")):
        code, _, err = run_cli("pipeline", "plan", "--save", save, "--trace", trace)
        assert code == 2 and "--save" in err and "is also given to --trace" in err, err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["linked", "real"]


def test_a_grid_may_not_name_its_results_file(tmp_path: Path, run_cli,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A file named by a grid value (here a topology) is an input of the sweep: ``--db`` on it
    is refused, even with --overwrite, and the file is kept."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.json").write_text(TOPOLOGY)
    (tmp_path / "g.yaml").write_text("domain: collective\naxes: {policy: [baseline]}\n"
                                     "fixed: {topology: t.json, size: 1 MB, chunks: 2}\n")
    code, _, err = run_cli("sweep", "g.yaml", "--db", "t.json", "--overwrite")
    assert code == 2 and "--db: 't.json' is also given to GRID's fixed.topology" in err, err
    assert (tmp_path / "t.json").read_text() == TOPOLOGY


def test_several_plans_saved_beside_an_input_are_refused(tmp_path: Path, run_cli,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """``--save s.json`` with several planners writes ``s-<planner>.json``: that derived name
    is guarded too (here it is the chain file read)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s-gpipe.json").write_text("{}")
    code, _, err = run_cli("pipeline", "plan", "--model", "s-gpipe.json", "--planner",
                           "dlsched,gpipe", "--save", "s.json")
    assert code == 2 and "--save (gpipe): 's-gpipe.json' is also given to --model" in err, err
    assert (tmp_path / "s-gpipe.json").read_text() == "{}"
