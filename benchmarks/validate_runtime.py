"""The fixed validation protocol of the data-parallel runtime: one setting, several runs.

``python -m benchmarks.validate_runtime --ranks R (--rate GBIT | --loopback) --model M
--runs 3``: each run is the benchmark's setting from scratch (``bench_dp_runtime.run_setting``:
calibrate idle, loaded and queued streams, then train every policy and real DDP in rounds and
predict each executed plan). The summary per setting: per run the rows within 15% and the
mean absolute error; per policy the mean error over runs, its range, and the run-to-run spread
of the measured iteration ((max - min) / median over runs); per run and model the measured
rank of dlsched's plan among every measured plan (1 = fastest) and dlsched against real
torch DDP, per run and over the runs' pooled iterations, with a bootstrap 95% confidence
interval of the ratio of median iterations (``ratio_interval``). A calibration the runtime
refuses is recorded as a refused run with its reason.

Beside it, the executor running DDP's own bucket plan against real torch DDP: the same plan
by two implementations, so the difference is what a run can resolve.

The method is fixed by ``bench_dp_runtime.METHOD`` and the commit each run records; a setting
other than the one the method was developed on (``DEVELOPED_ON``), or any setting on another
machine (``DEVELOPED_MACHINE``), is reported as held-out. Each run is stored in
``benchmarks/records/dp-validation/validate-<setting>-<models>-<machine>.json`` (tracked, so a
clean clone has them: its rows and each model's in-training profile, so every prediction can
be recomputed offline) and the BENCHMARKS.md section ``dp-validation`` is rewritten from every
stored setting.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_dp_runtime import (
    COMM_NICE,
    GROUP_NICE,
    METHOD,
    MODELS,
    autogroup_nice,
    run_setting,
    setting_name,
)
from benchmarks.common import (
    host_facts,
    host_text,
    interval_text,
    processor,
    ratio_interval,
    write_section,
)
from dlsched.errors import ConfigError
from dlsched.runtime.dataparallel.train import REFERENCE

DEVELOPED_ON = {(4, 10)}  # (ranks, Gbit/s) the method was developed and tuned on
DEVELOPED_MACHINE = "AMD EPYC"  # the processor (``processor``) it was developed on
WITHIN = 0.15
FOLDER = Path("benchmarks/out")  # the benchmark's scratch files (calibrations, network files)
RECORDS = Path("benchmarks/records/dp-validation")  # the protocol's runs, kept in git
SAME_PLAN = "ddp"  # the executor running DDP's own bucket plan, against torch DDP
AGAINST_DDP = {  # summary key: the policy timed against real torch DDP, and how lines name it
    "dlsched_over_ddp": ("dlsched", "dlsched vs torch DDP"),
    "same_plan_over_ddp": (SAME_PLAN, "the same plan (DDP's, on the executor) vs torch DDP"),
}


def _arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, required=True, help="ranks (2..64)")
    link = parser.add_mutually_exclusive_group(required=True)
    link.add_argument("--rate", type=int, choices=(1, 10), help="emulated link, Gbit/s (root)")
    link.add_argument("--loopback", action="store_true", help="loopback, no emulation")
    parser.add_argument("--model", nargs="+", choices=tuple(MODELS), default=list(MODELS))
    parser.add_argument("--runs", type=int, default=3, help="runs of the setting (1..10)")
    parser.add_argument("--append", action="store_true",
                        help="add the runs to the setting's stored runs of the same method")
    args = parser.parse_args(argv)
    if not 2 <= args.ranks <= 64 or not 1 <= args.runs <= 10:
        parser.error(f"--ranks {args.ranks} must be in 2..64 and --runs {args.runs} in 1..10")
    return args


def dlsched_rank(rows: list[dict[str, Any]]) -> int:
    """The measured rank of dlsched's plan among every measured plan of one model (1 =
    fastest; ties share the better rank)."""
    mine = next(float(r["measured_s"]) for r in rows if r["policy"] == "dlsched")
    return 1 + sum(float(r["measured_s"]) < mine for r in rows)


def _against_ddp(rows: list[dict[str, Any]]) -> dict[str, tuple[float, float, float]]:
    """Per ``AGAINST_DDP`` key that ``rows`` (one model's) hold both sides of: the policy's
    iterations against real torch DDP's (``ratio_interval``)."""
    iterations = {r["policy"]: r["iterations_s"] for r in rows if r.get("iterations_s")}
    if REFERENCE not in iterations:
        return {}
    return {key: ratio_interval(iterations[policy], iterations[REFERENCE])
            for key, (policy, _) in AGAINST_DDP.items() if policy in iterations}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per run: rows within 15%, mean absolute error, per model dlsched's measured rank and
    its time over torch DDP's, and DDP's plan on the executor over torch DDP's
    (``same_plan_over_ddp``); per (model, policy): mean error, error range and the run-to-run
    spread of the measured iteration; both time ratios also over the runs' pooled iterations."""
    done = [run for run in runs if run["rows"]]
    per_run = []
    for number, run in enumerate(done, 1):
        errors = [float(r["error"]) for r in run["rows"]]
        models = sorted({r["model"] for r in run["rows"]})
        ranks: dict[str, str] = {}
        against: dict[str, dict[str, Any]] = {key: {} for key in AGAINST_DDP}
        for model in models:
            rows = [r for r in run["rows"] if r["model"] == model]
            ranks[model] = f"{dlsched_rank(rows)} of {len(rows)}"
            for key, interval in _against_ddp(rows).items():
                against[key][model] = interval
        per_run.append({"run": run.get("run", number),
                        "within": sum(abs(e) <= WITHIN for e in errors), "rows": len(errors),
                        "mae": statistics.mean(map(abs, errors)), "dlsched_rank": ranks,
                        **against, "steal_s": run.get("steal_s")})
    policies: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in done:
        for row in run["rows"]:
            policies.setdefault((row["model"], row["policy"]), []).append(row)
    per_policy = []
    for (model, policy), rows in sorted(policies.items()):
        errors = [float(r["error"]) for r in rows]
        measured = [float(r["measured_s"]) for r in rows]
        per_policy.append({"model": model, "policy": policy, "runs": len(rows),
                           "mean_error": statistics.mean(errors), "min_error": min(errors),
                           "max_error": max(errors),
                           "measured_ms": statistics.median(measured) * 1e3,
                           "run_spread": (max(measured) - min(measured))
                           / statistics.median(measured)})
    pooled: dict[str, dict[str, Any]] = {key: {} for key in AGAINST_DDP}
    for model in sorted({model for model, _ in policies}):
        joined = [{"policy": policy, "iterations_s": [t for r in rows
                                                      for t in r.get("iterations_s", ())]}
                  for (m, policy), rows in policies.items() if m == model]
        for key, interval in _against_ddp(joined).items():
            pooled[key][model] = interval
    return {"per_run": per_run, "per_policy": per_policy, **pooled,
            "refused": [run["refused"] for run in runs if run.get("refused")]}


def _commit() -> str:
    """The checkout's commit, or ``DLSCHED_COMMIT`` for a copy without git metadata."""
    if os.environ.get("DLSCHED_COMMIT"):
        return os.environ["DLSCHED_COMMIT"]
    result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False)
    return result.stdout.strip() or "unknown"


