"""Measured vs predicted data-parallel iterations on an emulated network (Linux, root).

Each rank runs in its own network namespace; a veth link joins it to a bridge in a "switch"
namespace, and a ``tc tbf`` rate limit on both ends of every link makes each rank's port a
full-duplex link of 1 or 10 Gbit/s (netem is not available, so no delay is added); each link
delivers its packets in order (``_in_order``). For 2 and 4
ranks and both rates: calibrate the all-reduce over gloo idle and under compute load (one
two-state network file: the idle fit and its ``under_load`` block), then train the
ResNet-style CNN and the GPT-style decoder with every policy (and real
DistributedDataParallel) and compare the measured iteration time with the simulator's
prediction from the in-place profile and the two-state network (each message charged by the
loaded curve for the part of it that overlaps the rank's compute). The errors the idle curve
alone and the loaded curve alone would give are printed beside it. The ranks' communication
threads run at ``--comm-nice`` (default -20), so a message is not held up by the compute
threads sharing the cores. Everything is torn down in ``finally`` (namespaces, links, rank
processes), the traffic stays inside the namespaces, and every run has a deadline.

Run as root at normal priority (it is timing-sensitive): ``python -m
benchmarks.bench_dp_runtime [--ranks 4] [--rate 10] [--models gpt]``. Each setting's rows are
stored in ``benchmarks/out/dp_runtime-<ranks>x<rate>gbit.json`` (with each model's profile, so
a prediction can be recomputed from the stored measurement); the BENCHMARKS.md section is
rewritten from every stored setting, so settings can be run one at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import host_facts, host_text, write_section
from dlsched.runtime.dataparallel.calibrate import (
    MIN_SEGMENT,
    STREAM_LENGTH,
    loads_document,
    time_loads,
    write_network,
)
from dlsched.runtime.dataparallel.train import REFERENCE, TrainConfig, compare, train_rank
from dlsched.runtime.spawn import SpawnOptions, spawn

PREFIX = "dlsbench"
SUBNET = "10.77.0"
MODELS = {"resnet": {"batch_size": 8}, "gpt": {"batch_size": 4}}
SIZES = tuple(4096 * 2**k for k in range(13))  # 4 KiB .. 16 MiB
REPEATS = 15
ROUNDS, ITERATIONS, WARMUP, PROFILE_ITERATIONS = 3, 7, 2, 6  # per round
COMM_NICE = -20
# The prediction method; every run is logged under it in benchmarks/out/runs-dp_runtime.json
# and the section lists every run of the current method (change it when the method changes).
METHOD = ("two-state network with queued-stream curve, robust compute slowdown, slowest-rank "
          "profile; 3 rounds of profile and policies, executed plan, 3-sample fit segments, "
          "issue 21: group warm-up, stream timed from issue to the last completion, queued "
          "slowdown unclamped, per-size means of 15 repeats, sizes whose mean has a standard "
          "error over 15% (and 20 us) measured again and pooled, a measurement with a queued "
          "message below 0.5x idle discarded, refused after 8; queued stream on idle ranks "
          "(from 2026-11-26 04:16); the executor's measured iterations unrecorded, its "
          "timeline from one extra step, torch DDP training the same extra step (from "
          "2026-11-26 09:50, commit 0714893); the queued-message floor against the lower "
          "quartile of the idle repeats, not their mean, refused after 20, the emulated links "
          "delivering in order (from 2026-11-26 12:23); the executor updating modules in "
          "update groups, one optimizer call per wait (from 2026-11-26 15:01, commit "
          "d431362)")
HISTORY = "runs-dp_runtime.json"
GROUP_NICE = -20


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def _tc(namespace: str, device: str, rate_gbit: int) -> None:
    burst = max(64 * 1024, rate_gbit * 10**9 // 8 // 250)  # 4 ms of traffic
    subprocess.run(["tc", "-n", namespace, "qdisc", "replace", "dev", device, "root", "tbf",
                    "rate", f"{rate_gbit}gbit", "burst", str(burst), "latency", "50ms"],
                   check=True, capture_output=True, timeout=30)


def _in_order(namespace: str, device: str, cpu: int) -> None:
    """Deliver ``device``'s received packets in order, as a link does: all of them through
    one CPU's backlog (receive packet steering to ``cpu``). A veth hands each packet to the
    backlog of the CPU that sent it, and a TCP flow is sent from whichever CPU its thread or
    its ACK processing runs on, so without this the flow is reordered: on the 2-core VM, 2
    ranks, 415 idle all-reduces of 4 KiB-1 MiB saw 58-109 retransmitted segments per rank,
    14-19 of them shown spurious by D-SACK, and 3-6 in order; 4 KiB took 2.3-2.8 ms on average
    against 1.2-1.9 ms in order (2026-11-26 12:20-12:22, `nstat` in the namespaces; no packet
    was dropped)."""
    command = (f"for queue in /sys/class/net/{device}/queues/rx-*; do "
               f"echo {1 << cpu:x} > $queue/rps_cpus; done")
    subprocess.run(["ip", "netns", "exec", namespace, "sh", "-c", command], check=True,
                   capture_output=True, timeout=30)


def _namespaces() -> list[str]:
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                             check=True, timeout=30).stdout
    return [line.split()[0] for line in listing.splitlines() if line.startswith(PREFIX)]


def teardown() -> None:
    """Delete every namespace this benchmark made (their links go with them)."""
    for namespace in _namespaces():
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=30)


@contextmanager
def emulated_network(ranks: int, rate_gbit: int) -> Iterator[None]:
    """Namespaces ``dlsbench-r<i>`` joined through a bridge in ``dlsbench-sw``."""
    teardown()
    switch = f"{PREFIX}-sw"
    cpus = sorted(os.sched_getaffinity(0))
    try:
        _ip("netns", "add", switch)
        _ip("-n", switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", switch, "link", "set", "br0", "up")
        for rank in range(ranks):
            namespace, port = f"{PREFIX}-r{rank}", f"p{rank}"
            _ip("netns", "add", namespace)
            _ip("link", "add", "eth0", "netns", namespace, "type", "veth", "peer", "name",
                port, "netns", switch)
            _ip("-n", namespace, "addr", "add", f"{SUBNET}.{rank + 1}/24", "dev", "eth0")
            _ip("-n", namespace, "link", "set", "eth0", "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
            _ip("-n", switch, "link", "set", port, "master", "br0")
            _ip("-n", switch, "link", "set", port, "up")
            _tc(namespace, "eth0", rate_gbit)
            _tc(switch, port, rate_gbit)
            cpu = cpus[rank % len(cpus)]
            _in_order(namespace, "eth0", cpu)
            _in_order(switch, port, cpu)
        yield
    finally:
        teardown()


def network(ranks: int, rate_gbit: int | None) -> AbstractContextManager[None]:
    """The emulated network of ``rate_gbit`` (``emulated_network``), or with None loopback
    (nothing to set up)."""
    return nullcontext() if rate_gbit is None else emulated_network(ranks, rate_gbit)


def setting_name(ranks: int, rate_gbit: int | None) -> str:
    """``<ranks>x<rate>gbit``, or ``<ranks>xloopback``: file names of a setting."""
    return f"{ranks}x" + ("loopback" if rate_gbit is None else f"{rate_gbit}gbit")


def _options(deadline_s: float, comm_nice: int | None, emulated: bool = True) -> SpawnOptions:
    return SpawnOptions(timeout_s=120, deadline_s=deadline_s, grace_s=10, comm_nice=comm_nice,
                        own_sessions=False,
                        prefix=(lambda rank: ["ip", "netns", "exec", f"{PREFIX}-r{rank}"])
                        if emulated else None,
                        env=(lambda rank: {"GLOO_SOCKET_IFNAME": "eth0"}) if emulated else None)


def calibrate(ranks: int, rate_gbit: int | None, comm_nice: int | None,
              folder: Path) -> tuple[dict[str, str], list[Any]]:
    """Timed all-reduces idle and under load, written as piecewise network files: ``two``
    (idle fit + under_load with the compute slowdowns and the queued-stream curve + the
    queued stream on idle ranks), and for
    the diagnostic columns ``idle`` and ``loaded`` (one curve each) and ``comm`` (two curves,
    compute never slowed); and every rank's compute slowdown per size and repeat (stored
    with the rows)."""
    timed = spawn(time_loads, ranks, (SIZES, 2, REPEATS, "both"),
                  _options(900, comm_nice, rate_gbit is not None))[0]
    document = loads_document(timed, ranks, f"gloo-{setting_name(ranks, rate_gbit)}", "gloo",
                              "piecewise", comm_nice)
    idle = {k: v for k, v in document.items() if k not in ("under_load", "stream")}
    loaded = idle | {k: v for k, v in document["under_load"].items()
                     if k not in ("compute_slowdown", "stream")}
    files = {}
    for which, doc in (("two", document), ("idle", idle), ("loaded", loaded),
                       ("comm", document | {"under_load": document["under_load"]
                                            | {"compute_slowdown": []}})):
        files[which] = str(folder / f"network-{setting_name(ranks, rate_gbit)}-{which}.yaml")
        write_network(doc, files[which])
    return files, timed["compute_samples"]


def run_setting(ranks: int, rate_gbit: int | None, models: list[str], folder: Path,
                comm_nice: int | None) -> tuple[list[dict[str, object]], list[Any]]:
    """Calibrate idle and under load, then train the models with every policy; rows with
    measured iteration seconds, predicted from the two-state network, and the errors the
    idle and the loaded curve alone would give; and the calibration's per-rank compute
    slowdowns (stored once per setting). ``rate_gbit`` None: loopback, no emulation."""
    rows = []
    with network(ranks, rate_gbit):
        files, compute_samples = calibrate(ranks, rate_gbit, comm_nice, folder)
        fits = {"compute": read_fit(files["loaded"]), "none": read_fit(files["idle"])}
        for model in models:
            config = TrainConfig(model=model, network=files["two"], iterations=ITERATIONS,
                                 warmup=WARMUP, profile_repeats=PROFILE_ITERATIONS,
                                 rounds=ROUNDS, **MODELS[model])
            result = spawn(train_rank, ranks, (config,),
                           _options(900, comm_nice, rate_gbit is not None))[0]
            idle_rows = compare(result, replace(config, network=files["idle"]), ranks)
            loaded_rows = compare(result, replace(config, network=files["loaded"]), ranks)
            comm_rows = compare(result, replace(config, network=files["comm"]), ranks)
            profile = result["profile"].model_dump(mode="json")
            for row, idle, loaded, comm, run in zip(compare(result, config, ranks), idle_rows,
                                                    loaded_rows, comm_rows, result["runs"],
                                                    strict=True):
                rows.append(row | {"iterations_s": list(run.iteration_s),
                                   "rate": "loopback" if rate_gbit is None
                                   else f"{rate_gbit} Gbit/s", "idle_error": idle["error"],
                                   "loaded_error": loaded["error"],
                                   "comm_error": comm["error"], "fits": fits,
                                   "compute_slowdown": read_compute(files["two"]),
                                   "profile": profile})
            print(f"{setting_name(ranks, rate_gbit)} {model}: done", file=sys.stderr)
    return rows, compute_samples


def read_compute(path: str) -> list[dict[str, float]]:
    """The compute slowdowns measured beside the loaded all-reduces."""
    return list(yaml.safe_load(Path(path).read_text())["under_load"]["compute_slowdown"])


def read_fit(path: str) -> dict[str, float]:
    """The alpha-beta reading of a network file."""
    return dict(yaml.safe_load(Path(path).read_text())["alpha_beta"])


def _pair(row: dict[str, Any], what: str) -> str:
    measured = row[f"measured_{what}_s"]
    predicted = float(row[f"predicted_{what}_s"]) * 1e3
    return ("-" if measured is None else f"{float(measured) * 1e3:.0f}") + f" / {predicted:.0f}"


def _table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| ranks | link | model | policy | measured (ms) | predicted (ms) | error (%) | "
             "error, idle curve only (%) | error, loaded curve only (%) | error, compute "
             "never slowed (%) | all-reduces | backward meas./pred. (ms) | network busy "
             "meas./pred. (ms) |",
             "|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        policy = str(row["policy"]) + (" (predicted as ddp)" if row["policy"] == REFERENCE
                                       else "")
        lines.append(f"| {row['workers']} | {row['rate']} | {row['model']} | {policy} | "
                     f"{float(row['measured_s']) * 1e3:.1f} | "
                     f"{float(row['predicted_s']) * 1e3:.1f} | "
                     f"{float(row['error']) * 100:+.1f} | "
                     f"{float(row['idle_error']) * 100:+.1f} | "
                     f"{_percent(row.get('loaded_error'))} | "
                     f"{_percent(row.get('comm_error'))} | {row['messages']} | "
                     f"{_pair(row, 'backward')} | {_pair(row, 'comm')} |")
    return lines


def _percent(value: Any) -> str:
    return "-" if value is None else f"{float(value) * 100:+.1f}"


def _fits(setting: dict[str, Any]) -> str:
    fits = setting["rows"][0]["fits"]
    return (f"{setting['ranks']} ranks at {setting['rate']} Gbit/s: alpha "
            + ", ".join(f"{fits[load]['alpha'] * 1e6:.0f} us / bandwidth "
                        f"{fits[load]['bandwidth'] / 1e9:.3f} GB/s ({name})"
                        for load, name in (("compute", "under load"), ("none", "idle")))
            + "".join(f"; compute beside an all-reduce {first['factor']:.2f}x as slow at "
                      f"{first['bytes'] // 1024} KiB, {last['factor']:.2f}x at "
                      f"{last['bytes'] // 2**20} MiB"
                      for first, last in [(c[0], c[-1]) for c in
                                          [setting["rows"][0].get("compute_slowdown")] if c])
            + f"; measured {setting['date']}, {setting['seconds']:.0f} s, load average "
            f"{setting['load_before']:.1f} before / {setting['load_after']:.1f} after")


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", choices=(2, 4), default=[2, 4])
    parser.add_argument("--rate", type=int, nargs="+", choices=(1, 10), default=[1, 10],
                        help="link rates, Gbit/s")
    parser.add_argument("--models", nargs="+", choices=tuple(MODELS), default=list(MODELS))
    parser.add_argument("--comm-nice", type=int, default=COMM_NICE,
                        help="nice value of the ranks' communication threads")
    parser.add_argument("--group-nice", type=int, default=GROUP_NICE,
                        help="nice value of the benchmark's scheduler autogroup (its ranks)")
    return parser.parse_args()


@contextmanager
def autogroup_nice(nice: int) -> Iterator[None]:
    """Give this session's scheduler autogroup (this process and the ranks, which stay in its
    session) ``nice`` for the duration; restore the previous value after."""
    path = Path("/proc/self/autogroup")
    if not path.exists():
        yield
        return
    previous = path.read_text().split("nice")[-1].strip()
    path.write_text(str(nice))
    try:
        yield
    finally:
        path.write_text(previous)


def main() -> None:
    """Run the chosen settings, store each setting's rows in benchmarks/out, and write the
    BENCHMARKS.md section from every stored setting."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the teardowns on SIGTERM
    args = _arguments()
    folder = Path("benchmarks/out")
    folder.mkdir(parents=True, exist_ok=True)
    for ranks in args.ranks:
        for rate in args.rate:
            start, load_before = time.perf_counter(), os.getloadavg()[0]
            with autogroup_nice(args.group_nice):
                rows, compute_samples = run_setting(ranks, rate, args.models, folder,
                                                    args.comm_nice)
            store = folder / f"dp_runtime-{ranks}x{rate}gbit.json"
            store.write_text(json.dumps({
                "profile_in": TrainConfig().profile_in,
                "ranks": ranks, "rate": rate, "date": time.strftime("%Y-%m-%d %H:%M"),
                "seconds": time.perf_counter() - start, "load_before": load_before,
                "load_after": os.getloadavg()[0], "comm_nice": args.comm_nice,
                "group_nice": args.group_nice, "compute_samples": compute_samples,
                "rows": rows}, indent=1))
            log_run(folder, ranks, rate, rows)
    write_table(folder, args.group_nice)


