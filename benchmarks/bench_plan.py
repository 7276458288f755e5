"""Job planner speed (``dlsched plan``): one given GPT-3 175B layout evaluated on 128-3,072
GPUs (median of 5 evaluations after a first that builds the collective curves), GPT-3 175B
planned on 1,024 ``dgx-a100`` GPUs at global batch 1,536 (dlsched's space and the three
baselines, CPU seconds and peak RSS of a fresh process), and every SC21 Table 1 row planned by
dlsched at its published GPUs and batch (CPU seconds in all).

Run: ``python -m benchmarks.bench_plan`` (rewrites the ``plan`` section of BENCHMARKS.md);
``python -m benchmarks.bench_plan cp`` times issue 39's context-parallel rows alone (Llama 3 70B
at 32,768 tokens, CP 2 ring and all-to-all, given and searched; wall and CPU seconds of a fresh
process each) and rewrites the ``plan-cp`` section; ``python -m benchmarks.bench_plan ep``
times the expert-parallel rows (Mixtral 8x7B on 64 H100s, EP 8: searched around TP 1 PP 4, one
given layout, TP 2 x EP 8 with expert TP 2, whose EP group spans NVSwitch and the NICs, under
each collective policy, the same folded with expert TP 1, and the whole search) and rewrites
the ``plan-ep`` section; ``python -m benchmarks.bench_plan walk [--before SRC]`` times one
evaluation of GPT 1T on 4,096 GPUs at PP 8-64 (1F1B, interleaved, ZB-H1) with the steady-state
walk and with the full walk of every action (issue 49 item 5: 10 ms or less), the same layouts
at 1F1B PP 64 at three microbatch counts, and, given ``--before`` (the ``src`` folder of another
checkout, e.g. ``git archive <commit> src | tar -x -C /tmp/old``), the same evaluations by that
code in a fresh process beside them; it rewrites the ``plan-walk`` section.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from unittest.mock import patch

from benchmarks.common import host_facts, host_text, write_section
from dlsched.experiments.megatron import ROWS
from dlsched.job.cluster import load_cluster
from dlsched.job.evaluation import evaluate as evaluate_module
from dlsched.job.evaluation.evaluate import Job, evaluate
from dlsched.job.evaluation.pipeline_steady import fast_pipeline, replica_timings
from dlsched.job.evaluation.pipeline_walk import walk_pipeline
from dlsched.job.execution import Execution
from dlsched.job.model_spec import bundled_specs
from dlsched.job.run_settings import RunSettings
from dlsched.job.search import SPACES, search

PLAN_175B = ["plan", "--model", "gpt3-175b", "--cluster", "dgx-a100", "--gpus", "1024",
             "--global-batch", "1536", "--precision", "fp16", "--json"]


def evaluation_times() -> list[tuple[int, float, float]]:
    """(GPUs, first evaluation s, median of five more s) of TP8 x PP16 x DP, 1F1B, mb 1."""
    spec, out = bundled_specs()["gpt3-175b"], []
    for gpus in (128, 512, 1024, 2048, 3072):
        job = Job(spec, load_cluster("dgx-a100", gpus, None))
        dp = gpus // 128
        layout = Execution(8, 16, dp, 1, 96 * dp, recompute="selective", sequence_parallel=True,
                           run=RunSettings("fp16"))
        start = time.process_time()
        evaluate(job, layout)
        first = time.process_time() - start
        times = []
        for _ in range(5):
            start = time.process_time()
            evaluate(job, layout)
            times.append(time.process_time() - start)
        out.append((gpus, first, statistics.median(times)))
    return out


def plan_175b() -> dict[str, float]:
    """CPU seconds, peak RSS (MB) and the plan of ``dlsched plan`` in a fresh process."""
    command = ["/usr/bin/time", "-f", "%U %S %M", sys.executable, "-m", "dlsched", *PLAN_175B]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    user, system, rss = done.stderr.strip().splitlines()[-1].split()
    row = json.loads(done.stdout)["rows"][0]
    return {"cpu_s": float(user) + float(system), "rss_mb": int(rss) / 1024,
            "layout": row["layout"], "iteration_s": row["iteration_s"],
            "baseline": row["best_baseline_layout"],
            "speedup": row["speedup_vs_best_baseline"]}


def plan_sc21() -> tuple[float, list[str]]:
    """CPU seconds to plan every SC21 row with dlsched, and one line per row."""
    specs, lines, total = bundled_specs(), [], 0.0
    for row in ROWS:
        job = Job(specs[row.name], load_cluster("dgx-a100", row.gpus, None))
        run = RunSettings("fp16", dp_policy="usbyte", attention="unfused")
        given = Execution(row.tp, row.pp, row.dp, row.microbatch, row.batch, row.chunks,
                          "interleaved" if row.chunks > 1 else "1f1b", "full", run=run)
        start = time.process_time()
        found = search(job, Execution.searching(global_batch=row.batch, run=run),
                       SPACES["dlsched"])
        elapsed = time.process_time() - start
        total += elapsed
        theirs = evaluate(job, given).iteration_s
        lines.append(f"| {row.name} | {row.gpus} | {found.best.layout.label()} | "
                     f"{found.best.iteration_s:.2f} | {theirs:.2f} | "
                     f"{theirs / found.best.iteration_s:.3f} | {elapsed:.1f} |")
    return total, lines


CP_ROW = ["plan", "--model", "llama3-70b", "--seq", "32768", "--cp", "2", "--cluster",
          "dgx-h100", "--gpus", "128", "--global-batch", "64", "--json"]
CP_GIVEN = ["--tp", "4", "--pp", "8", "--microbatch-size", "1", "--recompute", "full",
            "--zero", "1", "--sequence-parallel", "--schedule", "1f1b", "--chunks", "1"]


def plan_cp() -> list[str]:
    """One table line per CP run: the command's options, wall and CPU seconds of a fresh
    process, and its row (layout, iteration, MFU, memory, exposed CP and TP)."""
    runs = [[*CP_GIVEN, "--cp-algorithm", "ring"], [*CP_GIVEN, "--cp-algorithm", "all-to-all"],
            [*CP_GIVEN, "--cp-algorithm", "ring", "--attention", "fused"], []]
    lines = []
    for extra in runs:
        wall, cpu, rows = _timed([*CP_ROW, *extra])
        row = rows[0]
        lines.append(f"| {' '.join(extra) or '(searched)'} | {row['layout']} | "
                     f"{row['iteration_s']:.2f} | {row['mfu'] * 100:.1f} | "
                     f"{row['memory_gib']:.1f} | {row['exposed_cp_s']:.3f} | "
                     f"{row['exposed_tp_s']:.3f} | {wall:.2f} | {cpu:.2f} |")
    return lines


def _timed(arguments: list[str]) -> tuple[float, float, list[dict]]:
    """Wall and CPU seconds of a fresh ``dlsched`` process, and its JSON rows."""
    command = ["/usr/bin/time", "-f", "%e %U %S", sys.executable, "-m", "dlsched", *arguments]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    wall, user, system = map(float, done.stderr.strip().splitlines()[-1].split())
    return wall, user + system, json.loads(done.stdout)["rows"]


EP_ROW = ["plan", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "64", "--json"]
EP_RUNS = (["--ep", "8", "--tp", "1", "--pp", "4"],
           ["--ep", "8", "--tp", "1", "--pp", "4", "--dp", "16", "--microbatch-size", "1",
            "--schedule", "1f1b", "--recompute", "selective", "--zero", "1"],
           ["--ep", "8", "--tp", "2", "--expert-tp", "2", "--sequence-parallel", "--pp", "4",
            "--dp", "8", "--microbatch-size", "1", "--schedule", "1f1b", "--recompute", "selective",
            "--zero", "1", "--collective-policy", "baseline,themis,dlsched"],
           ["--ep", "8", "--tp", "2", "--expert-tp", "1", "--sequence-parallel", "--pp", "4",
            "--dp", "8", "--microbatch-size", "1", "--schedule", "1f1b", "--recompute",
            "selective", "--zero", "1"],
           [])


def plan_ep() -> list[str]:
    """One table line per row of each EP run (module docstring)."""
    lines = []
    for extra in EP_RUNS:
        wall, cpu, rows = _timed([*EP_ROW, *extra])
        lines += [f"| {' '.join(extra) or '(searched)'} | {row['collective_policy']} | "
                  f"{row['layout']} | "
                  f"{row['iteration_s']:.2f} | {row['mfu'] * 100:.1f} | "
                  f"{row['memory_gib']:.1f} | {row['exposed_ep_a2a_s']:.3f} | "
                  f"{row['exposed_dp_s']:.3f} | {wall:.2f} | {cpu:.2f} |" for row in rows]
    return lines


def main_ep() -> None:
    """The ``plan-ep`` section (module docstring)."""
    text = [host_text(host_facts()), "",
            f"`dlsched {' '.join(EP_ROW)}` with the options of each line (issue 39's target: "
            "a row in under 3 s; the first and last lines search the rest, baselines "
            "included; the third splits each expert over TP 2, Megatron-Core's default, "
            "its EP group over 4 GPUs of 2 nodes; the fourth folds EP 8 over TP 2 with "
            "expert TP 1, one node):", "",
            "| options | collectives | layout | iteration (s) | MFU (%) | memory (GiB/GPU) | "
            "exposed A2A (s) | exposed DP (s) | wall (s) | CPU (s) |",
            "|---|---|---|---|---|---|---|---|---|---|", *plan_ep()]
    write_section("plan-ep", "\n".join(text))


def main_cp() -> None:
    """The ``plan-cp`` section (module docstring)."""
    text = [host_text(host_facts()), "",
            f"`dlsched {' '.join(CP_ROW)}` with the options of each line (issue 39's target: "
            "a row in under 3 s; the third with Transformer Engine's cuDNN attention, what "
            "Megatron-Core runs on H100):", "",
            "| options | layout | iteration (s) | MFU (%) | memory (GiB/GPU) | exposed CP (s) "
            "| exposed TP (s) | wall (s) | CPU (s) |", "|---|---|---|---|---|---|---|---|---|",
            *plan_cp()]
    write_section("plan-cp", "\n".join(text))


# Timed in a fresh process, by this checkout or another (--before): GPT 1T on 4,096 dgx-a100
# GPUs, bf16, full recomputation, TP 8, global batch 3,072 (6 pp microbatches per replica, a
# multiple of pp as interleaving needs); the cache of each replica walk cleared before each
# evaluation (every evaluation walks its replica as a new configuration does) and the garbage
# collector held off while it runs (as timeit does: a collection of the caches' objects would
# land in whichever evaluation triggers it).
WALK_SCRIPT = """
import gc, json, statistics, sys, time
from dlsched.job.cluster import load_cluster
from dlsched.job.evaluation import evaluate as module
from dlsched.job.evaluation import pipeline_walk
from dlsched.job.execution import Execution
from dlsched.job.model_spec import bundled_specs
try:
    from dlsched.job.evaluation import pipeline_steady
    walks = [pipeline_walk, pipeline_steady]