def machine_slug(name: str) -> str:
    """A file-name part from a ``processor`` line: "Intel(R) Xeon(R) Processor, x86_64" ->
    "intel-xeon-processor" (the model's words, lower case, marks and architecture dropped)."""
    model = name.split(",")[0].replace("(R)", " ").replace("(TM)", " ")
    return "-".join(re.findall(r"[a-z0-9]+", model.lower())) or "unknown"


def held_out(ranks: int, rate: int | None, machine: str) -> bool:
    """True unless the setting and the machine (a ``processor`` line) are both the ones the
    method was developed on."""
    return (ranks, rate) not in DEVELOPED_ON or not machine.startswith(DEVELOPED_MACHINE)


def _stored(store: Path, append: bool) -> dict[str, Any] | None:
    """The setting's stored record to add runs to: with ``append``, the stored one when its
    method is the current one, else None (a new record)."""
    if not append or not store.exists():
        return None
    record = json.loads(store.read_text())
    return record if record["method"] == METHOD else None


def run_protocol(ranks: int, rate: int | None, models: list[str], runs: int,
                 append: bool = False) -> Path:
    """Run the setting ``runs`` times, storing the record after every run (a run cut short
    loses only itself); with ``append`` the runs are added to the stored runs of the same
    method. The stored file's path."""
    FOLDER.mkdir(parents=True, exist_ok=True)
    RECORDS.mkdir(parents=True, exist_ok=True)
    machine = processor()
    store = RECORDS / (f"validate-{setting_name(ranks, rate)}-{'-'.join(models)}-"
                       f"{machine_slug(machine)}.json")
    record = _stored(store, append) or {
        "ranks": ranks, "rate": rate, "models": models, "method": METHOD,
        "commit": _commit(), "held_out": held_out(ranks, rate, machine),
        "started": time.strftime("%Y-%m-%d %H:%M"), "host_before": host_facts(), "runs": []}
    for _ in range(runs):
        start = time.perf_counter()
        facts = host_facts()
        try:
            with autogroup_nice(GROUP_NICE):
                rows, _ = run_setting(ranks, rate, models, FOLDER, COMM_NICE)
            refused = None
        except ConfigError as error:
            rows, refused = [], str(error)
        number = len(record["runs"]) + 1
        record["runs"].append({"run": number, "date": time.strftime("%Y-%m-%d %H:%M"),
                               "commit": _commit(), "seconds": time.perf_counter() - start,
                               "host": facts, "refused": refused,
                               "rows": [{k: v for k, v in row.items()
                                         if k not in ("profile", "fits", "compute_slowdown")}
                                        for row in rows],
                               "profiles": {row["model"]: row["profile"] for row in rows}})
        record["host_after"] = host_facts()
        if None not in (facts["steal_s"], record["host_after"]["steal_s"]):
            record["runs"][-1]["steal_s"] = record["host_after"]["steal_s"] - facts["steal_s"]
        record["summary"] = summarize(record["runs"])
        store.write_text(json.dumps(record, indent=1))
        print(f"run {number}: " + (f"refused: {refused}" if refused else "done")
              + f"; wrote {store}", file=sys.stderr)
    return store


