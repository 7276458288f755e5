"""Names that say what runs: ``run`` executes on torch, ``train`` and ``pipeline plan``
simulate; the spellings before 0.1.0 (``train dataparallel``, ``pipeline run``) are gone."""

from __future__ import annotations

import json

import pytest

NOTE = "is deprecated and goes in the next release"


@pytest.mark.parametrize(("new", "old", "args", "message"), [
    (("run", "dataparallel"), ("train", "dataparallel"), ("--network", "usbyte-8",
                                                         "--policy", "fastest"),
     "--policy: unknown ['fastest']"),
    (("run", "pipeline"), ("pipeline", "run"), ("missing-plan.json",), "missing-plan.json"),
])
def test_run_group_executes_and_old_spellings_are_refused(run_cli, new, old, args, message):
    """``dlsched run X`` is the command (it refuses the bad input with the domain's error);
    the old spelling is no command: exit 2, the parser's usage error, not the domain's."""
    code, _, err = run_cli(*new, *args)
    assert code == 2 and message in err and NOTE not in err
    code, _, old_err = run_cli(*old, *args)
    assert code == 2 and message not in old_err and NOTE not in old_err
    assert any(usage in old_err for usage in ("No such command", "No such option",
                                              "unexpected extra argument")), old_err


def test_help_lists_the_run_group_not_the_old_spellings(run_cli):
    code, out, _ = run_cli("run", "--help")
    assert code == 0 and "dataparallel" in out and "pipeline" in out
    code, out, _ = run_cli("pipeline", "--help")
    assert code == 0 and " run " not in out


def test_link_sharing_is_the_pipeline_option_and_network_is_no_pipeline_option(run_cli,
                                                                              chain_file):
    """``--network`` names the all-reduce cost model (dataparallel); the pipeline's link
    sharing mode is ``--link-sharing`` (``--network``, its spelling before 0.1.0, is gone:
    the parser refuses it on ``pipeline plan`` and ``reproduce pipeline``)."""
    base = ("pipeline", "plan", "--model", str(chain_file), "--devices", "1x8-NVLink",
            "--microbatches", "4", "--json")
    code, out, err = run_cli(*base, "--link-sharing", "ps")
    assert code == 0 and NOTE not in err and json.loads(out)["rows"]
    for command in (base, ("reproduce", "pipeline")):
        code, _, err = run_cli(*command, "--network", "ps")
        assert code == 2 and "No such option: --network" in err and NOTE not in err