except ImportError:
    walks = [pipeline_walk]
try:  # the unit-walked schedules' chunks (benchmarks.bench_walk's rows); 1 where they predate
    from dlsched.job.evaluation.unit_walk import UNIT_CHUNKS
except ImportError:
    UNIT_CHUNKS = {}
try:  # the run settings one type since issue 47; a --before checkout may predate it
    from dlsched.job.run_settings import RunSettings
    run = RunSettings("bf16")
except ImportError:
    run = "bf16"
from dataclasses import fields
# the execution carries the run settings since issue 47; a Job held them before
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
        for walk in walks:
            for name in ("fast_pipeline", "replica_timings"):
                getattr(walk, name, None) and getattr(walk, name).cache_clear()
        gc.collect()
        gc.disable()
        start = time.process_time()
        module.evaluate(job, layout)
        times.append(time.process_time() - start)
        gc.enable()
    out.append([layout.label(), layout.num_microbatches, statistics.median(times),
                result.iteration_s, result.exposed["pp_s"]])
print(json.dumps(out))
"""
WALK_RUNS = 3  # fresh processes per checkout, taken in turn with the --before one
WALK_CASES = [[schedule, pp, 3072] for schedule in ("1f1b", "interleaved", "zb-h1")
              for pp in (8, 16, 32, 64)] + [["1f1b", 64, batch] for batch in (768, 12288)]


def script_rows(script: str, source: str | None, cases: list[list[object]]
                ) -> list[list[object]]:
    """The JSON rows ``script`` prints for ``cases`` (its one argument), run in a fresh
    process by this checkout (None) or the ``src`` folder ``source``."""
    env = None if source is None else {**os.environ, "PYTHONPATH": source}
    done = subprocess.run([sys.executable, "-c", script, json.dumps(cases)],
                          capture_output=True, text=True, check=True, env=env)
    return json.loads(done.stdout)


def _walk_rows(source: str | None, cases: list[list[object]]) -> list[list[object]]:
    """``WALK_SCRIPT``'s rows run by this checkout (None) or the ``src`` folder ``source``."""
    return script_rows(WALK_SCRIPT, source, cases)


