"""``dlsched plan`` with its exports: the Megatron-LM arguments inside the JSON document, and
a plan the framework cannot run refused with one line before any output."""

from __future__ import annotations

import json

GIVEN = ["plan", "--model", "llama3-70b", "--cluster", "dgx-h100", "--gpus", "64",
         "--global-batch", "256", "--tp", "8", "--pp", "2", "--dp", "4", "--chunks", "1",
         "--microbatch-size", "1", "--recompute", "selective", "--sequence-parallel",
         "--zero", "1"]


def test_json_with_megatron_args_is_one_json_document(run_cli):
    """stdout parses as JSON whole; the arguments are in it as a list (with the Llama
    flags), the comments beside them."""
    code, out, err = run_cli(*GIVEN, "--schedule", "1f1b", "--json", "--megatron-args")
    assert code == 0, err
    document = json.loads(out)
    args = document["megatron_args"]["args"]
    assert args[:2] == ["--num-layers", "80"] and "--swiglu" in args
    assert args[args.index("--normalization") + 1] == "RMSNorm"
    assert any("GPUs" in line for line in document["megatron_args"]["comments"])
    assert len(document["rows"]) == 1


def test_an_export_the_framework_cannot_run_is_refused_before_any_output(run_cli, tmp_path):
    """ZB-H1 with --megatron-args, Mixtral with --torchtitan-toml: exit 2, one line naming
    the field, nothing on stdout, no file written."""
    code, out, err = run_cli(*GIVEN, "--schedule", "zb-h1", "--megatron-args")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--schedule: zb-h1 has no Megatron-LM schedule" in err
    toml = tmp_path / "titan.toml"
    code, out, err = run_cli("plan", "--model", "mixtral-8x7b", "--cluster", "dgx-h100",
                             "--gpus", "64", "--global-batch", "256", "--tp", "1", "--pp", "4",
                             "--dp", "16", "--ep", "8", "--chunks", "1", "--microbatch-size",
                             "1", "--schedule", "1f1b", "--recompute", "full",
                             "--no-sequence-parallel", "--zero", "1",
                             "--torchtitan-toml", str(toml))
    assert code == 2 and out == "" and "--model: mixtral-8x7b is a mixture of experts" in err
    assert not toml.exists()
