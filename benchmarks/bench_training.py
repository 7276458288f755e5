"""Training simulator speed: one Transformer-1T run on a 1024-NPU 4D topology per policy, and
the whole ``reproduce themis-training``.

Run: ``python -m benchmarks.bench_training`` (rewrites its section of BENCHMARKS.md).
"""

from __future__ import annotations

import time

from benchmarks.common import write_section
from dlsched.experiments import themis_training
from dlsched.hardware import load_topology
from dlsched.training import get_workload, run_training

TOPOLOGY = "4D-Ring_FC_Ring_SW"


def main() -> None:
    """Measure and write the training section of BENCHMARKS.md."""
    net = load_topology(TOPOLOGY)
    workload = get_workload("transformer-1t", net.num_npus)
    lines = ["## Training", "", f"Transformer-1T ({len(workload.layers)} layers) on {TOPOLOGY} "
             "(1024 NPUs, table latencies), 2 iterations + the next first forward, 64 chunks "
             "per collective (wall seconds, best of 1; `dlsched` simulates its 4 candidates):",
             "", "| policy | simulate (s) | iteration (s) |", "|---|---:|---:|"]
    for policy in ("baseline", "themis", "dlsched", "ideal"):
        start = time.perf_counter()
        result = run_training(workload, net, policy)
        lines.append(f"| {policy} | {time.perf_counter() - start:.2f} | "
                     f"{result.iteration_s:.3f} |")
    start = time.perf_counter()
    themis_training.reproduce(themis_training.scenarios(), workers=2)
    lines += ["", f"`reproduce themis-training` (48 scenarios, 2 workers): "
              f"{time.perf_counter() - start:.1f} s (target: 60 s on 2 cores)."]
    write_section("training", "\n".join(lines))


if __name__ == "__main__":
    main()
