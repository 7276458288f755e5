"""Reproduce the US-Byte comparisons (TPDS 2024): the paper's settings and ours, each labelled.

Clusters (``clusters()``), each one row of scenarios per model and compute setting:

* the paper's two settings, on a serial network (one all-reduce at a time, so every policy
  has the same messages in flight):

  - ``paper-8``: 8 workers with the authors' fitted constants (``usbyte-8``: alpha 1.3186 ms,
    beta 2.406e-10 s per fp32 element);
  - ``128GPU-10GbE``: the paper's 128-GPU simulation as a ring whose startup grows with it,
    ``ring-startup:10Gb/s,37us`` (2(N-1) x 37 us = 9.4 ms at N = 128; 37 us is the per-step
    latency whose 8-worker ring startup equals MG-WFBP's 10 GbE fit, 0.523 ms);

  each with V100 FP32 compute at 32 and at 128 samples per GPU (the paper trains VGG-16 and
  ResNet-50 at 128) and with the authors' own forward times (``authors_times``: proportional
  to parameter count, at their batch sizes) where they publish them;
* ours, at 32 samples per GPU: 10 GbE (MG-WFBP's fit, serial; and NCCL-like tree/ring per
  size, 4 in flight), 25 Gb (NCCL-like, 4 in flight) and 128 GPUs at 100 Gb/s (ring with 5 us
  per step, serial; and NCCL-like, 4 in flight). On the 4-in-flight networks ByteScheduler and
  US-Byte choose their credit from the same grid (one message in flight among the choices);
  WFBP, MG-WFBP, DDP and Horovod send one at a time, as their runtimes do.

Every policy with knobs appears at its shipped defaults and tuned on the shared grid
(``dataparallel/tuning.py``). Each row names its references: ``speedup_vs_<policy>`` is that
policy's time over the row's, ``speedup_vs_best_baseline`` the fastest baseline's (named in
``best_baseline``; baselines are every policy but US-Byte's two and dlsched). ``summary``
condenses the rows (``experiments/usbyte_summary.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dlsched.dataparallel import PRESETS, problem_from_model, ring_allreduce, run_dataparallel
from dlsched.dataparallel.authors_times import AUTHORS_FORWARD, ParamsProportional
from dlsched.dataparallel.comm import CommModel, nccl_allreduce
from dlsched.dataparallel.network_spec import parse_network
from dlsched.dataparallel.policies import POLICIES, TUNED_DEFAULTS
from dlsched.dataparallel.problem import LayerTimes
from dlsched.models import device_compute, get_model

MODELS = ("vgg16", "resnet50", "bert-base")
BATCH_SIZE = 32
PAPER_BATCH_SIZES = (32, 128)
DEVICE = "v100-fp32"
AUTHORS = "params-proportional"  # the compute name of the authors' forward times
IN_FLIGHT = 4
PAPER = {"usbyte_over_wfbp": 1.56, "usbyte_over_bytescheduler": 1.26, "at_128_gpus": 1.69}
OURS = ("usbyte", "usbyte-tuned", "dlsched")  # not baselines of US-Byte


@dataclass(frozen=True)
class Cluster:
    """A network setting: ``paper`` marks the paper's own (serial, also run at batch 128 and
    with the authors' forward times)."""

    name: str
    workers: int
    cost_model: str  # "reference" or "size-dependent"
    comm: CommModel
    in_flight: int = 1
    paper: bool = False


@dataclass(frozen=True)
class Scenario:
    """One model on one cluster under one compute setting: ``compute`` is a device preset or
    ``AUTHORS`` (the US-Byte authors' forward times), at ``batch_size`` samples per GPU."""

    model: str
    cluster: str
    workers: int
    cost_model: str
    comm: CommModel
    in_flight: int = 1
    compute: str = DEVICE
    batch_size: int = BATCH_SIZE


def clusters() -> list[Cluster]:
    """The networks of the default reproduction, the paper's two first."""
    return [
        Cluster("paper-8", 8, "reference", PRESETS["usbyte-8"], paper=True),
        Cluster("128GPU-10GbE", 128, "reference",
                parse_network("ring-startup:10Gb/s,37us", 128), paper=True),
        Cluster("10GbE", 8, "reference", PRESETS["10gbe-8"]),
        Cluster("10GbE", 8, "size-dependent", nccl_allreduce(8, 1.25e9, 37e-6), IN_FLIGHT),
        Cluster("25Gb", 8, "size-dependent", nccl_allreduce(8, 3.125e9, 10e-6), IN_FLIGHT),
        Cluster("128GPU", 128, "reference", ring_allreduce(128, 12.5e9, 5e-6)),
        Cluster("128GPU", 128, "size-dependent", nccl_allreduce(128, 12.5e9, 5e-6), IN_FLIGHT),
    ]