def _link(rate: int | None) -> str:
    return "loopback" if rate is None else f"{rate} Gbit/s emulated"


def _against_ddp_parts(summary: dict[str, Any]) -> list[str]:
    """"dlsched vs torch DDP gpt ..., resnet ..." and the same for DDP's plan on the executor,
    from a run's or the pooled summary: one part per ``AGAINST_DDP`` ratio it has."""
    return [f"{label} " + ", ".join(f"{m} {interval_text(d)}" for m, d in summary[key].items())
            for key, (_, label) in AGAINST_DDP.items() if summary.get(key)]


def _setting_lines(record: dict[str, Any]) -> list[str]:
    summary = summarize(record["runs"])
    link = _link(record["rate"])
    host = record["host_before"]
    kind = ("developed on" if not record["held_out"] else "held-out"
            if (record["ranks"], record["rate"]) not in DEVELOPED_ON else "held-out machine")
    oversubscribed = (f"; {record['ranks']} ranks share {host['usable_cores']} cores (the "
                      "profile and calibration are measured with every rank running, so the "
                      "sharing is in the model's inputs)"
                      if record["ranks"] > host["usable_cores"] else "")
    lines = [f"### {record['ranks']} ranks, {link} ({kind}; {', '.join(record['models'])})", "",
             f"Started {record['started']}, commit {record['commit']}, host {host['host']}: "
             f"{host_text(host)} before, load {record['host_after']['load']:.1f} after"
             f"{oversubscribed}.", ""]
    lines += [f"- run {run['run']}: **{run['within']}/{run['rows']}** rows within 15%, mean "
              f"absolute error {run['mae'] * 100:.1f}%; dlsched's plan measured rank "
              + ", ".join(f"{m} {r}" for m, r in run["dlsched_rank"].items())
              + "".join(f"; {part}" for part in _against_ddp_parts(run))
              + ("" if run.get("steal_s") is None
                 else f"; {run['steal_s']:.1f} CPU s stolen by the host during the run")
              for run in summary["per_run"]]
    if len(summary["per_run"]) > 1 and summary.get("dlsched_over_ddp"):
        lines.append("- all runs' iterations pooled: "
                     + "; ".join(_against_ddp_parts(summary)))
    lines += [f"- run {run['run']} ({run['date']}, load {run['host']['load']:.1f}) refused: "
              f"{run['refused']}" for run in record["runs"] if run["refused"]]
    if summary["per_policy"]:
        lines += ["", "| model | policy | runs | measured (ms, median) | run-to-run spread (%) "
                  "| mean error (%) | error range (%) |", "|---|---|---:|---:|---:|---:|---|"]
        lines += [f"| {p['model']} | {p['policy']} | {p['runs']} | {p['measured_ms']:.1f} | "
                  f"{p['run_spread'] * 100:.1f} | {p['mean_error'] * 100:+.1f} | "
                  f"{p['min_error'] * 100:+.1f} to {p['max_error'] * 100:+.1f} |"
                  for p in summary["per_policy"]]
    return [*lines, ""]


