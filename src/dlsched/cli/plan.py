"""``dlsched plan``: one plan for a whole training job (the job-level planner, ``dlsched.job``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dlsched.cli.options import Outputs, announce, parse_names
from dlsched.report import Column, render_table

COLUMNS = [Column("planner", "planner", justify="left"),
           Column("collective_policy", "collectives", justify="left"),
           Column("layout", "layout", justify="left"),
           Column("iteration_s", "iteration (s)", lambda v: f"{v:.3f}"),
           Column("tflops_per_gpu", "TFLOP/s/GPU", lambda v: f"{v:.1f}"),
           Column("mfu", "MFU (%)", lambda v: f"{v * 100:.1f}"),
           Column("memory_gib", "memory (GiB)", lambda v: f"{v:.1f}"),
           Column("exposed_tp_s", "TP (s)", lambda v: f"{v:.3f}"),
           Column("exposed_pp_s", "PP (s)", lambda v: f"{v:.3f}"),
           Column("exposed_dp_s", "DP (s)", lambda v: f"{v:.3f}"),
           Column("speedup_vs_best_baseline", "vs best baseline",
                  lambda v: "" if v is None else f"{v:.3f}x")]


def plan(
    model: Annotated[str, typer.Option(help="A bundled transformer (gpt3-175b, gpt-39.1b, ...) "
                                       "or a spec file (.yaml/.json).")] = "gpt3-175b",
    cluster: Annotated[str, typer.Option(help="Node preset scaled by --gpus (dgx-a100, "
                                         "dgx-h100) or a multi-dimensional topology preset "
                                         "or file (3D-FC_Ring_SW).")] = "dgx-a100",
    gpus: Annotated[int | None, typer.Option(help="GPUs (with a node preset).")] = None,
    gpu: Annotated[str | None, typer.Option(help="GPU compute preset or file (default: the "
                                            "node's; a100 on a topology).")] = None,
    precision: Annotated[str, typer.Option(help="bf16 | fp16 (Megatron's mixed precision: "
                                           "16-bit weights, FP32 master) | autocast.")] = "bf16",
    global_batch: Annotated[int, typer.Option(help="Sequences per iteration.")] = 1536,
    tp: Annotated[int | None, typer.Option(help="Tensor-parallel degree (searched if not "
                                           "given).")] = None,
    pp: Annotated[int | None, typer.Option(help="Pipeline-parallel degree.")] = None,
    dp: Annotated[int | None, typer.Option(help="Data-parallel degree.")] = None,
    chunks: Annotated[int | None, typer.Option(help="Model chunks per pipeline rank "
                                               "(interleaved schedule).")] = None,
    microbatch_size: Annotated[int | None, typer.Option(help="Sequences per microbatch.")]
    = None,
    schedule: Annotated[str | None, typer.Option(help="1f1b | interleaved | gpipe | zb-h1.")]
    = None,
    recompute: Annotated[str | None, typer.Option(help="none | selective | full.")] = None,
    sequence_parallel: Annotated[bool | None, typer.Option(
        "--sequence-parallel/--no-sequence-parallel", help="Megatron sequence parallelism.")]
    = None,
    zero: Annotated[int | None, typer.Option(help="ZeRO stage 0-3 (3 = FSDP).")] = None,
    collective_policy: Annotated[str, typer.Option(
        help="Collective policies, comma-separated: baseline, themis, dlsched (one row "
             "each).")] = "baseline",
    dp_policy: Annotated[str, typer.Option(
        help="How dlsched's plan overlaps gradient reduction with the last backward: none, "
             "ddp, usbyte, dlsched.")] = "usbyte",
    baselines: Annotated[bool, typer.Option(help="Search the baselines' spaces (megatron, "
                                            "megatron-sp, fsdp) too.")] = True,
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
    from dlsched.job import api

    model_input = model if model.lower().endswith((".yaml", ".yml", ".json")) else None
    outputs = Outputs(json_out, csv, trace, plot,
                      {"--torchtitan-toml": (torchtitan_toml, (".toml",))},
                      {"--model": model_input, "--cluster": cluster})
    policies = parse_names(collective_policy, ("baseline", "themis", "dlsched"),
                           "collective-policy")
    fixed = {"tp": tp, "pp": pp, "dp": dp, "chunks": chunks, "microbatch_size": microbatch_size,
             "schedule": schedule, "recompute": recompute,
             "sequence_parallel": sequence_parallel, "zero": zero}
    request = api.PlanRequest(model, cluster, gpus, gpu, precision, global_batch, fixed,
                              tuple(policies), dp_policy, baselines)
    report = api.plan(request)
    rows = report.rows
    if not json_out:
        render_table(rows, COLUMNS, title=f"{report.title} (seconds per iteration; memory "
                     "GiB per GPU; exposed communication s)")
        for note in report.notes:
            print(f"note: {note}")
    outputs.rows(rows, {"notes": list(report.notes)})
    if trace is not None or plot is not None:
        outputs.timelines(report.timelines(), "kind")
    if megatron_args:
        print(report.megatron_args())
    if torchtitan_toml is not None:
        from dlsched.report import write_text

        write_text(torchtitan_toml, report.torchtitan_toml())
        announce("TorchTitan config", torchtitan_toml, json_out)


def register(app: typer.Typer, reproduce: typer.Typer) -> None:
    """Add ``plan``."""
    app.command("plan")(plan)
