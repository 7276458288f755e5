"""Reproduce the US-Byte comparisons (TPDS 2024) under both all-reduce cost models.

Settings close to the paper's testbeds: 8 nodes with one GPU each, FP32 training on a V100
calibrated to NVIDIA's published FP32 ResNet-50 throughput (``v100-fp32``), 32 samples per
worker (BERT: sequence 128), 10 GbE and 25 Gb/s networks, and a 128-GPU cluster (100 Gb/s).
Each cluster is priced two ways:

* ``reference``: the US-Byte reference model — one alpha-beta constant pair for every message
  size, one message at a time (10 GbE: MG-WFBP's fitted 0.523 ms + 8.57e-10 s/B; 25 Gb: the
  US-Byte reference constants for 8 workers; 128 GPUs: the ring formula, 5 us per step);
* ``size-dependent``: NCCL-like pricing, the faster of tree and ring per message size with a
  per-step latency (small messages pay 2 log2 N steps, not 2(N-1)), on a network that carries
  up to 4 all-reduces at once sharing the bandwidth (ByteScheduler uses that through its
  credit; DDP, Horovod and US-Byte send one at a time).

Every policy with knobs appears at its shipped defaults and tuned on the shared grid
(``dataparallel/tuning.py``). The reproduction is a function of a list of scenarios returning
one row per (scenario, policy); ``summarize`` condenses the rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from statistics import mean
from typing import Any

from dlsched.dataparallel import PRESETS, problem_from_model, ring_allreduce, run_dataparallel
from dlsched.dataparallel.comm import CommModel, nccl_allreduce
from dlsched.dataparallel.policies import POLICIES, TUNED_DEFAULTS
from dlsched.models import ComputeModel, device_compute, get_model

MODELS = ("vgg16", "resnet50", "bert-base")
BATCH_SIZE = 32
IN_FLIGHT = 4
PAPER = {"usbyte_over_wfbp": 1.56, "usbyte_over_bytescheduler": 1.26, "at_128_gpus": 1.69}


@dataclass(frozen=True)
class Scenario:
    """One model on one cluster under one cost model."""

    model: str
    cluster: str
    workers: int
    cost_model: str  # "reference" or "size-dependent"
    comm: CommModel
    in_flight: int = 1
    compute: ComputeModel | None = None
    batch_size: int = BATCH_SIZE


def clusters() -> list[tuple[str, int, str, CommModel, int]]:
    """(cluster, workers, cost model, comm, in flight) of the default reproduction."""
    return [
        ("10GbE", 8, "reference", PRESETS["10gbe-8"], 1),
        ("10GbE", 8, "size-dependent", nccl_allreduce(8, 1.25e9, 37e-6), IN_FLIGHT),
        ("25Gb", 8, "reference", PRESETS["usbyte-8"], 1),
        ("25Gb", 8, "size-dependent", nccl_allreduce(8, 3.125e9, 10e-6), IN_FLIGHT),
        ("128GPU", 128, "reference", ring_allreduce(128, 12.5e9, 5e-6), 1),
        ("128GPU", 128, "size-dependent", nccl_allreduce(128, 12.5e9, 5e-6), IN_FLIGHT),
    ]


def default_scenarios(models: Sequence[str] = MODELS) -> list[Scenario]:
    """Every model on every cluster of ``clusters()`` with V100 FP32 compute."""
    compute = device_compute("v100-fp32")
    return [Scenario(model, cluster, workers, kind, comm, in_flight, compute)
            for model in models for cluster, workers, kind, comm, in_flight in clusters()]


def cap(forward_s: float, backward_s: float) -> float:
    """The most US-Byte can gain over WFBP when both send >= 1 message per tensor on a serial
    network: 1 + T_f / (T_b + T_f)."""
    return 1 + forward_s / (backward_s + forward_s)


def reproduce(scenarios: Sequence[Scenario] | None = None,
              progress: Callable[[Iterable[Any], int], Iterable[Any]]
              = lambda items, total: items) -> list[dict[str, Any]]:
    """One row per (scenario, policy): times in seconds, bound, cap, settings and speedups."""
    rows: list[dict[str, Any]] = []
    cases = default_scenarios() if scenarios is None else list(scenarios)
    for case in progress(cases, len(cases)):
        compute = case.compute or device_compute("v100-fp32")
        problem = problem_from_model(get_model(case.model), compute, case.batch_size,
                                     case.comm, case.in_flight)
        results = {p: run_dataparallel(problem, p) for p in POLICIES}
        best = min(r.time_s for r in results.values())
        limit = cap(sum(problem.forward), problem.backward_end)
        for name, result in results.items():
            rows.append(result.row() | {
                "cluster": case.cluster, "workers": case.workers, "cost_model": case.cost_model,
                "network": case.comm.name, "in_flight": result.plan.in_flight,
                "variant": _variant(name), "settings": result.plan.settings,
                "cap": limit, "best_over_bound": best / result.bound_s,
                "speedup_vs_wfbp": results["wfbp"].time_s / result.time_s,
                "speedup_vs_bytescheduler": results["bytescheduler"].time_s / result.time_s,
                "speedup_vs_ddp": results["ddp"].time_s / result.time_s,
            })
    return rows


def run_scenario(scenario: Scenario) -> list[dict[str, Any]]:
    """The rows of one scenario (what the sweep runner and ``--executor`` run per task)."""
    return reproduce([scenario])


def _variant(policy: str) -> str:
    if policy in TUNED_DEFAULTS:
        return "tuned"
    if policy in TUNED_DEFAULTS.values():
        return "default"
    return "no knobs" if policy in ("wfbp", "mgwfbp") else "ours"


def cases(rows: Iterable[dict[str, Any]]) -> dict[tuple, dict[str, dict[str, Any]]]:
    """Rows grouped by (model, cluster, cost model), then by policy."""
    grouped: dict[tuple, dict[str, dict[str, Any]]] = {}
    for row in rows:
        grouped.setdefault((row["model"], row["cluster"], row["cost_model"]), {})[
            row["policy"]] = row
    return grouped


def explain(case: dict[str, dict[str, Any]]) -> str:
    """One line on why US-Byte's speedups in this case differ from the paper's."""
    usbyte, wfbp, ddp = case["usbyte-tuned"], case["wfbp"], case["ddp"]
    gain = usbyte["speedup_vs_wfbp"]
    comm_share = wfbp["comm_busy_s"] / (wfbp["backward_s"] + wfbp["forward_s"])
    if usbyte["time_s"] > ddp["time_s"] * 1.05:
        return (f"US-Byte sends >= 1 all-reduce per tensor ({usbyte['messages']} messages) and "
                f"pays a startup each; DDP's buckets send {ddp['messages']}: US-Byte "
                f"{usbyte['time_s'] / ddp['time_s']:.2f}x slower than DDP")
    if comm_share < 0.5:
        return (f"compute-bound (WFBP's all-reduces take {comm_share:.0%} of compute): little "
                f"to hide, US-Byte/WFBP {gain:.2f}x")
    return (f"communication-bound: US-Byte gains over WFBP only by overlapping the next "
            f"forward, {gain:.2f}x of the {usbyte['cap']:.2f}x cap")


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Headline numbers: US-Byte's speedups (default and tuned), best policy / bound, cap."""
    grouped = cases(rows)
    usbyte = [c["usbyte"] for c in grouped.values()]
    tuned = [c["usbyte-tuned"] for c in grouped.values()]
    best = [c["wfbp"]["best_over_bound"] for c in grouped.values()]
    return {
        "usbyte_over_wfbp_max": max(r["speedup_vs_wfbp"] for r in usbyte),
        "usbyte_tuned_over_wfbp_max": max(r["speedup_vs_wfbp"] for r in tuned),
        "cap_max": max(r["cap"] for r in usbyte),
        "usbyte_over_bytescheduler_max": max(r["speedup_vs_bytescheduler"] for r in usbyte),
        "usbyte_tuned_over_bytescheduler_tuned_max": max(
            c["bytescheduler-tuned"]["time_s"] / c["usbyte-tuned"]["time_s"]
            for c in grouped.values()),
        "usbyte_over_ddp": {kind: {"min": min(r["speedup_vs_ddp"] for r in tuned
                                              if r["cost_model"] == kind),
                                   "max": max(r["speedup_vs_ddp"] for r in tuned
                                              if r["cost_model"] == kind)}
                            for kind in sorted({r["cost_model"] for r in tuned})},
        "best_over_bound_mean": mean(best),
        "best_over_bound_max": max(best),
        "usbyte_never_above_cap": all(
            r["speedup_vs_wfbp"] <= r["cap"] * (1 + 1e-9) for r in usbyte + tuned),
        "paper": PAPER,
    }
