"""``dlsched plan``: one plan for a whole training job (the job-level planner, ``dlsched.job``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dlsched.cli.options import Outputs, announce, console
from dlsched.cli.schema_options import Given, options_from
from dlsched.errors import ConfigError
from dlsched.job.scenario import PlanScenario
from dlsched.report import Column, render_table
from dlsched.report.columns import seconds, standard, text
from dlsched.report.tables import fixed, in_percent

FIELD_OPTIONS = {name: "--" + name.replace("_", "-") for name in PlanScenario.model_fields}
"""Each scenario field's option (``options_from``'s ``--field-name``): a refusal the domain
names by field (``ConfigError.field``: ``load_spec``'s model, ``load_cluster``'s cluster, gpus
and gpu, ``job.refusals``, the evaluator's ``Execution`` and ``RunSettings`` fields, the
``execution`` file) says the option instead in the plan's one line."""

COLUMNS = [*text("planner"), Column("collective_policy", "collectives", justify="left"),
           *text("layout"),
           *seconds(iteration_s="iteration"), Column("iteration_90", "90% (s)"),
           Column("tflops_per_gpu", "TFLOP/s/GPU", fixed(1)),
           *standard("mfu"), Column("mfu_90", "90% (%)"),
           Column("memory_gib", "memory (GiB)", fixed(1)), Column("memory_90", "90% (GiB)"),
           *seconds(exposed_tp_s="TP", exposed_pp_s="PP", exposed_dp_s="DP", exposed_cp_s="CP",
                    exposed_ep_a2a_s="A2A", exposed_zero3_s="ZeRO-3"),
           Column("speedup_vs_best_baseline", "vs best baseline", lambda v: f"{v:.3f}x")]
WHEN_USED = ("exposed_cp_s", "exposed_ep_a2a_s", "exposed_zero3_s")
"""Columns of communication only some layouts have: shown when a row exposes any."""
TIME_TO_TRAIN = [*text("planner", "layout"),
                 *seconds(iteration_mean_s="mean iteration", iteration_p95_s="p95 iteration"),
                 Column("ttt_days", "days", fixed(1)),
                 Column("gpu_hours", "GPU-hours (M)", lambda v: f"{v / 1e6:.2f}"),
                 Column("interruptions", "interruptions", fixed(0)),
                 Column("goodput", "goodput (%)", in_percent(1)),
                 Column("checkpoint_interval_s", "checkpoint every (min)",
                        lambda v: f"{v / 60:.1f}"),
                 Column("energy_mwh", "MWh", fixed(0)),
                 Column("cost", "cost", lambda v: f"{v:,.0f}")]
"""The second table, with ``--tokens`` or ``--iterations`` (cost with ``--gpu-hour-price``;
dlsched.goodput)."""


def _span(low: float, high: float | None, scale: float = 1.0, digits: int = 3) -> str:
    """An interval as the table shows it: ``low-high`` (``low-inf`` when unbounded)."""
    top = "inf" if high is None else f"{high * scale:.{digits}f}"
    return f"{low * scale:.{digits}f}-{top}"


def _shown(row: dict[str, object]) -> dict[str, object]:
    """``row`` with its 90% intervals as text, for the table (``job.intervals``)."""
    return {**row, "iteration_90": _span(row["iteration_low_s"], row["iteration_high_s"]),
            "mfu_90": _span(row["mfu_low"], row["mfu_high"], 100, 1),
            "memory_90": _span(row["memory_gib_low"], row["memory_gib_high"], digits=1)}


def _columns(rows: list[dict[str, object]]) -> list[Column]:
    return [column for column in COLUMNS if column.key not in WHEN_USED
            or any(row.get(column.key) for row in rows)]


@options_from(PlanScenario)
def plan(
    given: Given[PlanScenario],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON rows.")] = False,
    csv: Annotated[Path | None, typer.Option(help="Write the rows as CSV.")] = None,
    trace: Annotated[Path | None, typer.Option(help="Chrome trace of each plan's pipeline "
                                               "replica (simulated).")] = None,
    plot: Annotated[Path | None, typer.Option(help="PNG of each plan's replica.")] = None,
    megatron_args: Annotated[bool, typer.Option(
        "--megatron-args", help="Print the Megatron-LM arguments of dlsched's plan.")] = False,
    torchtitan_toml: Annotated[Path | None, typer.Option(
        help="Write a TorchTitan config of dlsched's plan.")] = None,
) -> None:
    """Plan a whole training job: TP x PP x DP, schedule, recomputation, ZeRO; iteration
    time, FLOP rates, memory per GPU and exposed communication, against the baselines."""
    model = given["model"]
    model_input = model if model.lower().endswith((".yaml", ".yml", ".json")) else None
    outputs = Outputs(json_out, csv, trace, plot,
                      {"--torchtitan-toml": (torchtitan_toml, (".toml",))},
                      {"--model": model_input, "--cluster": given["cluster"],
                       "--execution": given["execution"],
                       "--from-torchtitan": given["from_torchtitan"]})
    policies = given.names("collective_policy")
    try:
        report = given.scenario().run(tuple(policies))
        # the exports first: a plan the framework cannot run is refused before any output
        megatron = report.megatron_args() if megatron_args else None
        titan = report.torchtitan_toml() if torchtitan_toml is not None else None
    except ConfigError as error:  # a field's refusal (model, system, scenario, export)
        raise error.named_by(FIELD_OPTIONS) from None
    rows = report.rows
    if not json_out:
        render_table([_shown(row) for row in rows], _columns(rows), f"{report.title} (seconds "
                     "per iteration; memory GiB per GPU; 90% intervals from the ledger; exposed "
                     "communication s)", console)
        if any("ttt_days" in row for row in rows):
            columns = [c for c in TIME_TO_TRAIN if c.key != "cost" or rows[0].get("cost")]
            render_table(rows, columns, "Time to train (dlsched.goodput: failures, checkpoints, "
                         "stragglers; seconds; energy with the PUE)", console)
        for note in report.notes:
            print(f"note: {note}")
    document = {"notes": list(report.notes)}
    if megatron is not None and json_out:  # inside the JSON document, not a line after it
        document["megatron_args"] = report.megatron_document()
    outputs.rows(rows, document)
    if trace is not None or plot is not None:
        outputs.timelines(report.timelines(), "kind")
    if megatron is not None and not json_out:
        print(megatron)
    if titan is not None:
        from dlsched.report import write_text

        write_text(torchtitan_toml, titan)
        announce("TorchTitan config", torchtitan_toml, json_out)


def register(app: typer.Typer, reproduce: typer.Typer) -> None:
    """Add ``plan``."""
    app.command("plan")(plan)
