"""Reproduce the US-Byte comparisons (TPDS 2024): every policy, several models and clusters.

Compute: a V100-class GPU at 40% of its 125 TFLOP/s tensor-core peak, 32 samples per worker
(sequence length 128 for BERT), backward = 2x forward. Networks: the US-Byte reference
alpha-beta constants for 2, 4 and 8 workers, and a 128-GPU cluster priced by the ring
all-reduce formula over 100 Gb/s links with 5 us per step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from statistics import mean
from typing import Any

from dlsched.dataparallel import PRESETS, problem_from_model, ring_allreduce, run_dataparallel
from dlsched.dataparallel.policies import POLICIES
from dlsched.models import ComputeModel, get_model

MODELS = ("vgg16", "resnet50", "resnet152", "bert-base")
CLUSTERS = (
    (2, PRESETS["usbyte-2"]), (4, PRESETS["usbyte-4"]), (8, PRESETS["usbyte-8"]),
    (128, ring_allreduce(128, 12.5e9, 5e-6)),
)
COMPUTE = ComputeModel(125e12, 0.4)
BATCH_SIZE = 32
PAPER = {"usbyte_over_wfbp": 1.56, "usbyte_over_bytescheduler": 1.26, "at_128_gpus": 1.69}


def reproduce(progress: Callable[[Iterable[Any], int], Iterable[Any]]
              = lambda items, total: items) -> list[dict[str, Any]]:
    """One row per (model, cluster, policy), with speedups over WFBP and ByteScheduler."""
    rows: list[dict[str, Any]] = []
    cases = [(m, w, c) for m in MODELS for w, c in CLUSTERS]
    for name, workers, comm in progress(cases, len(cases)):
        problem = problem_from_model(get_model(name), COMPUTE, BATCH_SIZE, comm)
        results = {p: run_dataparallel(problem, p) for p in POLICIES}
        for result in results.values():
            rows.append(result.row() | {
                "workers": workers, "network": comm.name,
                "speedup_vs_wfbp": results["wfbp"].time_s / result.time_s,
                "speedup_vs_bytescheduler": results["bytescheduler"].time_s / result.time_s,
            })
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Headline numbers: US-Byte's speedups, best-of time/bound, rows where US-Byte loses."""
    by_case: dict[tuple, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_case.setdefault((row["model"], row["workers"]), {})[row["policy"]] = row
    usbyte = [case["usbyte"] for case in by_case.values()]
    best = [min(case["usbyte"]["time_over_bound"], case["dlsched"]["time_over_bound"])
            for case in by_case.values()]
    losses = [{"model": model, "workers": workers, "baseline": policy,
               "slowdown": case["usbyte"]["time_s"] / row["time_s"]}
              for (model, workers), case in by_case.items()
              for policy, row in case.items()
              if policy not in ("usbyte", "dlsched") and row["time_s"] < case["usbyte"]["time_s"]]
    return {
        "usbyte_over_wfbp_max": max(r["speedup_vs_wfbp"] for r in usbyte),
        "usbyte_over_wfbp_mean": mean(r["speedup_vs_wfbp"] for r in usbyte),
        "usbyte_over_bytescheduler_max": max(r["speedup_vs_bytescheduler"] for r in usbyte),
        "usbyte_over_bytescheduler_mean": mean(r["speedup_vs_bytescheduler"] for r in usbyte),
        "best_time_over_bound_mean": mean(best),
        "best_time_over_bound_max": max(best),
        "best_never_slower_than_wfbp": all(
            min(c["usbyte"]["time_s"], c["dlsched"]["time_s"]) <= c["wfbp"]["time_s"]
            for c in by_case.values()),
        "usbyte_losses": losses,
        "paper": PAPER,
    }
