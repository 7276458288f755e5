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
``best_baseline``; baselines are every policy but US-Byte's two and dlsched). The summary
condenses the rows (``experiments/usbyte_summary.py``); the tables lead with the headlines,
each against a named reference. A reproduction module (``experiments.reproduction``) whose
``Options`` are the models.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dlsched.dataparallel import PRESETS, problem_from_model, ring_allreduce, run_dataparallel
from dlsched.dataparallel.authors_times import AUTHORS_FORWARD, ParamsProportional
from dlsched.dataparallel.comm import CommModel, nccl_allreduce
from dlsched.dataparallel.network_spec import parse_network
from dlsched.dataparallel.policies import POLICIES, TUNED_DEFAULTS
from dlsched.dataparallel.problem import LayerTimes
from dlsched.experiments.usbyte_summary import WFBP_CAP, cases, summarize
from dlsched.models import device_compute, get_model
from dlsched.report import Column
from dlsched.report.sections import Paragraph, Section, Table
from dlsched.report.tables import as_ratio

NAME = "usbyte"
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


@dataclass(frozen=True)
class Options:
    """The zoo models to run (``--models``)."""

    models: tuple[str, ...] = MODELS


def scenarios(options: Options | None = None) -> list[Scenario]:
    """Every model of ``options`` (default: ``MODELS``) on every cluster."""
    return default_scenarios((options or Options()).models)


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


def run_scenario(case: Scenario) -> list[dict[str, Any]]:
    """One row per policy: times in seconds, bound, cap, settings and speedups, each speedup
    named by its reference."""
    problem = problem_from_model(get_model(case.model), layer_times(case.compute),
                                 case.batch_size, case.comm, case.in_flight)
    results = {p: run_dataparallel(problem, p) for p in POLICIES}
    times = {name: result.time_s for name, result in results.items()}
    best = min(times.values())
    best_baseline = min((t, name) for name, t in times.items() if name not in OURS)[1]
    limit = cap(sum(problem.forward), problem.backward_end)
    rows = []
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


def _variant(policy: str) -> str:
    if policy in TUNED_DEFAULTS:
        return "tuned"
    if policy in TUNED_DEFAULTS.values():
        return "default"
    return "no knobs" if policy in ("wfbp", "mgwfbp") else "ours"


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


def document(rows: list[dict[str, Any]], options: Options | None = None) -> dict[str, Any]:
    """What ``--json`` prints: the rows and the summary (``usbyte_summary``), each number
    naming what it is against."""
    paper_clusters = [c.name for c in clusters() if c.paper]
    return {"rows": rows, "summary": summarize(rows, paper_clusters)
            | {"authors_compute": AUTHORS, "paper": PAPER}}


# Policy columns of the reproduction table and their short headers (* = tuned variant).
CASE_POLICIES = {"wfbp": "WFBP", "mgwfbp": "MG-WFBP", "ddp": "DDP", "ddp-tuned": "DDP*",
                 "horovod": "Hvd", "horovod-tuned": "Hvd*", "bytescheduler": "BS",
                 "bytescheduler-tuned": "BS*", "usbyte": "USB", "usbyte-tuned": "USB*",
                 "dlsched": "dlsched"}
SETTINGS_SHOWN = ("bytescheduler", "bytescheduler-tuned", "usbyte", "usbyte-tuned", "ddp-tuned",
                  "horovod-tuned")
COMPUTE_SHORT = {AUTHORS: "authors"}
CASE_COLUMNS = [Column("cluster", "cluster", justify="left"),
                Column("costs", "costs", justify="left"),
                Column("compute", "compute", justify="left")]
LEGEND = ("Hvd = Horovod, BS = ByteScheduler, USB = US-Byte; no star: shipped defaults, * = "
          "tuned on the shared grid. costs: ref = one alpha-beta per message, serial network; "
          "size = faster of tree/ring per size, 4 all-reduces in flight. compute: v100-fp32 or "
          "the authors' forward times (proportional to parameters), b = samples per GPU.")


def _ms(value: float) -> str:
    return f"{value * 1e3:.1f}"