def write_table() -> None:
    """Rewrite the BENCHMARKS.md section from every stored setting, held-out ones apart."""
    stored = [json.loads(path.read_text()) for path in sorted(RECORDS.glob("validate-*.json"))]
    records = [r for r in stored if r["method"] == METHOD]
    earlier = [r for r in stored if r["method"] != METHOD]
    lines = ["## Data-parallel runtime: validation protocol (issue 21)", "",
             "`python -m benchmarks.validate_runtime --ranks R (--rate GBIT | --loopback) "
             "--model M --runs 3`: each run is one `bench_dp_runtime` setting from scratch "
             "(calibration with refusal of implausible fits, then every policy and torch DDP "
             "trained in rounds and predicted; method: " + METHOD + "). Rows within 15% of "
             "24 (12 per model), mean absolute error, per policy the run-to-run spread of the "
             "measured iteration ((max - min) / median) and the error over runs, dlsched's "
             "measured rank among every measured plan (1 = fastest), dlsched's measured time "
             "against real torch DDP, and beside it DDP's own plan on dlsched's executor "
             "against torch DDP (the same plan by two implementations: what a run can "
             "resolve). Times in ms, errors = predicted / measured - 1. Records: "
             f"`{RECORDS}/`.", ""]
    for held_out in (False, True):
        chosen = [r for r in records if r["held_out"] == held_out]
        if chosen:
            lines += ["**Held-out settings and machines** (the method was not developed on "
                      "them)" if held_out else "**Setting and machine the method was developed "
                      "on**", ""]
            lines += [line for record in chosen for line in _setting_lines(record)]
    if earlier:
        lines += [f"Runs of earlier methods (kept in {RECORDS}; their tables in the "
                  "sections *the method before ...* below): " + "; ".join(
                      f"{r['ranks']} ranks {_link(r['rate'])}"
                      f" ({r['started']}): {sum(bool(run['refused']) for run in r['runs'])} of "
                      f"{len(r['runs'])} refused" for r in earlier), ""]
    write_section("dp-validation", "\n".join(lines))


def main(argv: list[str] | None = None) -> None:
    """Run the protocol for one setting and rewrite the section."""
    args = _arguments(argv)
    run_protocol(args.ranks, None if args.loopback else args.rate, args.model, args.runs,
                 args.append)
    write_table()


if __name__ == "__main__":
    main()
