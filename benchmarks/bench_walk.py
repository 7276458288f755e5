"""Evaluation cost of one large configuration per pipeline schedule (issue 49 item 5: 10 ms or
less at 1T on 4,096 GPUs): GPT 1T on 4,096 ``dgx-a100`` GPUs, bf16, TP 8, full recomputation,
global batch 3,072 (and 12,288 at PP 64: four times the microbatches), at PP 8-64, every
schedule the job evaluator walks (1F1B, interleaved with two chunks, ZB-H1, GPipe, ZB-V,
DualPipe, DualPipeV),
timed by this checkout and, given ``--before`` (the ``src`` folder of another checkout or copy),
by that code, fresh processes taken in turn.

Run: ``python -m benchmarks.bench_walk [--before SRC]`` (rewrites the ``walk-schedules``
section of BENCHMARKS.md). The timing is ``bench_plan``'s plan-walk script; the first
evaluation of the unit-walked layouts (what building their level graphs costs) is timed apart.
"""

from __future__ import annotations

import sys

from benchmarks.bench_plan import _walk_rows, script_rows
from benchmarks.common import host_facts, host_text, in_turn, write_section

# The rows are bench_plan's plan-walk script (``bench_plan.WALK_SCRIPT``, one fresh process per
# checkout): each row's layout evaluated once (its orders, tables and collective curves
# built), then 5 evaluations with the replica walk's caches cleared (every evaluation walks
# its replica as a new configuration does) and the garbage collector held off (as timeit
# does); the median CPU ms, iteration and exposed pipeline seconds per row.
# The first evaluation of each unit-walked layout at PP 64, in one fresh process per checkout
# (the cluster's collective curves built first by a 1F1B layout): what building the layout's
# orders, unit program and (after) level graph costs, once per schedule, degree and
# microbatch count.
FIRST_SCRIPT = """
import json, sys, time
from dlsched.job.cluster import load_cluster
from dlsched.job.evaluation import evaluate as module
from dlsched.job.evaluation.unit_walk import UNIT_CHUNKS
from dlsched.job.execution import Execution
from dlsched.job.model_spec import bundled_specs
from dlsched.job.run_settings import RunSettings
run = RunSettings("bf16")
job = module.Job(bundled_specs()["gpt-1t"], load_cluster("dgx-a100", 4096, None))
module.evaluate(job, Execution(8, 64, 8, 1, 3072, 1, "1f1b", "full", run=run))
out = []
for schedule, pp, batch in json.loads(sys.argv[1]):
    layout = Execution(8, pp, 4096 // (8 * pp), 1, batch, UNIT_CHUNKS[schedule], schedule,
                       "full", run=run)
    start = time.process_time()
    module.evaluate(job, layout)
    out.append([schedule, pp, layout.num_microbatches, (time.process_time() - start) * 1e3])
print(json.dumps(out))
"""
RUNS = 3  # fresh processes per checkout, taken in turn
CASES = [[schedule, pp, 3072] for schedule in ("1f1b", "interleaved", "zb-h1", "gpipe", "zb-v",
                                               "dualpipe", "dualpipev") for pp in (8, 16, 32, 64)]
# four times the microbatches at PP 64: what the walk's cost does with them
CASES += [[schedule, 64, 12288] for schedule in ("1f1b", "interleaved", "zb-h1", "gpipe")]
# the unit-walked schedules at PP 64 (and four times the microbatches): the walk's growth, and
# the first evaluation's cost
UNIT_ROWS = [[schedule, 64, batch] for batch in (3072, 12288)
             for schedule in ("zb-v", "dualpipe", "dualpipev")]
CASES += UNIT_ROWS[3:]
FIRST_CASES = UNIT_ROWS


def _timed(source: str | None) -> list[list[object]]:
    """``bench_plan.WALK_SCRIPT``'s rows of ``CASES`` by this checkout (None) or the ``src``
    folder ``source``: schedule, PP, microbatches, ms, iteration and pipeline seconds."""
    return [[schedule, pp, m, seconds * 1e3, iteration, pp_s]
            for (schedule, pp, _), (_, m, seconds, iteration, pp_s)
            in zip(CASES, _walk_rows(source, CASES), strict=True)]


def _first(source: str | None) -> list[list[object]]:
    """``FIRST_SCRIPT``'s rows (``FIRST_CASES``) by this checkout (None) or ``source``."""
    return script_rows(FIRST_SCRIPT, source, FIRST_CASES)


def main() -> None:
    before = sys.argv[sys.argv.index("--before") + 1] if "--before" in sys.argv else None
    facts_start = host_facts()
    rows, old = in_turn(_timed, before, RUNS, (3,))  # the least of the runs' medians
    first, first_old = in_turn(_first, before, RUNS, (3,))
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
            "orders, tables, unit program, level graph and collective curves of the layout "
            "built by a first evaluation; bench_plan's plan-walk script), "
            "the garbage collector held off as timeit does.", "", head,
            "|---|---|---|" + "---|" * (3 if old else 2), *lines]
    if old:
        text += ["", f"Iteration and exposed pipeline seconds of every row: the before code's "
                 f"to {moved:.1e} (relative)."]
    text += ["", "The first evaluation of each unit-walked layout at PP 64 (CPU ms, the least "
             f"over {RUNS} fresh processes, the cluster's collective curves built before): it "
             "builds the layout's orders and unit program and (after) its level graph, once "
             "per schedule, degree and microbatch count:", "",
             "| schedule | PP | microbatches | " + ("before (ms) | " if first_old else "")
             + "first evaluation (ms) |", "|---|---|---|" + "---|" * (2 if first_old else 1),
             *("| " + " | ".join([schedule, str(pp), str(m),
                                  *([f"{first_old[k][3]:.0f}"] if first_old else []),
                                  f"{ms:.0f}"]) + " |"
               for k, (schedule, pp, m, ms) in enumerate(first))]
    write_section("walk-schedules", "\n".join(text))


if __name__ == "__main__":
    main()