def log_run(folder: Path, ranks: int, rate: int, rows: list[dict[str, Any]]) -> None:
    """Append this run's summary (rows within 15%, mean absolute error, error range) to the
    history in ``folder``, under ``METHOD``."""
    errors = [float(row["error"]) for row in rows]
    path = folder / HISTORY
    history = json.loads(path.read_text()) if path.exists() else []
    history.append({"method": METHOD, "ranks": ranks, "rate": rate,
                    "date": time.strftime("%Y-%m-%d %H:%M"), "rows": len(errors),
                    "within_15": sum(abs(e) <= 0.15 for e in errors),
                    "mean_abs_error": sum(map(abs, errors)) / len(errors),
                    "min_error": min(errors), "max_error": max(errors)})
    path.write_text(json.dumps(history, indent=1))


def _history(folder: Path) -> list[str]:
    """One line per setting: every logged run of ``METHOD``."""
    path = folder / HISTORY
    runs = [run for run in (json.loads(path.read_text()) if path.exists() else [])
            if run["method"] == METHOD]
    settings = sorted({(run["ranks"], run["rate"]) for run in runs})
    return [f"Every run of this method at {ranks} ranks, {rate} Gbit/s (rows within 15% of "
            "rows; mean absolute error; error range): " + "; ".join(
                f"{run['date']}: **{run['within_15']}/{run['rows']}**, "
                f"{run['mean_abs_error'] * 100:.1f}%, {run['min_error'] * 100:+.0f}% to "
                f"{run['max_error'] * 100:+.0f}%" for run in runs
                if (run["ranks"], run["rate"]) == (ranks, rate)) + "."
            for ranks, rate in settings]


