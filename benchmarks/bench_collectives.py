"""Collective simulator speed: one 1 GB All-Reduce, engine events/s, and `reproduce themis`.

Run: ``python -m benchmarks.bench_collectives`` (rewrites its section of BENCHMARKS.md).
"""

from __future__ import annotations

import time

from benchmarks.common import best_of, write_section
from dlsched.collectives import run_collective
from dlsched.collectives.policies import POLICIES
from dlsched.collectives.run import make_request
from dlsched.collectives.simulate import execute_plan
from dlsched.experiments import themis
from dlsched.hardware import load_topology
from dlsched.sweep.reproduce import reproduce

TOPOLOGY = "4D-Ring_FC_Ring_SW"


def main() -> None:
    """Measure and write the collectives section of BENCHMARKS.md."""
    net = load_topology(TOPOLOGY)
    lines = ["## Collectives", "", f"1 GB All-Reduce on {TOPOLOGY} (table latencies), SCF, "
             "best of 3 (wall seconds; `dlsched` includes its candidate search):", "",
             "| chunks | policy | plan + simulate (s) | engine events | events/s |",
             "|---:|---|---:|---:|---:|"]
    for chunks in (64, 512):
        for policy in POLICIES:
            seconds = best_of(lambda c=chunks, p=policy: run_collective(
                net, "all-reduce", 10**9, c, p, "scf"))
            plan = POLICIES[policy](make_request(net, "all-reduce", 10**9, chunks, "scf"))
            start = time.perf_counter()
            events = execute_plan(plan).events
            rate = events / (time.perf_counter() - start)
            lines.append(f"| {chunks} | {policy} | {seconds:.4f} | {events} | {rate:,.0f} |")
    start = time.perf_counter()
    rows = reproduce(themis, workers=2).rows
    total = time.perf_counter() - start
    lines += ["", f"`dlsched reproduce themis` (all {len(themis.scenarios())} scenarios, "
              f"{len(rows)} rows, 2 worker processes): **{total:.1f} s** (target: under 10 s "
              "on 2 cores)."]
    write_section("collectives", "\n".join(lines))


if __name__ == "__main__":
    main()
