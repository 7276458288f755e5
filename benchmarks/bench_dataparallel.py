"""Data-parallel planning speed: US-Byte, ByteScheduler's tuning and dlsched's search.

Run: ``python -m benchmarks.bench_dataparallel`` (rewrites its section of BENCHMARKS.md).
"""

from __future__ import annotations

import time

from benchmarks.common import best_of, write_section
from dlsched.dataparallel import PRESETS, problem_from_model
from dlsched.dataparallel.policies import POLICIES
from dlsched.experiments import usbyte
from dlsched.models import device_compute, get_model

MODELS = ("gpt2-medium", "gpt2-xl")
TIMED = ("usbyte", "bytescheduler-tuned", "usbyte-tuned", "dlsched")


def main() -> None:
    """Measure and write the data-parallel section of BENCHMARKS.md."""
    lines = ["## Data parallel", "", "Planning time (wall seconds, best of 3; 8 workers, "
             "usbyte-8 constants, V100 FP32 calibrated, batch 32; machine shared with other "
             "jobs, so times are upper estimates). Target: under 1 s for US-Byte and "
             "ByteScheduler's tuning.", "", "| model | tensors | " + " | ".join(TIMED) + " |",
             "|---|---:|" + "---:|" * len(TIMED)]
    for name in MODELS:
        model = get_model(name)
        problem = problem_from_model(model, device_compute("v100-fp32"), 32, PRESETS["usbyte-8"])
        times = [best_of(lambda p=policy, q=problem: POLICIES[p](q)) for policy in TIMED]
        lines.append(f"| {name} ({model.num_params / 1e9:.2f}B params) | {len(model.layers)} | "
                     + " | ".join(f"{t:.3f}" for t in times) + " |")
    start = time.perf_counter()
    usbyte.reproduce()
    lines += ["", f"`dlsched reproduce usbyte` ({len(usbyte.default_scenarios())} cases x "
              f"{len(POLICIES)} policies): "
              f"**{time.perf_counter() - start:.1f} s** (target: under a minute)."]
    write_section("dataparallel", "\n".join(lines))


if __name__ == "__main__":
    main()