def write_table(folder: Path, group_nice: int) -> None:
    """Rewrite the BENCHMARKS.md section from every setting stored in ``folder``."""
    settings = [json.loads(path.read_text()) for path in sorted(
        folder.glob("dp_runtime-*.json"), key=lambda p: tuple(
            int(n) for n in p.stem.split("-")[1].removesuffix("gbit").split("x")))]
    current = [s for s in settings if "profile_in" in s]
    earlier = [s for s in settings if "profile_in" not in s]
    lines = ["## Data-parallel runtime: measured vs predicted", "", INTRO, "",
             "Calibrated (alpha-beta reading of the piecewise fit): "
             + "; ".join(_fits(s) for s in current) + ".", "",
             *_table([row for setting in current for row in setting["rows"]]), "",
             *(line for line in _history(folder) for line in (line, ""))]
    if earlier:
        lines += ["Settings not yet re-run with this method (earlier method: the profile from "
                  "plain passes, the prediction from the loaded curve alone, so `error` there "
                  "is the loaded curve's): " + "; ".join(_fits(s) for s in earlier) + ".", "",
                  *_table([row for setting in earlier for row in setting["rows"]]), ""]
    facts = host_facts()
    lines.append(f"**Machine** (now: {host_text(facts)}; load averages of each run above): "
                 "other jobs run in autogroups of their own, the benchmark's autogroup at nice "
                 f"{group_nice}; settings with more ranks than the {facts['usable_cores']} "
                 "usable cores time-share them, which the profile and calibration measure "
                 "(every rank running at once; see docs/runtime.md).")
    write_section("dp_runtime", "\n".join(lines))