def _x(value: float) -> str:
    return f"{value:.2f}x"


def _left(key: str, header: str) -> Column:
    return Column(key, header, justify="left")


def _case_columns(case: tuple[str, str, str, str, int]) -> dict[str, Any]:
    model, cluster, cost_model, compute, batch = case
    return {"model": model, "cluster": cluster,
            "costs": "ref" if cost_model == "reference" else "size",
            "compute": f"{COMPUTE_SHORT.get(compute, compute)} b{batch}"}


def case_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per case: every policy's time, US-Byte's speedups and why they differ from the
    paper's."""
    table = []
    for case, policies in cases(rows).items():
        shipped, tuned = policies["usbyte"], policies["usbyte-tuned"]
        table.append(_case_columns(case) | {
            "bound_s": shipped["bound_s"], "cap": shipped["cap"],
            **{name: policies[name]["time_s"] for name in CASE_POLICIES},
            "vs_best": tuned["speedup_vs_best_baseline"],
            "best_baseline": CASE_POLICIES[tuned["best_baseline"]],
            "vs_bs": shipped["speedup_vs_bytescheduler_shipped"],
            "vs_bs_tuned": tuned["speedup_vs_bytescheduler_tuned"],
            "vs_wfbp": tuned["speedup_vs_wfbp"],
            "best_over_bound": shipped["best_over_bound"],
            "in_flight": f"{shipped['peak_in_flight']}/"
                         f"{policies['bytescheduler']['peak_in_flight']}",
            "why": explain(policies)})
    return table


def _paper_text(entries: list[dict[str, Any]], model: str) -> str:
    return ", ".join(f"{_x(e['usbyte_over_bytescheduler_shipped'])} "
                     f"({COMPUTE_SHORT.get(e['compute'], e['compute'])} b{e['batch_size']})"
                     for e in entries if e["model"] == model) or "not run"


def headlines(summary: dict[str, Any], models: Sequence[str]) -> list[dict[str, str]]:
    """The claims of the paper beside ours, each against a named reference: US-Byte against
    the best other policy, over ByteScheduler at the paper's settings (per model) and overall,
    tuned against tuned, over WFBP with its cap, against DDP, and the best policy over the
    lower bound."""
    best = summary["usbyte_vs_best_baseline"]
    bs = summary["usbyte_over_bytescheduler"]
    wfbp = summary["usbyte_over_wfbp"]
    worst = best["tuned_worst"]
    lines = [
        {"claim": "US-Byte (tuned) vs the best other policy", "against": best["against"],
         "paper": "-",
         "ours": f"{_x(best['tuned']['min'])} to {_x(best['tuned']['max'])} (geomean "
                 f"{_x(best['tuned']['geomean'])}; faster in {best['tuned']['faster_cases']} of "
                 f"{best['tuned']['cases']} cases; shipped US-Byte {_x(best['shipped']['min'])} "
                 f"to {_x(best['shipped']['max'])}); worst: {worst['model']} {worst['cluster']} "
                 f"{worst['cost_model']}, {_x(worst['speedup'])} against {worst['best_baseline']}"},
    ]
    for cluster, paper in (("paper-8", "up to 1.26x (8 nodes)"),
                           ("128GPU-10GbE", "up to 1.69x (128 GPUs, simulated)")):
        entries = bs["paper_settings"][cluster]
        lines += [{"claim": f"US-Byte over ByteScheduler, {cluster} ({entries[0]['network']}), "
                            f"{model}" if entries else f"US-Byte over ByteScheduler, {cluster}",
                   "against": "ByteScheduler shipped (1M-element partition, credit tuned)",
                   "paper": paper, "ours": _paper_text(entries, model)} for model in models]
    lines += [
        {"claim": "US-Byte over ByteScheduler, every case", "against": "ByteScheduler shipped",
         "paper": "up to 1.26x",
         "ours": f"up to {_x(bs['shipped']['max'])} ({bs['shipped']['max_at']['model']} "
                 f"{bs['shipped']['max_at']['cluster']})"},
        {"claim": "US-Byte (tuned) over ByteScheduler (tuned)", "against": bs["tuned"]["against"],
         "paper": "-", "ours": f"{_x(bs['tuned']['min'])} to {_x(bs['tuned']['max'])}"},
        {"claim": "US-Byte over WFBP", "against": "WFBP = Horovod without fusion",
         "paper": "up to 1.56x",
         "ours": f"up to {_x(wfbp['shipped']['max'])} shipped, {_x(wfbp['tuned']['max'])} tuned; "
                 f"cap {_x(wfbp['cap_max'])} (1 + T_f/(T_b+T_f)), never above it: "
                 f"{'yes' if wfbp['never_above_cap'] else 'NO'} ({wfbp['cap_checked_rows']} rows "
                 "one at a time)"},
        *({"claim": f"US-Byte (tuned) vs DDP, {kind} costs", "against": "DDP shipped",
           "paper": "-", "ours": f"{_x(span['min'])} to {_x(span['max'])} (< 1 = slower)"}
          for kind, span in summary["usbyte_tuned_over_ddp"].items() if isinstance(span, dict)),
        {"claim": "best policy / lower bound", "against": "the lower bound", "paper": "-",
         "ours": f"mean {summary['best_over_bound_mean']:.3f}, max "
                 f"{summary['best_over_bound_max']:.3f}"},
    ]
    return lines


