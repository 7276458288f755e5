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


REFERENCES = {"speedup_vs_best_baseline", "speedup_vs_wfbp", "speedup_vs_bytescheduler_shipped",
              "speedup_vs_bytescheduler_tuned", "speedup_vs_ddp"}


def _paper_scenarios(monkeypatch):
    """The reproduction cut to VGG-16 with the authors' forward times on the paper's two
    clusters (to stay fast)."""
    from dlsched.experiments import usbyte

    scenarios = usbyte.default_scenarios
    monkeypatch.setattr(usbyte, "default_scenarios", lambda names: [
        s for s in scenarios(names) if s.compute == usbyte.AUTHORS])


def test_reproduce_usbyte_json(run_cli, monkeypatch):
    """Rows name the reference of every speedup; at the paper's settings with the authors'
    inputs US-Byte over shipped ByteScheduler is within 15% of the paper's 1.26x (8 workers)
    and 1.69x (128 GPUs, ring startup); the summary leads with US-Byte against the best other
    policy and says what every number is against."""
    from dlsched.dataparallel.policies import POLICIES
    from dlsched.experiments.usbyte import OURS

    _paper_scenarios(monkeypatch)
    code, out, _ = run_cli("reproduce", "usbyte", "--models", "vgg16", "--json")
    assert code == 0
    payload = json.loads(out)
    rows = payload["rows"]
    assert {"model", "workers", "policy", "time_s", "bound_s", "variant", "settings",
            "cost_model", "cap", "compute", "batch_size", "peak_in_flight",
            "best_baseline"} <= set(rows[0])
    for row in rows:
        assert {key for key in row if key.startswith("speedup")} == REFERENCES
        assert row["best_baseline"] in POLICIES and row["best_baseline"] not in OURS
        assert row["peak_in_flight"] == 1  # serial networks: one at a time for every policy
    usbyte = {r["workers"]: r for r in rows if r["policy"] == "usbyte"}
    assert usbyte[128]["network"] == "ring-startup-128"
    assert abs(usbyte[128]["speedup_vs_bytescheduler_shipped"] / 1.69 - 1) <= 0.15
    assert usbyte[8]["network"] == "usbyte-8"
    assert abs(usbyte[8]["speedup_vs_bytescheduler_shipped"] / 1.26 - 1) <= 0.15
    summary = payload["summary"]
    assert next(iter(summary)) == "usbyte_vs_best_baseline"
    for key in ("usbyte_vs_best_baseline", "usbyte_over_wfbp", "usbyte_tuned_over_ddp"):
        assert summary[key]["against"]
    for key in ("shipped", "tuned", "paper_settings"):
        assert "ByteScheduler" in summary["usbyte_over_bytescheduler"][key]["against"]
    assert summary["usbyte_over_wfbp"]["never_above_cap"]
    assert all(r["best_over_bound"] >= 1 - 1e-9 for r in rows)


def test_reproduce_usbyte_table(run_cli, monkeypatch):
    """The headlines come first, each naming its reference, then the cap with its derivation,
    the per-model table, knob values and explanations."""
    _paper_scenarios(monkeypatch)
    code, out, _ = run_cli("reproduce", "usbyte", "--models", "vgg16")
    assert code == 0
    flat = " ".join(out.split())  # titles and paragraphs wrap at spaces
    for needle in ("headlines, each against a named reference", "ByteScheduler", "BS*",
                   "Cap on US-Byte / WFBP", "Derivation:", "Why 1.56x is out of reach",
                   "Horovod with tensor fusion off", "Explanations", "1.69x", "Knob values",
                   "credit", "US-Byte's speedups = reference time / US-Byte time"):
        assert needle in flat, needle
    assert flat.index("headlines") < flat.index("iteration time per policy")


def test_params_proportional_compute(run_cli):
    """--compute params-proportional runs the authors' forward times at their batch size."""
    code, out, _ = run_cli("dataparallel", "--model", "vgg16", "--compute",
                           "params-proportional", "--policy", "wfbp", "--json")
    assert code == 0
    row = json.loads(out)["rows"][0]
    assert row["batch_size"] == 128 and row["compute"] == "params-proportional"
    assert abs(row["forward_s"] - 0.177632) < 1e-9
    for args, needle in ((("--model", "bert-base", "--compute", "params-proportional"),
                          "resnet152"), (("--compute", "flops"), "params-proportional")):
        code, _, err = run_cli("dataparallel", *args)
        assert code == 2 and needle in err, args


def test_ring_startup_network_on_the_cli(run_cli):
    code, out, _ = run_cli("dataparallel", "--model", "vgg16", "--workers", "128", "--network",
                           "ring-startup:10Gb/s,37us", "--policy", "wfbp", "--json")
    assert code == 0
    assert json.loads(out)["rows"][0]["network"] == "ring-startup-128"
