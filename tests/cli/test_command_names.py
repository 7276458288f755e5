"""Names that say what runs: ``run`` executes on torch, ``train`` and ``pipeline plan``
simulate; the old spellings work for one release with a one-line note on stderr."""

from __future__ import annotations

import json

import pytest

NOTE = "is deprecated and goes in the next release"


@pytest.mark.parametrize(("new", "old", "args", "message"), [
    (("run", "dataparallel"), ("train", "dataparallel"), ("--network", "usbyte-8",
                                                         "--policy", "fastest"),
     "policy: unknown ['fastest']"),
    (("run", "pipeline"), ("pipeline", "run"), ("missing-plan.json",), "missing-plan.json"),
])
def test_run_group_executes_and_old_spellings_are_noted(run_cli, new, old, args, message):
    """``dlsched run X`` is the command; ``old`` runs the same command after one note line
    naming the new spelling (both refuse the same bad input with the same error)."""
    code, _, err = run_cli(*new, *args)
    assert code == 2 and message in err and NOTE not in err
    code, _, old_err = run_cli(*old, *args)
    assert code == 2 and message in old_err
    note = [line for line in old_err.splitlines() if NOTE in line]
    assert note == [f"note: 'dlsched {' '.join(old)}' {NOTE}; use 'dlsched {' '.join(new)}'"]


def test_help_lists_the_run_group_not_the_old_spellings(run_cli):
    code, out, _ = run_cli("run", "--help")
    assert code == 0 and "dataparallel" in out and "pipeline" in out
    code, out, _ = run_cli("pipeline", "--help")
    assert code == 0 and " run " not in out


def test_link_sharing_is_the_pipeline_option_and_network_its_old_spelling(run_cli, chain_file):
    """``--network`` names the all-reduce cost model (dataparallel); the pipeline's link
    sharing mode is ``--link-sharing``; ``--network ps`` there still gives the same plan."""
    base = ("pipeline", "plan", "--model", str(chain_file), "--devices", "1x8-NVLink",
            "--microbatches", "4", "--json")
    code, out, err = run_cli(*base, "--link-sharing", "ps")
    assert code == 0 and NOTE not in err
    new_rows = json.loads(out)["rows"]
    code, out, err = run_cli(*base, "--network", "ps")
    assert code == 0 and "'--network' " + NOTE + "; use '--link-sharing'" in err
    old_rows = json.loads(out)["rows"]
    drop = {"planning_s"}
    assert [{k: v for k, v in r.items() if k not in drop} for r in old_rows] == \
        [{k: v for k, v in r.items() if k not in drop} for r in new_rows]
    code, _, err = run_cli(*base, "--network", "fifo", "--link-sharing", "ps")
    assert code == 2 and "--link-sharing: given as 'ps' and under its old spelling --network" \
        in " ".join(err.split())
