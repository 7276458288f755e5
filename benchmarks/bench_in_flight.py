"""Cost of the pipeline stash peaks of ``job.memory.in_flight`` per pipeline rank: the
accumulating walk (``accumulating_peak``: FSDP2's unsharded gradients under a pipeline, priced
for every such layout a search evaluates) beside the stash peak alone (``in_flight_peak``), at
PP 16 and 128 microbatches (and 512), for 1F1B, ZB-H1, GPipe and the interleaved order with
2 and 4 chunks, timed by this checkout and, given ``--before`` (the ``src`` folder of another
checkout or copy), by that code, fresh processes taken in turn.

Run: ``python -m benchmarks.bench_in_flight [--before SRC]`` (rewrites the ``in-flight``
section of BENCHMARKS.md).
"""

from __future__ import annotations

import sys

from benchmarks.bench_plan import script_rows
from benchmarks.common import host_facts, host_text, in_turn, write_section

# Per case: every rank of the layout priced once per repeat (1.5 GB of stash a chunk-
# microbatch, 0.4 GB of logits more on the last chunk, 3 GB of gradients a chunk: equal layers
# per chunk, so that many steps tie, and bytes of the size FSDP2 under a pipeline meets); the
# least of 5 repeats' CPU seconds over the ranks, per rank call.
SCRIPT = """
import json, sys, time
from dlsched.job.execution import Execution
from dlsched.job.memory.in_flight import accumulating_peak, in_flight_peak
out = []
for schedule, pp, m, v in json.loads(sys.argv[1]):
    layout = Execution(1, pp, 1, 1, m, v, schedule)
    stash = [(1.5e9, 4e8 if c == v - 1 else 0.0) for c in range(v)]
    grads = [3e9] * v
    row = [schedule, pp, m, v]
    for call in (lambda s: accumulating_peak(layout, s, stash, grads),
                 lambda s: in_flight_peak(layout, s, stash)):
        best = float("inf")
        for _ in range(5):
            start = time.process_time()
            for stage in range(pp):
                call(stage)
            best = min(best, (time.process_time() - start) / pp)
        row.append(best * 1e3)
    out.append(row)
print(json.dumps(out))
"""
CASES = [[schedule, 16, m, chunks] for m in (128, 512)
         for schedule, chunks in (("1f1b", 1), ("zb-h1", 1), ("gpipe", 1), ("interleaved", 2),
                                  ("interleaved", 4))]
RUNS = 3  # fresh processes per checkout, taken in turn


def main() -> None:
    before = sys.argv[sys.argv.index("--before") + 1] if "--before" in sys.argv else None
    facts = host_facts()
    rows, old = in_turn(lambda source: script_rows(SCRIPT, source, CASES), before, RUNS, (4, 5))
    head = ("| schedule | PP | microbatches | chunks | "
            + ("accumulating_peak before (ms) | " if old else "")
            + "accumulating_peak (ms) | in_flight_peak (ms) |")
    lines = ["| " + " | ".join([schedule, str(pp), str(m), str(v),
                                *([f"{old[k][4]:.3f}"] if old else []),
                                f"{acc:.3f}", f"{peak:.3f}"]) + " |"
             for k, (schedule, pp, m, v, acc, peak) in enumerate(rows)]
    text = ["## Pipeline stash peaks (`job.memory.in_flight`)", "",
            host_text(facts) + f" at the start, {host_facts()['load']:.1f} at the end", "",
            "CPU ms per call of `job.memory.in_flight`'s peaks for one pipeline rank (the mean "
            "over the layout's ranks; the least over 5 repeats in each of "
            f"{RUNS} fresh processes taken in turn with the before code's): 1.5 GB of stash a "
            "chunk-microbatch (0.4 GB of logits more on the last chunk), 3 GB of gradients a "
            "chunk (equal chunks: many steps tie).", "", head,
            "|---|---|---|---|" + "---|" * (3 if old else 2), *lines]
    write_section("in-flight", "\n".join(text))


if __name__ == "__main__":
    main()
