"""Evaluation cost of one large configuration per pipeline schedule (issue 49 item 5: 10 ms or
less at 1T on 4,096 GPUs): GPT 1T on 4,096 ``dgx-a100`` GPUs, bf16, TP 8, full recomputation,
global batch 3,072 (and 12,288 at PP 64 for four of them), at PP 8-64, every schedule the job
evaluator walks (1F1B, interleaved with two chunks, ZB-H1, GPipe, ZB-V, DualPipe, DualPipeV),
timed by this checkout and, given ``--before`` (the ``src`` folder of another checkout or copy),
by that code, fresh processes taken in turn.

Run: ``python -m benchmarks.bench_walk [--before SRC]`` (rewrites the ``walk-schedules``
section of BENCHMARKS.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from benchmarks.common import host_facts, host_text, write_section

# One fresh process per checkout: each row's layout evaluated once (its orders, tables and
# collective curves built), then 5 evaluations with the replica walk's caches cleared (every
# evaluation walks its replica as a new configuration does) and the garbage collector held
# off (as timeit does); the median CPU ms, iteration and exposed pipeline seconds per row.
SCRIPT = """
import gc, json, statistics, sys, time
from dataclasses import fields
from dlsched.job.cluster import load_cluster
from dlsched.job.evaluation import evaluate as module
from dlsched.job.evaluation import pipeline_steady
from dlsched.job.evaluation.unit_walk import UNIT_CHUNKS
from dlsched.job.execution import Execution
from dlsched.job.model_spec import bundled_specs
from dlsched.job.run_settings import RunSettings
run = RunSettings("bf16")
in_layout = {"run": run} if "run" in {f.name for f in fields(Execution)} else {}
cluster = load_cluster("dgx-a100", 4096, None)
job = module.Job(bundled_specs()["gpt-1t"], cluster, *(() if in_layout else (run,)))
out = []
for schedule, pp, batch in json.loads(sys.argv[1]):
    chunks = 2 if schedule == "interleaved" else UNIT_CHUNKS.get(schedule, 1)
    layout = Execution(8, pp, 4096 // (8 * pp), 1, batch, chunks, schedule, "full", **in_layout)
    result = module.evaluate(job, layout)
    times = []
    for _ in range(5):
        pipeline_steady.replica_timings.cache_clear()
        pipeline_steady.fast_pipeline.cache_clear()
        gc.collect()
        gc.disable()
        start = time.process_time()
        module.evaluate(job, layout)
        times.append(time.process_time() - start)
        gc.enable()
    out.append([schedule, pp, layout.num_microbatches, statistics.median(times) * 1e3,
                result.iteration_s, result.exposed["pp_s"]])
print(json.dumps(out))
"""
RUNS = 3  # fresh processes per checkout, taken in turn
CASES = [[schedule, pp, 3072] for schedule in ("1f1b", "interleaved", "zb-h1", "gpipe", "zb-v",
                                               "dualpipe", "dualpipev") for pp in (8, 16, 32, 64)]
# four times the microbatches at PP 64: what the walk's cost does with them
CASES += [[schedule, 64, 12288] for schedule in ("1f1b", "interleaved", "zb-h1", "gpipe")]


def _timed(source: str | None) -> list[list[object]]:
    """``SCRIPT``'s rows by this checkout (None) or the ``src`` folder ``source``."""
    env = None if source is None else {**os.environ, "PYTHONPATH": source}
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(CASES)],
                          capture_output=True, text=True, check=True, env=env)
    return json.loads(done.stdout)


def _least(runs: list[list[list[object]]]) -> list[list[object]]:
    """Each row with the least of its runs' medians (the run least slowed by others)."""
    return [[*same[0][:3], min(row[3] for row in same), *same[0][4:]]
            for same in zip(*runs, strict=True)]


def main() -> None:
    before = sys.argv[sys.argv.index("--before") + 1] if "--before" in sys.argv else None
    facts_start = host_facts()
    mine, theirs = [], []
    for _ in range(RUNS):
        mine.append(_timed(None))
        if before:
            theirs.append(_timed(before))
    rows, old = _least(mine), (_least(theirs) if before else None)
    lines, moved = [], 0.0
    for k, (schedule, pp, m, ms, iteration, pp_s) in enumerate(rows):
        cells = [schedule, str(pp), str(m), *([f"{old[k][3]:.1f}"] if old else []),
                 f"{ms:.1f}", "yes" if ms <= 10 else "no"]
        lines.append("| " + " | ".join(cells) + " |")
        if old:
            moved = max(moved, abs(iteration / old[k][4] - 1), abs(pp_s / old[k][5] - 1))
    head = ("| schedule | PP | microbatches | " + ("before (ms) | " if old else "")
            + "ms per evaluation | <= 10 ms |")
    text = [host_text(facts_start) + f" at the start, {host_facts()['load']:.1f} at the end",
            "", "GPT 1T (128 layers, hidden 25,600) on 4,096 dgx-a100 GPUs, bf16, TP 8, full "
            "recomputation, global batch 3,072 (DP = 512 / PP; the last rows 12,288: four times "
            "the microbatches), one configuration per schedule and PP priced by the job "
            "evaluator: CPU ms per evaluation, the least over "
            f"{RUNS} fresh processes (taken in turn with the before code's) of the median of 5 "
            "evaluations, each walking its replica anew (the walk's caches cleared; the "
            "orders, tables and collective curves of the layout built by a first evaluation), "
            "the garbage collector held off as timeit does.", "", head,
            "|---|---|---|" + "---|" * (3 if old else 2), *lines]
    if old:
        text += ["", f"Iteration and exposed pipeline seconds of every row: the before code's "
                 f"to {moved:.1e} (relative)."]
    write_section("walk-schedules", "\n".join(text))


if __name__ == "__main__":
    main()
