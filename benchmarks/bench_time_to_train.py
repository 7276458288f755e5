"""Time to train (issue 51): the wall time of ``dlsched plan --model llama3-405b --cluster
dgx-h100 --gpus 16384 --tokens 15.6T`` in a fresh process (median of 3, wall and CPU seconds)
and of the Monte-Carlo check (2,000 runs of a 40-segment job); rewrites the ``time-to-train``
section of BENCHMARKS.md.

``python -m benchmarks.bench_time_to_train plot`` draws ``docs/images/time-to-train.png``: the
time to train of the 405B plan ``--objective time-to-train`` chooses at each size (with
failures, checkpoints and stragglers), its failure-free time and its goodput against the GPUs
(matplotlib, Agg).

``python -m benchmarks.bench_time_to_train worked`` prints the numbers of docs/time-to-train.md's
worked plan: the plans ``--objective expected``, ``upper`` and ``time-to-train`` choose (on the
default storage and on 200 GB/s in all), each priced on both storages, and Meta's own layout.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import write_section
from dlsched.goodput.montecarlo import simulate

COMMAND = ["plan", "--model", "llama3-405b", "--cluster", "dgx-h100", "--gpus", "16384",
           "--tokens", "15.6T"]
GPUS = (2048, 4096, 8192, 16384, 32768)
PLOT = Path(__file__).resolve().parent.parent / "docs" / "images" / "time-to-train.png"


def command_seconds(repeats: int = 3) -> tuple[float, float]:
    """Median wall and CPU seconds of the 405B command in a fresh process."""
    walls, cpus = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run(["/usr/bin/time", "-f", "%U %S", sys.executable, "-m", "dlsched",
                               *COMMAND, "--json"], capture_output=True, text=True, check=True)
        walls.append(time.perf_counter() - start)
        user, system = done.stderr.strip().splitlines()[-1].split()
        cpus.append(float(user) + float(system))
    return statistics.median(walls), statistics.median(cpus)


def montecarlo_seconds() -> float:
    """Wall seconds of 2,000 simulated runs of 40 segments (tau 250 s, C 3 s, R 630 s, M 3.09
    h: the 405B plan's numbers)."""
    start = time.perf_counter()
    simulate(40, 250.0, 3.0, 630.0, 11137.0, runs=2000, seed=0)
    return time.perf_counter() - start


def bench() -> None:
    wall, cpu = command_seconds()
    mc = montecarlo_seconds()
    load = os.getloadavg()[0]
    write_section("time-to-train", "\n".join([
        "## Time to train (`dlsched plan --tokens`, issue 51)", "",
        "| what | wall s | CPU s |", "|---|---|---|",
        f"| `dlsched {' '.join(COMMAND)}` (fresh process, median of 3) | {wall:.2f} | "
        f"{cpu:.2f} |",
        f"| Monte-Carlo check: 2,000 runs x 40 segments (`goodput.montecarlo`) | {mc:.3f} | |",
        "", f"One-minute load average at the end: {load:.1f} (other processes share the cores: "
        "wall above CPU seconds is time waiting for them).",
    ]))


def plot(path: Path = PLOT) -> None:
    """Days to train Llama 3 405B on 15.6T tokens against the GPUs (module docstring)."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dlsched.job.scenario import PlanScenario

    rows = [PlanScenario(model="llama3-405b", cluster="dgx-h100", gpus=gpus, tokens="15.6T",
                         objective="time-to-train", baselines=False).run().rows[0]
            for gpus in GPUS]
    ideal = [r["iterations"] * r["iteration_s"] / 86400 for r in rows]
    figure, days_axis = plt.subplots(figsize=(7, 4.2))
    days_axis.plot(GPUS, [r["ttt_days"] for r in rows], "o-", label="time to train (failures, "
                   "checkpoints, stragglers)")
    days_axis.plot(GPUS, ideal, "s--", label="failure-free (iterations x iteration)")
    days_axis.set_xscale("log", base=2)
    days_axis.set_yscale("log")
    days_axis.set_xticks(GPUS, [f"{gpus:,}" for gpus in GPUS])
    days_axis.minorticks_off()
    days_axis.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    days_axis.set_xlabel("H100 GPUs (dgx-h100)")
    days_axis.set_ylabel("days")
    goodput_axis = days_axis.twinx()
    goodput_axis.plot(GPUS, [100 * r["goodput"] for r in rows], "^:", color="tab:red",
                      label="goodput (right axis)")
    goodput_axis.set_ylabel("goodput (%)")
    lines = days_axis.get_legend_handles_labels()
    more = goodput_axis.get_legend_handles_labels()
    days_axis.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="upper right")
    days_axis.set_title("Llama 3 405B, 15.6T tokens: dlsched plan --tokens 15.6T "
                        "--objective time-to-train", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    for gpus, row, free in zip(GPUS, rows, ideal, strict=True):
        print(f"{gpus:6d} GPUs  {row['layout']:60s} {row['ttt_days']:7.1f} days "
              f"(failure-free {free:6.1f})  goodput {row['goodput']:.1%}  "
              f"{row['interruptions']:.0f} interruptions  {row['energy_mwh']:,.0f} MWh")
    print(f"wrote {path}")


WORKED = {"model": "llama3-405b", "cluster": "dgx-h100", "gpus": 16384, "tokens": "15.6T",
          "baselines": False}
SLOW_STORAGE = "200 GB/s total"
LAYOUT_FIELDS = ("tp", "pp", "dp", "chunks", "microbatch_size", "schedule", "recompute",
                 "sequence_parallel", "zero", "pipeline_split")


def _priced(**settings: object) -> dict[str, Any]:
    from dlsched.job.scenario import PlanScenario

    return PlanScenario(**{**WORKED, **settings}).run().rows[0]  # type: ignore[arg-type]


def worked() -> None:
    """The worked plan's numbers (module docstring), one line per plan and storage."""
    chosen = {"expected": _priced(objective="expected"), "upper": _priced(objective="upper"),
              "time-to-train": _priced(objective="time-to-train"),
              "time-to-train, 200 GB/s": _priced(objective="time-to-train",
                                                 storage=SLOW_STORAGE)}
    print("| chosen by | layout | iteration (s) | MFU (%) | mean / p50 / p95 with stragglers (s)"
          " | storage | load (s) | interruptions | lost work (h) | restarting (h) | checkpoint "
          "every (min) | goodput (%) | days | GPU-hours (M) | MWh |")
    print("|" + "---|" * 15)
    for name, row in chosen.items():
        fixed = {field: row[field] for field in LAYOUT_FIELDS}
        for storage in ("tectonic", SLOW_STORAGE):
            r = _priced(objective="expected", storage=storage, **fixed)
            print(f"| {name} | {r['layout']} | {r['iteration_s']:.3f} | {100 * r['mfu']:.1f} | "
                  f"{r['iteration_mean_s']:.3f} / {r['iteration_p50_s']:.3f} / "
                  f"{r['iteration_p95_s']:.3f} | {storage} | {r['checkpoint_load_s']:.1f} | "
                  f"{r['interruptions']:.0f} | {r['lost_work_h']:.1f} | {r['restart_h']:.1f} | "
                  f"{r['checkpoint_interval_s'] / 60:.1f} | {100 * r['goodput']:.2f} | "
                  f"{r['ttt_days']:.2f} | {r['gpu_hours'] / 1e6:.2f} | "
                  f"{r['energy_mwh']:,.0f} |")
    meta = _priced(objective="expected", global_batch=2048, tp=8, pp=16, dp=128)
    print(f"Meta's layout (TP 8, PP 16, DP 128, batch 2,048): {meta['layout']} "
          f"{meta['iteration_s']:.3f} s, MFU {100 * meta['mfu']:.1f}%, goodput "
          f"{100 * meta['goodput']:.1f}%, load {meta['checkpoint_load_s']:.0f} s, "
          f"{meta['ttt_days']:.1f} days, {meta['gpu_hours'] / 1e6:.2f}M GPU-hours; checkpoint "
          f"{chosen['expected']['checkpoint_gb']:,.0f} GB for the expected plan")


if __name__ == "__main__":
    {"plot": plot, "worked": worked}.get(sys.argv[1] if sys.argv[1:] else "", bench)()
