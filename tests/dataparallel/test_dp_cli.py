"""`dlsched dataparallel` and `dlsched reproduce usbyte`."""

import json


def test_dataparallel_json_rows(run_cli, tmp_path):
    """--json rows carry model, workers, policy, time_s and bound_s; trace and plot written."""
    code, out, _ = run_cli("dataparallel", "--model", "vgg16", "--workers", "4", "--network",
                           "usbyte-4", "--policy", "wfbp,usbyte,dlsched", "--json",
                           "--trace", str(tmp_path / "t.json"), "--plot", str(tmp_path / "p.png"))
    assert code == 0
    rows = json.loads(out)["rows"]
    assert [r["policy"] for r in rows] == ["wfbp", "usbyte", "dlsched"]
    for row in rows:
        assert {"model", "workers", "policy", "time_s", "bound_s"} <= set(row)
        assert row["time_s"] >= row["bound_s"] * (1 - 1e-12)
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_profile_input(run_cli, tmp_path):
    """A per-layer profile CSV replaces the zoo model."""
    path = tmp_path / "prof.csv"
    path.write_text("name,params,forward_time_s,backward_time_s\na,1000000,0.001,0.002\n"
                    "b,3000000,0.002,0.004\n")
    code, out, _ = run_cli("dataparallel", "--profile", str(path), "--policy", "usbyte",
                           "--json")
    assert code == 0
    assert json.loads(out)["rows"][0]["backward_s"] == 0.006


def test_bad_inputs_exit_2(run_cli):
    """Unknown model, zero workers, bad network: exit code 2 with the accepted values."""
    for args, needle in ((("--model", "alexnet"), "vgg16"), (("--workers", "0"), "workers"),
                         (("--network", "pigeon"), "usbyte-8"),
                         (("--policy", "fast"), "bytescheduler")):
        code, _, err = run_cli("dataparallel", *args)
        assert code == 2, args
        assert needle in err


def test_reproduce_usbyte_json(run_cli):
    """The reproduction (VGG-16 only, to stay fast) prints rows and a summary: 3 clusters x 2
    cost models, default and tuned variants named, US-Byte never above the cap, best >= bound."""
    code, out, _ = run_cli("reproduce", "usbyte", "--models", "vgg16", "--json")
    assert code == 0
    payload = json.loads(out)
    rows = payload["rows"]
    assert {"model", "workers", "policy", "time_s", "bound_s", "variant", "settings",
            "cost_model", "cap"} <= set(rows[0])
    assert len({(r["cluster"], r["cost_model"]) for r in rows}) == 6
    assert {r["variant"] for r in rows if r["policy"] == "ddp"} == {"default"}
    assert {r["variant"] for r in rows if r["policy"] == "ddp-tuned"} == {"tuned"}
    assert payload["summary"]["usbyte_never_above_cap"]
    assert all(r["best_over_bound"] >= 1 - 1e-9 for r in rows)


def test_reproduce_usbyte_table(run_cli, monkeypatch):
    """The table names the variants and their knob values, the cap, the explanations and the
    paper's claims (two scenarios only, to stay fast)."""
    from dlsched.experiments import usbyte

    scenarios = usbyte.default_scenarios
    monkeypatch.setattr(usbyte, "default_scenarios", lambda names: scenarios(names)[:2])
    code, out, _ = run_cli("reproduce", "usbyte", "--models", "vgg16")
    assert code == 0
    for needle in ("BS*", "cap on US-Byte/WFBP", "Explanations", "up to 1.56x", "Knob values",
                   "unit "):
        assert needle in out