def computes(model: str, cluster: Cluster) -> list[tuple[str, int]]:
    """(compute, batch size) settings of ``model`` on ``cluster``: V100 FP32 at 32 samples per
    GPU; on the paper's clusters also at 128 and with the authors' forward times at their
    batch size (for the models they publish them for)."""
    if not cluster.paper:
        return [(DEVICE, BATCH_SIZE)]
    settings = [(DEVICE, batch) for batch in PAPER_BATCH_SIZES]
    if model in AUTHORS_FORWARD:
        settings.append((AUTHORS, AUTHORS_FORWARD[model].batch_size))
    return settings


def default_scenarios(models: Sequence[str] = MODELS) -> list[Scenario]:
    """Every model on every cluster of ``clusters()`` under each of its compute settings."""
    return [Scenario(model, c.name, c.workers, c.cost_model, c.comm, c.in_flight, compute, batch)
            for c in clusters() for model in models for compute, batch in computes(model, c)]


def layer_times(compute: str) -> LayerTimes:
    """The compute model named ``compute``: ``AUTHORS`` or a device preset."""
    return ParamsProportional() if compute == AUTHORS else device_compute(compute)


def cap(forward_s: float, backward_s: float) -> float:
    """The most US-Byte can gain over WFBP when both send >= 1 message per tensor, one at a
    time: 1 + T_f / (T_b + T_f)."""
    return 1 + forward_s / (backward_s + forward_s)


def reproduce(scenarios: Sequence[Scenario] | None = None,
              progress: Callable[[Iterable[Any], int], Iterable[Any]]
              = lambda items, total: items) -> list[dict[str, Any]]:
    """One row per (scenario, policy): times in seconds, bound, cap, settings and speedups,
    each speedup named by its reference."""
    rows: list[dict[str, Any]] = []
    cases = default_scenarios() if scenarios is None else list(scenarios)
    for case in progress(cases, len(cases)):
        problem = problem_from_model(get_model(case.model), layer_times(case.compute),
                                     case.batch_size, case.comm, case.in_flight)
        results = {p: run_dataparallel(problem, p) for p in POLICIES}
        times = {name: result.time_s for name, result in results.items()}
        best = min(times.values())
        best_baseline = min((t, name) for name, t in times.items() if name not in OURS)[1]
        limit = cap(sum(problem.forward), problem.backward_end)
        for name, result in results.items():
            time = result.time_s
            rows.append(result.row() | {
                "cluster": case.cluster, "workers": case.workers, "cost_model": case.cost_model,
                "network": case.comm.name, "compute": case.compute,
                "batch_size": case.batch_size, "in_flight": result.plan.in_flight,
                "variant": _variant(name), "settings": result.plan.settings,
                "cap": limit, "best_over_bound": best / result.bound_s,
                "best_baseline": best_baseline,
                "speedup_vs_best_baseline": times[best_baseline] / time,
                "speedup_vs_wfbp": times["wfbp"] / time,
                "speedup_vs_bytescheduler_shipped": times["bytescheduler"] / time,
                "speedup_vs_bytescheduler_tuned": times["bytescheduler-tuned"] / time,
                "speedup_vs_ddp": times["ddp"] / time,
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


Case = tuple[str, str, str, str, int]  # model, cluster, cost model, compute, batch size


def cases(rows: Iterable[dict[str, Any]]) -> dict[Case, dict[str, dict[str, Any]]]:
    """Rows grouped by (model, cluster, cost model, compute, batch size), then by policy."""
    grouped: dict[Case, dict[str, dict[str, Any]]] = {}
    for row in rows:
        key = (row["model"], row["cluster"], row["cost_model"], row["compute"],
               row["batch_size"])
        grouped.setdefault(key, {})[row["policy"]] = row
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
    if usbyte["peak_in_flight"] > 1:
        return (f"communication-bound, US-Byte runs up to {usbyte['peak_in_flight']} "
                f"all-reduces at once (its credit) where WFBP runs one: US-Byte/WFBP "
                f"{gain:.2f}x, the serial cap {usbyte['cap']:.2f}x does not apply")
    return (f"communication-bound: US-Byte gains over WFBP only by overlapping the next "
            f"forward, {gain:.2f}x of the {usbyte['cap']:.2f}x cap")
