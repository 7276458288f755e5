"""Sweep throughput: scenarios/s of the 10,000-scenario collective grid on each executor, and
the runner's overhead per scenario against calling the simulator directly in a loop.

Run: ``python -m benchmarks.bench_sweep`` (rewrites its section of BENCHMARKS.md);
``--executors process`` to measure only some executors.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import tempfile
import time
from pathlib import Path

from benchmarks.common import write_section
from dlsched.collectives import run_collective
from dlsched.hardware import load_topology
from dlsched.sweep import ResultStore, SweepJob, load_grid, open_executor, run_sweep

GRID = Path(__file__).resolve().parent.parent / "examples" / "sweeps" / "collectives-10k.yaml"
WORKERS = 2
SAMPLE_EVERY = 10  # the overhead comparison runs every 10th scenario (1,000)


def _sweep_seconds(job: SweepJob, kind: str, workers: int) -> float:
    """Wall seconds of a fresh sweep (executor start-up included)."""
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        with ResultStore(Path(folder) / "r.db", job.columns, job.meta) as store, \
                open_executor(kind, workers) as engine:
            run_sweep(job, store, engine)
        return time.perf_counter() - start


def _direct_seconds(job: SweepJob) -> float:
    """Wall seconds of plain ``run_collective`` calls in a loop (topologies loaded once)."""
    nets = {(p["topology"], p["latency_scale"]): load_topology(p["topology"]).with_latency_scale(
        p["latency_scale"]) for p in job.scenarios}
    start = time.perf_counter()
    for p in job.scenarios:
        run_collective(nets[(p["topology"], p["latency_scale"])], p["op"], p["size"],
                       p["chunks"], p["policy"], p["intra"], p["concurrency"])
    return time.perf_counter() - start


def main() -> None:
    """Measure and write the sweep section of BENCHMARKS.md."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--executors", default="process,dask,ray")
    kinds = parser.parse_args().executors.split(",")
    job = SweepJob.from_grid(load_grid(GRID))
    sample = SweepJob(job.name, job.domain, job.evaluate, job.scenarios[::SAMPLE_EVERY],
                      job.params, job.metrics, job.meta)
    load = os.getloadavg()[0]
    lines = ["## Sweeps", "", f"`{GRID.name}`: {len(job.scenarios):,} collective scenarios "
             f"(All-Reduce 1-512 MB, 1-16 chunks, 5 topologies), results committed to SQLite; "
             f"{WORKERS} workers; wall seconds including executor start-up.", "",
             "| executor | scenarios | wall (s) | scenarios/s |", "|---|---:|---:|---:|"]
    for kind in kinds:
        if kind != "process" and importlib.util.find_spec(
                {"dask": "distributed", "ray": "ray"}[kind]) is None:
            lines.append(f"| {kind} | - | not installed | - |")
            continue
        seconds = _sweep_seconds(job, kind, WORKERS)
        lines.append(f"| {kind} | {len(job.scenarios):,} | {seconds:.1f} | "
                     f"{len(job.scenarios) / seconds:,.0f} |")
    direct = _direct_seconds(sample)
    swept = _sweep_seconds(sample, "process", 1)
    count = len(sample.scenarios)
    lines += ["", f"Overhead against a plain loop, every {SAMPLE_EVERY}th scenario ({count:,}) "
              "on one core: direct `run_collective` loop "
              f"{direct:.2f} s ({direct / count * 1e3:.2f} ms per scenario); the same scenarios "
              f"through `dlsched sweep` with one worker process {swept:.2f} s: overhead "
              f"**{(swept - direct) / direct * 100:+.1f}%** "
              f"({(swept - direct) / count * 1e3:+.3f} ms per scenario; target < 10%).", "",
              f"Load average when starting: {load:.1f} on {os.cpu_count()} cores (the machine "
              "was shared with other jobs, so absolute times are inflated and noisy)."]
    write_section("sweep", "\n".join(lines))


if __name__ == "__main__":
    main()
