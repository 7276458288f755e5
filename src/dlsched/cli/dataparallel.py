"""``dlsched dataparallel`` and ``dlsched reproduce usbyte``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from dlsched.cli.options import CSV_HELP, PLOT_HELP, TRACE_HELP, Outputs, console, parse_names
from dlsched.cli.progress import progress_bar
from dlsched.cli.sweep import (
    AddressOption,
    DbOption,
    ExecutorOption,
    ResumeOption,
    WorkersOption,
    reproduction_rows,
)
from dlsched.dataparallel import POLICIES, parse_network, problem_from_model, run_dataparallel
from dlsched.dataparallel.comm import PRESETS, AlphaBeta, CommModel, TopologyPriced
from dlsched.dataparallel.netfile import read_network_file
from dlsched.errors import ConfigError
from dlsched.experiments import usbyte
from dlsched.models import (
    CALIBRATED,
    DEVICES,
    ComputeModel,
    device_compute,
    get_model,
    load_profile,
    model_names,
)
from dlsched.report import Column, render_table
from dlsched.report.tables import as_ratio, seconds_as_ms
from dlsched.validation import (
    BATCH,
    FRACTION,
    MAX_BATCH,
    MAX_WORKERS,
    RATIO,
    WORKERS,
    count,
)

IN_FLIGHT = count("messages in flight", 1, 64)
DEFAULT_WORKERS = 8

COLUMNS = [
    Column("policy", "policy", justify="left"),
    Column("time_s", "iteration (ms)", seconds_as_ms),
    Column("bound_s", "bound (ms)", seconds_as_ms),
    Column("time_over_bound", "time/bound", as_ratio),
    Column("settings", "settings", justify="left"),
    Column("speedup_vs_wfbp", "speedup vs WFBP", as_ratio),
    Column("messages", "all-reduces"),
    Column("comm_busy_s", "network busy (ms)", seconds_as_ms),
]


def _load_model(model: str, profile: Path | None) -> Any:
    return load_profile(profile) if profile is not None else get_model(model)


def _network(network: str, workers: int | None) -> tuple[CommModel, int | None]:
    """The cost model and the data-parallel rank count it describes, checked against
    ``--workers`` (one meaning everywhere: data-parallel ranks).

    A fitted file supplies its own count by default. A preset measured at N workers
    (``usbyte-8``) and a topology of N NPUs fix N: ``--workers`` must be N or omitted.
    ``ALPHA,BETA`` already prices one all-reduce across every worker, so ``--workers`` is
    refused there (the count is None). Formulas (``ring:...``) use ``--workers`` (default 8).
    """
    if workers is not None:
        WORKERS.check(workers, "--workers")
    if network.lower().endswith((".yaml", ".yml", ".json")):
        fitted = read_network_file(network)
        ranks = fitted.workers if workers is None else workers
        return fitted.build(ranks), ranks
    comm = parse_network(network, DEFAULT_WORKERS if workers is None else workers)
    fixed: int | None = None
    if isinstance(comm, TopologyPriced):
        fixed, what = comm.topology.num_npus, f"topology {comm.topology.name!r} has"
    elif network in PRESETS:
        fixed, what = int(network.rsplit("-", 1)[1]), f"preset {network!r} was measured with"
    elif isinstance(comm, AlphaBeta) and comm.name == network:
        if workers is not None:
            raise ConfigError(f"--workers: {workers} is not used by --network {network!r} (its "
                              "ALPHA,BETA already price one all-reduce across all workers); "
                              "accepted: omit --workers, or a network that depends on it: "
                              "ring|tree|nccl:BANDWIDTH,LATENCY, a preset or topology:PRESET")
        return comm, None
    if fixed is None:
        return comm, DEFAULT_WORKERS if workers is None else workers
    if workers is not None and workers != fixed:
        raise ConfigError(f"--workers: {workers} does not match --network {network!r} "
                          f"({what} {fixed} workers); accepted: {fixed} or omit --workers, or "
                          "ring|tree|nccl:BANDWIDTH,LATENCY for any worker count")
    return comm, fixed


def dataparallel(
    model: Annotated[str, typer.Option(help="Zoo model name.")] = "resnet50",
    profile: Annotated[Path | None, typer.Option(help="Per-layer profile CSV/JSON instead.")]
    = None,
    workers: Annotated[int | None, typer.Option(
        help=f"Data-parallel ranks (1..{MAX_WORKERS}); default: the network's own count "
        "(usbyte-8: 8, topology: its NPUs, a network file's), 8 for ring|tree|nccl:...; "
        "refused for ALPHA,BETA.", show_default=False)] = None,
    network: Annotated[str, typer.Option(help="usbyte-2/4/8, 10gbe-8, 'ALPHA,BETA', "
                                         "'ring|tree|nccl:BW,LAT', 'topology:PRESET' or a "
                                         "fitted network file (.yaml/.json).")] = "usbyte-8",
    in_flight: Annotated[int, typer.Option(help="All-reduces the network carries at once, "
                                           "sharing bandwidth (1: serial).")] = 1,
    device: Annotated[str, typer.Option(help=", ".join(DEVICES) + " (calibrated: "
                                        + ", ".join(CALIBRATED) + ").")] = "v100-fp32",
    efficiency: Annotated[float | None, typer.Option(
        help="Fraction of peak FLOP/s achieved (default: calibrated, or 0.5).")] = None,
    backward_ratio: Annotated[float, typer.Option(help="Backward time / forward time.")] = 2.0,
    batch_size: Annotated[int, typer.Option(help=f"Samples per worker (1..{MAX_BATCH}).")] = 32,
    policy: Annotated[str, typer.Option(help="Policies, comma-separated: "
                                        + ", ".join(POLICIES) + " (ours = dlsched)")]
    = ",".join(POLICIES),
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON rows.")] = False,
    csv: Annotated[Path | None, typer.Option(help=CSV_HELP)] = None,
    trace: Annotated[Path | None, typer.Option(help=TRACE_HELP)] = None,
    plot: Annotated[Path | None, typer.Option(help=PLOT_HELP)] = None,
) -> None:
    """Schedule one data-parallel iteration's gradient all-reduces under each policy.

    Prints one row per policy (times in ms; speedup = WFBP time / policy time); --json prints
    the rows as JSON. Writes, when asked: --csv (rows), --trace (one Chrome-trace file, one
    process per policy), --plot (PNG, a panel per policy).
    """
    outputs = Outputs(json_out, csv, trace, plot)
    names = parse_names(policy, POLICIES, "--policy")
    IN_FLIGHT.check(in_flight, "in-flight")
    BATCH.check(batch_size, "batch-size")
    RATIO.check(backward_ratio, "backward-ratio")
    if efficiency is not None:
        FRACTION.check(efficiency, "efficiency")
    compute: ComputeModel = device_compute(device, efficiency, backward_ratio)
    comm, workers = _network(network, workers)
    problem = problem_from_model(_load_model(model, profile), compute, batch_size, comm,
                                 in_flight)
    runs = names if "wfbp" in names else [*names, "wfbp"]
    progress = progress_bar("scheduling policies", json_out)
    by_name = {name: run_dataparallel(problem, name) for name in progress(runs, len(runs))}
    results = [by_name[name] for name in names]
    wfbp = by_name["wfbp"].time_s
    rows = [r.row() | {"workers": workers, "network": comm.name or network,
                       "in_flight": r.plan.in_flight, "settings": r.plan.settings,
                       "speedup_vs_wfbp": wfbp / r.time_s} for r in results]
    shown = f"{workers} workers" if workers is not None else "workers as measured"
    if not json_out:
        render_table(rows, COLUMNS, f"{problem.model} data-parallel iteration (backward + next "
                     f"forward), {shown}, network {comm.name or network}, up to "
                     f"{in_flight} all-reduce(s) in flight, {device}; speedup = WFBP time / "
                     "policy time", console)
    outputs.timelines([(r.plan.policy, f"{problem.model}, {shown}, {network}: {r.plan.policy}",
                        r.timeline) for r in results], color_by="kind")
    outputs.rows(rows)


# Policy columns of the reproduction table and their short headers (* = tuned variant).
CASE_POLICIES = {"wfbp": "WFBP", "mgwfbp": "MG-WFBP", "ddp": "DDP", "ddp-tuned": "DDP*",
                 "horovod": "Hvd", "horovod-tuned": "Hvd*", "bytescheduler": "BS",
                 "bytescheduler-tuned": "BS*", "usbyte": "USB", "usbyte-tuned": "USB*",
                 "dlsched": "dlsched"}


def _ms(value: float) -> str:
    return f"{value * 1e3:.1f}"


def _case_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    table = []
    for (model, cluster, cost_model), case in usbyte.cases(rows).items():
        first = case["wfbp"]
        table.append({"model": model, "cluster": cluster,
                      "cost_model": "ref" if cost_model == "reference" else "size",
                      "bound_s": first["bound_s"], "cap": first["cap"],
                      **{name: case[name]["time_s"] for name in CASE_POLICIES},
                      "usbyte_vs_wfbp": case["usbyte-tuned"]["speedup_vs_wfbp"],
                      "best_over_bound": first["best_over_bound"],
                      "why": usbyte.explain(case)})
    return table


TUNED_SHOWN = ("bytescheduler", "ddp-tuned", "horovod-tuned", "bytescheduler-tuned",
               "usbyte-tuned")


def _settings_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"model": model, "cluster": cluster,
             "cost_model": "ref" if cost_model == "reference" else "size",
             **{name: case[name]["settings"] for name in TUNED_SHOWN}}
            for (model, cluster, cost_model), case in usbyte.cases(rows).items()]


def reproduce_usbyte(
    models: Annotated[str, typer.Option(help="Models, comma-separated.")]
    = ",".join(usbyte.MODELS),
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
    csv: Annotated[Path | None, typer.Option(help=CSV_HELP)] = None,
    executor: ExecutorOption = "process",
    workers: WorkersOption = None,
    address: AddressOption = None,
    db: DbOption = None,
    resume: ResumeOption = False,
) -> None:
    """US-Byte's claims next to our reproduction: every policy at shipped defaults and tuned,
    8 nodes (10 GbE, 25 Gb) and 128 GPUs, V100 FP32, both all-reduce cost models.

    Prints a table per model (times in ms), explanations and the paper's claims beside ours;
    --json prints {"rows", "summary"}; --csv writes the rows."""
    names = parse_names(models, model_names(), "--models")
    outputs = Outputs(json_out, csv)
    rows = reproduction_rows("usbyte", usbyte.default_scenarios(names), usbyte.run_scenario,
                             executor, workers, address, db, resume, json_out)
    summary = usbyte.summarize(rows)
    if not json_out:
        table = _case_rows(rows)
        for name in names:
            part = [row for row in table if row["model"] == name]
            render_table(part, [
                Column("cluster", "cluster", justify="left"),
                Column("cost_model", "costs", justify="left"), Column("bound_s", "bound", _ms),
                *(Column(key, header, _ms) for key, header in CASE_POLICIES.items()),
                Column("usbyte_vs_wfbp", "USB*/WFBP", as_ratio),
                Column("best_over_bound", "best/bnd", as_ratio)],
                f"{name}: iteration time per policy (ms); cap on US-Byte/WFBP 1 + "
                f"T_f/(T_b+T_f) = {part[0]['cap']:.3f}", console)
        render_table(_settings_rows(rows), [
            Column("model", "model", justify="left"), Column("cluster", "cluster", justify="left"),
            Column("cost_model", "costs", justify="left"),
            *(Column(name, CASE_POLICIES[name], justify="left") for name in TUNED_SHOWN)],
            "Knob values: shipped ByteScheduler (credit auto-tuned) and every tuned variant "
            "(same grid, same exhaustive search; sizes in MiB/KiB, times in ms)", console)
        console.print("Hvd = Horovod, BS = ByteScheduler, USB = US-Byte; no star: shipped "
                      "defaults, * = tuned on the shared grid. costs: ref = one alpha-beta per "
                      "message, serial network; size = faster of tree/ring per size, 4 "
                      "all-reduces in flight.", highlight=False)
        render_table(table, [Column("model", "model", justify="left"),
                             Column("cluster", "cluster", justify="left"),
                             Column("cost_model", "costs", justify="left"),
                             Column("why", "why the speedup differs from the paper",
                                    justify="left")], "Explanations", console)
        render_table(_claims(summary), [
            Column("claim", "claim", justify="left"), Column("paper", "paper", justify="left"),
            Column("ours", "ours", justify="left")], "US-Byte paper vs this reproduction",
            console)
    outputs.rows(rows, {"summary": summary} if json_out else None)


def _claims(summary: dict[str, Any]) -> list[dict[str, str]]:
    return [
        {"claim": "US-Byte over WFBP", "paper": "up to 1.56x",
         "ours": f"up to {summary['usbyte_over_wfbp_max']:.2f}x default, "
                 f"{summary['usbyte_tuned_over_wfbp_max']:.2f}x tuned; cap "
                 f"{summary['cap_max']:.2f}x (1 + T_f/(T_b+T_f))"},
        {"claim": "US-Byte over ByteScheduler", "paper": "up to 1.26x",
         "ours": f"up to {summary['usbyte_over_bytescheduler_max']:.2f}x vs shipped "
                 f"ByteScheduler, {summary['usbyte_tuned_over_bytescheduler_tuned_max']:.2f}x "
                 "tuned vs tuned"},
        *({"claim": f"US-Byte (tuned) vs DDP, {kind} cost model", "paper": "-",
           "ours": f"{span['min']:.2f}x to {span['max']:.2f}x (speedup; < 1 = slower)"}
          for kind, span in summary["usbyte_over_ddp"].items()),
        {"claim": "128 GPUs, over the state of the art", "paper": "up to 1.69x",
         "ours": "see the 128-GPU rows: fusing baselines (DDP, Horovod) and dlsched win"},
        {"claim": "best policy / lower bound", "paper": "-",
         "ours": f"mean {summary['best_over_bound_mean']:.3f}, max "
                 f"{summary['best_over_bound_max']:.3f}"},
    ]


def register(app: typer.Typer, reproduce: typer.Typer) -> None:
    """Add this module's commands to the CLI."""
    app.command()(dataparallel)
    reproduce.command("usbyte")(reproduce_usbyte)
