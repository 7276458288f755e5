"""Pipeline ranks with and without freed host memory kept (``runtime/host_memory.py``): the
same blocks in GPipe and in 1F1B order, per iteration the ranks' summed forward and backward
seconds and the iteration's.

``ranks`` ranks run ``gpt-small`` cut as the rank calibration cuts it (its workload,
``rank_calibration_plan``, is the GPipe order), 8 microbatches of 8 sequences; per allocator
setting one process start runs GPipe, 1F1B, GPipe, 1F1B (each 1 warm-up and ``ITERATIONS``
measured iterations), so a drift of the machine shows as a difference between the two runs of
one order. With glibc's defaults the schedule that holds more activations at once (GPipe) may
pay for faulting its memory back in; with memory kept both orders should run their blocks at
the same speed.

Run: ``python -m benchmarks.bench_host_memory [--ranks R ...]`` (rewrites its section of
BENCHMARKS.md; about a minute per number of ranks on 2 cores). Needs torch.
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict

from benchmarks.common import host_facts, host_text, write_section
from dlsched.pipeline.plans.plan import PipelinePlan
from dlsched.pipeline.plans.schedules import one_f_one_b_orders
from dlsched.runtime.pipeline.calibrate import rank_calibration_plan
from dlsched.runtime.pipeline.model import load_model
from dlsched.runtime.pipeline.run import PipelineRun, run_pipelines, saved_for_model
from dlsched.runtime.spawn import SpawnOptions

MODEL, MICROBATCH_SIZE, MICROBATCHES, ITERATIONS = "gpt-small", 8, 8, 6
ORDERS = ("gpipe", "1f1b", "gpipe", "1f1b")
SETTINGS = {"kept": "1", "glibc defaults": "0"}
"""Allocator setting -> DLSCHED_KEEP_FREED_MEMORY for the ranks."""


def _sums_ms(run: PipelineRun) -> tuple[float, float, float]:
    """Medians over iterations of the ranks' summed forward and backward time and of the
    iteration, milliseconds."""
    sums: dict[str, dict[int, float]] = {"forward": defaultdict(float),
                                         "backward": defaultdict(float)}
    for span in run.timeline.spans:
        kind = "forward" if span.kind == "forward" else "backward"
        sums[kind][span.args["iteration"]] += span.duration
    return (statistics.median(sums["forward"].values()) * 1e3,
            statistics.median(sums["backward"].values()) * 1e3,
            run.median_iteration_s * 1e3)


def rows(ranks: int) -> list[str]:
    """Table rows of one number of ranks: every setting, every run of ``ORDERS``."""
    names = tuple(f"rank{k}" for k in range(ranks))
    gpipe = rank_calibration_plan(MODEL, MICROBATCH_SIZE, ranks, MICROBATCHES, names)
    stages = gpipe.plan.stages
    one_f_one_b = PipelinePlan("1f1b", stages, one_f_one_b_orders(stages, ranks, MICROBATCHES),
                               MICROBATCHES)
    plans = {"gpipe": gpipe,
             "1f1b": saved_for_model(one_f_one_b, load_model(MODEL), MICROBATCH_SIZE, names)}
    out = []
    for setting, switch in SETTINGS.items():
        options = SpawnOptions(timeout_s=300, deadline_s=900,
                               env=lambda _, value=switch: {"DLSCHED_KEEP_FREED_MEMORY": value})
        saved = [plans[order] for order in ORDERS]
        runs = run_pipelines(saved, MODEL, ITERATIONS, options=options)
        for order, run in zip(ORDERS, runs, strict=True):
            forward, backward, iteration = _sums_ms(run)
            out.append(f"| {ranks} | {setting} | {order} | {forward:.1f} | {backward:.1f} "
                       f"| {iteration:.1f} |")
    return out


def main() -> None:
    """Run every number of ranks and write the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2], choices=range(1, 11),
                        help="numbers of ranks (1..10, the blocks)")
    ranks_list = parser.parse_args().ranks
    before = host_facts()
    table = [line for ranks in ranks_list for line in rows(ranks)]
    markdown = "\n".join([
        "## Pipeline ranks with and without freed host memory kept",
        "",
        f"`{MODEL}` cut evenly over the ranks, {MICROBATCHES} microbatches of "
        f"{MICROBATCH_SIZE} sequences, one gloo process per rank with 1 torch thread; per "
        "allocator setting one process start runs GPipe, 1F1B, GPipe, 1F1B, each 1 warm-up "
        f"and {ITERATIONS} measured iterations; medians over iterations of the ranks' summed "
        "forward and backward time and of the iteration (ms). `kept`: "
        "`runtime/host_memory.py`; `glibc defaults`: `DLSCHED_KEEP_FREED_MEMORY=0`.",
        "",
        "| ranks | allocator | order | forward (ms) | backward (ms) | iteration (ms) |",
        "|---:|---|---|---:|---:|---:|",
        *table,
        "",
        f"- Machine: {host_text(before)}.",
    ])
    write_section("host-memory", markdown)


if __name__ == "__main__":
    main()