def _alternated(before: str | None, runs: int) -> tuple[list[list[object]],
                                                        list[list[object]] | None]:
    """``WALK_SCRIPT``'s rows by this checkout and (given) by ``before``, ``runs`` fresh
    processes each taken in turn, each row's time the least of its runs' medians (the runs
    least slowed by the other processes on the machine)."""
    mine, theirs = [], []
    for _ in range(runs):
        mine.append(_walk_rows(None, WALK_CASES))
        if before:
            theirs.append(_walk_rows(before, WALK_CASES))

    def least(runs_of: list[list[list[object]]]) -> list[list[object]]:
        return [[*same[0][:2], min(row[2] for row in same), *same[0][3:]]
                for same in zip(*runs_of, strict=True)]

    return least(mine), (least(theirs) if before else None)


def _median_cpu(run: Callable[[], object], repeats: int = 5) -> float:
    """Median CPU seconds of ``repeats`` calls of ``run``, the replica walks' caches cleared
    before each (every call walks its replicas as a new configuration does)."""
    times = []
    for _ in range(repeats):
        fast_pipeline.cache_clear()
        replica_timings.cache_clear()
        gc.collect()
        gc.disable()
        start = time.process_time()
        run()
        times.append(time.process_time() - start)
        gc.enable()
    return statistics.median(times)