def sections(document: dict[str, Any], options: Options | None = None) -> list[Section]:
    """The headlines first, then the cap on US-Byte / WFBP, per model its times (ms) and
    speedups, the knob values, a legend and the explanations."""
    rows, models = document["rows"], (options or Options()).models
    table = case_rows(rows)
    printed: list[Section] = [
        Table(headlines(document["summary"], models),
              [_left(key, key) for key in ("claim", "against", "paper", "ours")],
              "US-Byte: headlines, each against a named reference (speedup = reference time / "
              "US-Byte time)"),
        Paragraph(f"{WFBP_CAP['statement']}. {WFBP_CAP['wfbp']}. Derivation: "
                  f"{WFBP_CAP['derivation']} Why 1.56x is out of reach: "
                  f"{WFBP_CAP['why_1_56x']}", lead="Cap on US-Byte / WFBP:")]
    for name in models:
        part = [row for row in table if row["model"] == name]
        printed += [
            Table(part, [*CASE_COLUMNS, Column("bound_s", "bound", _ms),
                         *(Column(key, header, _ms) for key, header in CASE_POLICIES.items()),
                         Column("best_over_bound", "best/bnd", as_ratio)],
                  f"{name}: iteration time per policy (ms)"),
            Table(part, [*CASE_COLUMNS, Column("vs_best", "USB*/best", as_ratio),
                         Column("best_baseline", "best baseline"),
                         Column("vs_bs", "USB/BS", as_ratio),
                         Column("vs_bs_tuned", "USB*/BS*", as_ratio),
                         Column("vs_wfbp", "USB*/WFBP", as_ratio),
                         Column("cap", "cap", "{:.3f}".format),
                         _left("in_flight", "peak USB/BS")],
                  f"{name}: US-Byte's speedups = reference time / US-Byte time (USB*/best: "
                  "against the fastest baseline of the case, named; USB/BS: shipped against "
                  "shipped; USB*/BS*: tuned against tuned); cap = 1 + T_f/(T_b+T_f); peak = "
                  "most all-reduces US-Byte / ByteScheduler ran at once")]
    settings = [_case_columns(case) | {name: policies[name]["settings"]
                                       for name in SETTINGS_SHOWN}
                for case, policies in cases(rows).items()]
    return [
        *printed,
        Table(settings, [_left("model", "model"), *CASE_COLUMNS,
                         *(_left(name, CASE_POLICIES[name]) for name in SETTINGS_SHOWN)],
              "Knob values of shipped ByteScheduler and US-Byte (credit tuned) and of the tuned "
              "variants (same grid, same exhaustive search; sizes in MB = 10^6 B, MiB, KiB; "
              "times in ms)"),
        Paragraph(LEGEND),
        Table(table, [_left("model", "model"), *CASE_COLUMNS,
                      _left("why", "why the speedup differs from the paper")], "Explanations")]
