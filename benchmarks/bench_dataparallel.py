"""Data-parallel planning speed: US-Byte, ByteScheduler's tuning and dlsched's search.

Run: ``python -m benchmarks.bench_dataparallel`` (rewrites its section of BENCHMARKS.md).
Plans are cached per problem, so every timed call starts from empty caches (cold planning).
"""

from __future__ import annotations

import os
import time

from benchmarks.common import best_of, cpu_seconds, write_section
from dlsched.dataparallel import PRESETS, problem_from_model
from dlsched.dataparallel.policies import POLICIES, clear_plan_caches
from dlsched.experiments import usbyte
from dlsched.models import device_compute, get_model
from dlsched.sweep.reproduce import reproduce

MODELS = ("gpt2-medium", "gpt2-xl")
TIMED = ("usbyte", "bytescheduler-tuned", "usbyte-tuned", "dlsched")


def _cold(policy: str, problem: object) -> None:
    clear_plan_caches()
    POLICIES[policy](problem)  # type: ignore[arg-type]


def main() -> None:
    """Measure and write the data-parallel section of BENCHMARKS.md."""
    load_before = os.getloadavg()[0]
    lines = ["## Data parallel", "", "Planning time (wall seconds, best of 3, cold caches; 8 "
             "workers, usbyte-8 constants, V100 FP32 calibrated, batch 32). Target: under 1 s "
             "for US-Byte and ByteScheduler's tuning.", "",
             "| model | tensors | " + " | ".join(TIMED) + " |",
             "|---|---:|" + "---:|" * len(TIMED)]
    for name in MODELS:
        model = get_model(name)
        problem = problem_from_model(model, device_compute("v100-fp32"), 32, PRESETS["usbyte-8"])
        times = [best_of(lambda p=policy, q=problem: _cold(p, q)) for policy in TIMED]
        lines.append(f"| {name} ({model.num_params / 1e9:.2f}B params) | {len(model.layers)} | "
                     + " | ".join(f"{t:.3f}" for t in times) + " |")
    clear_plan_caches()
    wall, cpu = time.perf_counter(), cpu_seconds()
    reproduce(usbyte, workers=1)
    wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    load = (load_before + os.getloadavg()[0]) / 2
    lines += ["", f"`dlsched reproduce usbyte` ({len(usbyte.scenarios())} cases x "
              f"{len(POLICIES)} policies, one worker process): **{wall:.1f} s wall, "
              f"{cpu:.1f} s CPU** (target: under a minute).", "",
              f"Load average {load:.1f} on {os.cpu_count()} cores while measuring (shared "
              "machine): wall times include waiting for the CPU; the CPU time is what the work "
              "itself costs."]
    write_section("dataparallel", "\n".join(lines))


if __name__ == "__main__":
    main()
