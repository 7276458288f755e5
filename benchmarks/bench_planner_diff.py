"""Planner-speed differential check (issue 23, item 4): plan every case of
``benchmarks.planner_cases`` and compare with a record made before the speed work.

Record: ``python -m benchmarks.bench_planner_diff record OUT.json [bench|reproduce|random ...]``
Compare: ``python -m benchmarks.bench_planner_diff check BEFORE.json [groups ...]`` prints, per
case and planner, CPU-seconds before and after and the plan's iteration before and after,
marking plans that changed (``moved``) and any that got slower (``SLOWER``); exit status 1
when a plan got slower.

Records made before the speed work (2026-11-25, CPU-seconds on a loaded 2-core machine):
``benchmarks/records/planner_before_bench.json`` and ``planner_before_reproduce.json``;
``tests/pipeline/data/planner_random_before.json`` (commit be5aa23) for the random group.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.planner_cases import bench_problems, plan_case, random_problems, reproduce_problems

GROUPS = {"bench": bench_problems, "reproduce": reproduce_problems, "random": random_problems}


def _problems(groups: list[str]) -> dict:
    unknown = [group for group in groups if group not in GROUPS]
    if unknown:
        raise SystemExit(f"groups: unknown {', '.join(unknown)}; accepted: {', '.join(GROUPS)}")
    return {name: problem for group in groups or list(GROUPS)
            for name, problem in GROUPS[group]().items()}


def record(path: Path, groups: list[str]) -> None:
    """Plan every case of ``groups`` and write the records to ``path`` (JSON), case by case."""
    path.parent.mkdir(parents=True, exist_ok=True)
    records: dict[str, Any] = {}
    for name, problem in _problems(groups).items():
        records[name] = plan_case(problem)
        path.write_text(json.dumps(records, indent=1, sort_keys=True))
        print(f"{name}: dlsched {records[name]['dlsched'].get('iteration_s')} s, "
              f"{records[name]['dlsched total']['cpu_s']:.2f} CPU-s", flush=True)
    print(f"wrote {path}")


def check(path: Path, groups: list[str]) -> int:
    """Re-plan the recorded cases of ``groups``; print the comparison; 1 if a plan is
    slower than recorded."""
    before = json.loads(path.read_text())
    slower = 0
    totals = [0.0, 0.0]
    print("| case | planner | CPU-s before | CPU-s after | iteration before (s) "
          "| iteration after (s) | plan |")
    print("|---|---|---:|---:|---:|---:|---|")
    for name, problem in _problems(groups).items():
        if name not in before:
            continue
        after = plan_case(problem)
        for planner, new in after.items():
            old = before[name].get(planner, {})
            if planner == "dlsched total":
                totals[0] += old.get("cpu_s", 0.0)
                totals[1] += new["cpu_s"]
                print(f"| {name} | {planner} | {old.get('cpu_s', 0.0):.2f} "
                      f"| {new['cpu_s']:.2f} | | | |", flush=True)
                continue
            t0, t1 = old.get("iteration_s"), new["iteration_s"]
            if old.get("plan") == new["plan"]:
                mark = "same" if old.get("notes", new.get("notes")) == new.get("notes") \
                    else "same, notes differ"
            elif t0 is not None and (t1 is None or t1 > t0 * (1 + 1e-9)):
                mark, slower = "SLOWER", slower + 1
            else:
                mark = "moved"
            print(f"| {name} | {planner} | {old.get('cpu_s', 0.0):.2f} | {new['cpu_s']:.2f} "
                  f"| {t0} | {t1} | {mark} |", flush=True)
    print(f"\nCPU-s over all cases (dlsched with every baseline): {totals[0]:.1f} before, "
          f"{totals[1]:.1f} after; plans slower than before: {slower}")
    return 1 if slower else 0


def main(argv: list[str]) -> int:
    """``record OUT [groups]`` or ``check BEFORE [groups]``."""
    if len(argv) < 2 or argv[0] not in ("record", "check"):
        raise SystemExit(__doc__)
    if argv[0] == "record":
        record(Path(argv[1]), argv[2:])
        return 0
    return check(Path(argv[1]), argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
