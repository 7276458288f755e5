"""Training simulator speed: one Transformer-1T run on a 1024-NPU 4D topology per policy, and
the whole ``reproduce themis-training``.

Run: ``python -m benchmarks.bench_training`` (rewrites its section of BENCHMARKS.md). The
machine is usually shared: the load average before and after each measurement and the CPU
seconds used (this process and its workers) are written beside the wall times.
"""

from __future__ import annotations

import os
import time

from benchmarks.common import cpu_seconds, write_section
from dlsched.experiments import themis_training
from dlsched.hardware import load_topology
from dlsched.sweep.reproduce import reproduce
from dlsched.training import get_workload, run_training

TOPOLOGY = "4D-Ring_FC_Ring_SW"


def main() -> None:
    """Measure and write the training section of BENCHMARKS.md."""
    net = load_topology(TOPOLOGY)
    workload = get_workload("transformer-1t", net.num_npus)
    lines = ["## Training", "", f"Transformer-1T ({len(workload.layers)} layers) on {TOPOLOGY} "
             "(1024 NPUs, table latencies), 2 iterations + the next first forward, 64 chunks "
             "per collective, no timeline recorded (wall seconds, best of 1; `dlsched` "
             "simulates its 4 candidates):",
             "", "| policy | simulate (s) | engine events | iteration (s) |",
             "|---|---:|---:|---:|"]
    for policy in ("baseline", "themis", "dlsched", "ideal"):
        start = time.perf_counter()
        result = run_training(workload, net, policy, record=False)
        lines.append(f"| {policy} | {time.perf_counter() - start:.2f} | {result.run.events:,} | "
                     f"{result.iteration_s:.3f} |")
    load_before, cpu_before = os.getloadavg()[0], cpu_seconds()
    start = time.perf_counter()
    reproduce(themis_training, themis_training.Options(method="overlap"), workers=2)
    wall = time.perf_counter() - start
    cpu, load_after = cpu_seconds() - cpu_before, os.getloadavg()[0]
    lines += ["", f"`reproduce themis-training` --method overlap (48 scenarios x 5 "
              f"policies, compute a100, "
              f"2 worker processes): **{wall:.1f} s** wall, {cpu:.1f} CPU-seconds "
              f"(target: 60 s on 2 idle cores); 1-minute load average {load_before:.1f} before, "
              f"{load_after:.1f} after. On a shared machine the wall time mostly measures the "
              f"other load; CPU-seconds / 2 estimates the wall time on 2 idle cores "
              f"({cpu / 2:.0f} s)."]
    write_section("training", "\n".join(lines))


if __name__ == "__main__":
    main()