INTRO = (
    "Emulated network: one network namespace per rank, veth links to a bridge, `tc tbf` rate "
    "limit on both ends of each link (no added delay); gloo over TCP, 1 torch and 1 gloo "
    "thread per rank, CPU only. Scheduling: the ranks stay in the benchmark's session, so "
    f"Linux schedules them as one autogroup, given nice {GROUP_NICE} (`--group-nice`) against "
    "the other jobs' autogroups; inside it each rank's communication threads (gloo's worker "
    f"and transport) run at nice {COMM_NICE} (`--comm-nice`), the compute threads at 0. Per "
    "setting: timed all-reduces as in `dlsched calibrate --load both` (13 sizes, 4 KiB-16 MiB, "
    f"mean of {REPEATS} repeats, more where the mean is uncertain), idle and while every "
    "rank computes, with the compute's slowdown "
    "beside each size (the compute thread's share of a core alone / beside the all-reduce; "
    "median over ranks, then over repeats, then the non-decreasing fit in size), and under "
    f"load the per-message time of {STREAM_LENGTH} all-reduces queued back to back (mean "
    f"of {REPEATS} or more); piecewise fits (two segments of at least {MIN_SEGMENT} sizes "
    "each) and "
    "the slowdowns are written as "
    "one two-state network file (the idle fit and its `under_load` block with the `stream` "
    "curve) read by the simulator through `--network FILE`: a message progresses at the loaded "
    "rate while its rank computes (backward, forward, updates; at the queued-stream rate if it "
    "waited behind another message) and at the idle rate otherwise, and the rank computes that "
    "many times slower while a message is in flight. Then the ResNet-style CNN (1.23 M "
    "parameters, batch 8 of 32x32 images) and the GPT-style decoder (3.70 M parameters, batch "
    f"4 x 64 tokens) are trained in {ROUNDS} rounds; each round profiles the model inside "
    f"training ({PROFILE_ITERATIONS} iterations after {WARMUP} not measured, all ranks at once "
    "through the executor with one all-reduce after backward and a barrier; per iteration the "
    f"slowest rank, whose pace every all-reduce waits for) and trains every policy {ITERATIONS} "
    f"iterations ({WARMUP} not measured) from the same initial parameters through the plan "
    "executor, the policies' order rotated from round to round, so a drift of the shared "
    "machine reaches the profile and every policy alike; `torch-ddp` is real "
    "DistributedDataParallel. The plans are made from the first round's profile. Iteration = "
    f"backward + the next forward (median of the {ROUNDS} x {ITERATIONS - WARMUP} measured "
    "iterations, ms); predicted = the simulator running the executed plan (each message issued "
    "when its gradients are ready, as the executor does) on the profile pooled over the rounds "
    "and the two-state network; error = predicted / measured - 1; beside it the errors with "
    "the idle curve alone, the loaded curve alone, and both curves with the compute never "
    "slowed. The last two columns split rank 0's last measured iteration (one iteration: "
    "noisy): backward (forward end to the last gradient hook) and the time the network was "
    "busy with all-reduces, against the prediction (the simulated backward, slowed where "
    "messages are in flight).")


if __name__ == "__main__":
    main()
