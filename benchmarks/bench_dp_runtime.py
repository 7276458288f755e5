"""Measured vs predicted data-parallel iterations on an emulated network (Linux, root).

Each rank runs in its own network namespace; a veth link joins it to a bridge in a "switch"
namespace, and a ``tc tbf`` rate limit on both ends of every link makes each rank's port a
full-duplex link of 1 or 10 Gbit/s (netem is not available, so no delay is added). For 2 and 4
ranks and both rates: calibrate the all-reduce over gloo, then train the ResNet-style CNN and
the GPT-style decoder with every policy (and real DistributedDataParallel) and compare the
measured iteration time with the simulator's prediction from the in-place profile and the
calibration. Everything is torn down in ``finally`` (namespaces, links, rank processes), the
traffic stays inside the namespaces, and every run has a deadline.

Run: ``python -m benchmarks.bench_dp_runtime`` (rewrites its section of BENCHMARKS.md;
``--quick`` for one setting).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.common import write_section
from dlsched.runtime.calibrate import network_document, time_allreduces, write_network
from dlsched.runtime.spawn import SpawnOptions, spawn
from dlsched.runtime.train import REFERENCE, TrainConfig, compare, train_rank

PREFIX = "dlsbench"
SUBNET = "10.77.0"
MODELS = {"resnet": {"batch_size": 8}, "gpt": {"batch_size": 4}}
SIZES = tuple(4096 * 4**k for k in range(7))  # 4 KiB .. 16 MiB


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def _tc(namespace: str, device: str, rate_gbit: int) -> None:
    burst = max(64 * 1024, rate_gbit * 10**9 // 8 // 250)  # 4 ms of traffic
    subprocess.run(["tc", "-n", namespace, "qdisc", "replace", "dev", device, "root", "tbf",
                    "rate", f"{rate_gbit}gbit", "burst", str(burst), "latency", "50ms"],
                   check=True, capture_output=True, timeout=30)


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
        yield
    finally:
        teardown()


def _options(deadline_s: float) -> SpawnOptions:
    return SpawnOptions(timeout_s=300, deadline_s=deadline_s, grace_s=10,
                        prefix=lambda rank: ["ip", "netns", "exec", f"{PREFIX}-r{rank}"],
                        env=lambda rank: {"GLOO_SOCKET_IFNAME": "eth0"})


def run_setting(ranks: int, rate_gbit: int, folder: Path) -> list[dict[str, object]]:
    """Calibrate, then train both models with every policy; rows with measured and predicted
    iteration seconds."""
    rows = []
    with emulated_network(ranks, rate_gbit):
        samples = spawn(time_allreduces, ranks, (SIZES, 2, 5), _options(600))[0]
        document = network_document(samples, ranks, f"gloo-{ranks}x{rate_gbit}gbit", "gloo",
                                    "piecewise")
        network = str(folder / f"network-{ranks}x{rate_gbit}gbit.yaml")
        write_network(document, network)
        fit = document["alpha_beta"]
        for model, sizes in MODELS.items():
            config = TrainConfig(model=model, network=network, iterations=10, warmup=3,
                                 profile_repeats=6, **sizes)
            result = spawn(train_rank, ranks, (config,), _options(1800))[0]
            for row in compare(result, config, ranks):
                rows.append(row | {"rate": f"{rate_gbit} Gbit/s", "alpha_s": fit["alpha"],
                                   "bandwidth": fit["bandwidth"]})
            print(f"{ranks} ranks {rate_gbit} Gbit/s {model}: done", file=sys.stderr)
    return rows


def _pair(row: dict[str, object], what: str) -> str:
    measured = row[f"measured_{what}_s"]
    predicted = float(row[f"predicted_{what}_s"]) * 1e3  # type: ignore[arg-type]
    return ("-" if measured is None else f"{float(measured) * 1e3:.0f}") + f" / {predicted:.0f}"


def _table(rows: list[dict[str, object]]) -> list[str]:
    lines = ["| ranks | link | model | policy | measured (ms) | predicted (ms) | error (%) | "
             "all-reduces | backward meas./pred. (ms) | network busy meas./pred. (ms) |",
             "|---:|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        policy = str(row["policy"]) + (" (predicted as ddp)" if row["policy"] == REFERENCE
                                       else "")
        lines.append(f"| {row['workers']} | {row['rate']} | {row['model']} | {policy} | "
                     f"{float(row['measured_s']) * 1e3:.1f} | "
                     f"{float(row['predicted_s']) * 1e3:.1f} | "
                     f"{float(row['error']) * 100:+.1f} | {row['messages']} | "
                     f"{_pair(row, 'backward')} | {_pair(row, 'comm')} |")
    return lines


def main() -> None:
    """Run every setting (or one with ``--quick``) and write the BENCHMARKS.md section."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the teardowns on SIGTERM
    settings = [(4, 10)] if "--quick" in sys.argv else [(2, 1), (2, 10), (4, 1), (4, 10)]
    folder = Path("benchmarks/out")
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    rows, fits = [], []
    for ranks, rate in settings:
        setting = run_setting(ranks, rate, folder)
        rows += setting
        fits.append(f"{ranks} ranks at {rate} Gbit/s: alpha {setting[0]['alpha_s'] * 1e6:.0f} "
                    f"us, bandwidth {setting[0]['bandwidth'] / 1e9:.3f} GB/s")
    intro = (
        "Emulated network: one network namespace per rank, veth links to a bridge, `tc tbf` "
        "rate limit on both ends of each link (no added delay); gloo over TCP, 1 torch and 1 "
        "gloo thread per rank, CPU only. Per setting: timed all-reduces as in `dlsched "
        "calibrate` (4 KiB-16 MiB), whose piecewise fit is written as a network file and read "
        "by the simulator through `--network FILE`; then every policy trains 10 iterations (3 "
        "not measured) of the ResNet-style CNN (1.23 M parameters, batch 8 of 32x32 images) "
        "and the GPT-style decoder (3.70 M parameters, batch 4 x 64 tokens) through the plan "
        "executor; `torch-ddp` is real DistributedDataParallel. Iteration = backward + the "
        "next forward (median, ms); predicted = the simulator on the in-place profile (all "
        "ranks at once, median over ranks) and the network file; error = predicted / "
        "measured - 1. The last two columns split rank 0's last measured iteration: backward "
        "(forward end to the last gradient hook) and the time the network was busy with "
        "all-reduces, against the prediction.")
    lines = ["## Data-parallel runtime: measured vs predicted", "", intro, "",
             "Calibrated (alpha-beta reading): " + "; ".join(fits) + ".", "", *_table(rows),
             "", f"Total benchmark time {time.perf_counter() - start:.0f} s. **The machine "
             "has 2 cores shared with other jobs**: 4 ranks time-share 2 cores, so compute "
             "and gloo's reduction compete, and the numbers are noisy (see docs/runtime.md)."]
    write_section("dp_runtime", "\n".join(lines))


if __name__ == "__main__":
    main()