def _full_walks(times: object, quiet: object) -> tuple[object, object]:
    return walk_pipeline(times), walk_pipeline(quiet)


def full_walk_ms(cases: list[list[object]]) -> list[float]:
    """ms per evaluation with the full walk of every action, one per lane (what the
    steady-state walk replaces), for ``WALK_CASES``' rows."""
    job = Job(bundled_specs()["gpt-1t"], load_cluster("dgx-a100", 4096, None))
    out = []
    for schedule, pp, batch in cases:
        layout = Execution(8, pp, 4096 // (8 * pp), 1, batch, 2 if schedule == "interleaved"
                           else 1, schedule, "full", run=RunSettings("bf16"))
        evaluate(job, layout)
        with patch.object(evaluate_module, "replica_timings", _full_walks):
            out.append(_median_cpu(lambda layout=layout: evaluate(job, layout)) * 1e3)
    return out


def main_walk() -> None:
    """The ``plan-walk`` section (module docstring)."""
    before = sys.argv[sys.argv.index("--before") + 1] if "--before" in sys.argv else None
    rows, old = _alternated(before, WALK_RUNS)
    full = full_walk_ms(WALK_CASES)
    head = "| layout | microbatches | ms per evaluation | full walk (ms) |"
    if old:
        head = "| layout | microbatches | before (ms) | ms per evaluation | full walk (ms) |"
    lines, moved = [], 0.0
    for k, (label, m, seconds, iteration, pp_s) in enumerate(rows):
        cells = [label, str(m), *([f"{old[k][2] * 1e3:.1f}"] if old else []),
                 f"{seconds * 1e3:.1f}", f"{full[k]:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
        if old:
            moved = max(moved, abs(iteration / old[k][3] - 1), abs(pp_s / old[k][4] - 1))
    if old:
        lines += ["", f"Iteration and exposed pipeline seconds of every row: the before code's "
                  f"to {moved:.1e} (relative; floating-point rounding of the steady state's "
                  "sums)."]
    text = [host_text(host_facts()), "",
            "One configuration of GPT 1T (128 layers, hidden 25,600) on 4,096 dgx-a100 GPUs, "
            "bf16, TP 8, full recomputation, global batch 3,072, priced by the job evaluator: "
            f"CPU ms per evaluation (the least over {WALK_RUNS} fresh processes, taken in turn "
            "with the before code's, of the median of 5 evaluations, each walking its replica "
            "anew, the garbage collector held off as timeit does). The evaluation walks the "
            "replica once in two lanes, with its transfers and without (the exposed pipeline "
            "time), the warm-up, the steady state's rounds until they repeat and the cool-down "
            "(job.evaluation.pipeline_steady); the full walk visits every action of both lanes "
            "(O(stages x microbatches)); before: the same rows by the code before issue 49 "
            "item 5's work (fd45096's walk, two walks per evaluation, a DP step per rank):", "",
            head, "|---|---|" + "---|" * (3 if old else 2), *lines]
    write_section("plan-walk", "\n".join(text))


def main() -> None:
    facts = host_facts()
    evals = evaluation_times()
    big = plan_175b()
    total, lines = plan_sc21()
    text = [host_text(facts), "",
            "One given layout of GPT-3 175B (TP8 x PP16 x DP, 1F1B, microbatch 1, 96 "
            "microbatches per replica), CPU seconds per evaluation:", "",
            "| GPUs | first (builds curves) | median of 5 |", "|---|---|---|",
            *(f"| {g} | {a:.3f} | {b:.4f} |" for g, a, b in evals), "",
            f"`dlsched {' '.join(PLAN_175B)}`: {big['cpu_s']:.1f} CPU-s, peak RSS "
            f"{big['rss_mb']:.0f} MB; plan {big['layout']} at {big['iteration_s']:.2f} s, "
            f"{big['speedup']:.3f}x the best baseline ({big['baseline']}).", "",
            f"Every SC21 Table 1 row planned by dlsched: {total:.1f} CPU-s in all.", "",
            "| row | GPUs | dlsched's plan | its iteration (s) | Megatron's configuration (s) | "
            "speedup | planning CPU-s |", "|---|---|---|---|---|---|---|", *lines]
    write_section("plan", "\n".join(text))


if __name__ == "__main__":
    {"cp": main_cp, "ep": main_ep, "walk": main_walk}.get(sys.argv[1] if sys.argv[1:] else "",
                                                          main)()
