"""``dlsched plan``: one plan for a whole training job (the job-level planner, ``dlsched.job``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dlsched.cli.options import Outputs, announce, parse_names
from dlsched.report import Column, render_table
from dlsched.report.columns import seconds, standard, text
from dlsched.report.tables import fixed

COLUMNS = [*text("planner"), Column("collective_policy", "collectives", justify="left"),
           *text("layout"),
           *seconds(iteration_s="iteration"),
           Column("tflops_per_gpu", "TFLOP/s/GPU", fixed(1)),
           *standard("mfu"),
           Column("memory_gib", "memory (GiB)", fixed(1)),
           *seconds(exposed_tp_s="TP", exposed_pp_s="PP", exposed_dp_s="DP", exposed_cp_s="CP"),
           Column("speedup_vs_best_baseline", "vs best baseline", lambda v: f"{v:.3f}x")]


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
    attention: Annotated[str, typer.Option(
        help="Attention core kernel: flash (one fused kernel: Megatron-Core's default "
             "--attention-backend auto, TorchTitan's SDPA) | unfused (Megatron-LM 2021: "
             "scores written out, softmax, dropout; what SC21 and Korthikanti et al. ran).")]
    = "flash",
    overlap_param_gather: Annotated[bool, typer.Option(
        help="ZeRO 1-2: the weights' all-gather overlaps the next forward (Megatron-LM "
             "--overlap-param-gather).")] = False,
    tp_comm_overlap: Annotated[bool, typer.Option(
        help="With sequence parallelism: TP collectives overlap their GEMMs (Megatron-Core "
             "--tp-comm-overlap, Transformer Engine userbuffers).")] = False,
    grad_reduce: Annotated[str, typer.Option(
        help="Gradients reduced and kept as fp32 (Megatron-LM's default main gradients) | "
             "bf16 (--grad-reduce-in-bf16; bf16 training only).")] = "fp32",
    global_batch: Annotated[int, typer.Option(help="Sequences per iteration.")] = 1536,
    tp: Annotated[int | None, typer.Option(help="Tensor-parallel degree (searched if not "
                                           "given).")] = None,
    cp: Annotated[int | None, typer.Option(help="Context-parallel degree (each sequence "
                                           "split over CP GPUs; searched for long "
                                           "sequences if not given).")] = None,
    cp_algorithm: Annotated[str | None, typer.Option(
        help="Context parallelism's attention: ring (Megatron-Core/TE p2p ring attention) | "
             "all-to-all (DeepSpeed-Ulysses); searched if not given.")] = None,
    seq: Annotated[int | None, typer.Option(help="Sequence length in tokens (overrides the "
                                            "model's).")] = None,
    ep: Annotated[int | None, typer.Option(help="Expert-parallel degree of the MoE layers "
                                           "(1 if not given).")] = None,
    expert_tp: Annotated[int | None, typer.Option(
        help="Tensor-parallel degree of each expert (default: TP, Megatron-Core's "
             "--expert-tensor-parallel-size; 1 = MoE parallel folding, EP over the TP ranks "
             "too); searched with TP and 1 if not given.")] = None,
    pp: Annotated[int | None, typer.Option(help="Pipeline-parallel degree.")] = None,
    dp: Annotated[int | None, typer.Option(help="Data-parallel degree.")] = None,
    chunks: Annotated[int | None, typer.Option(help="Model chunks per pipeline rank "
                                               "(interleaved schedule).")] = None,
    pipeline_split: Annotated[str | None, typer.Option(
        help="Layers over the PP x chunks virtual stages: even | account-embedding | "
             "account-loss | account-embedding-loss (Megatron-Core's "
             "--account-for-embedding/loss-in-pipeline-split: each counted as a layer, the "
             "first/last stage one layer fewer); searched (given layouts: the first accepted) "
             "if not given.")] = None,
    microbatch_size: Annotated[int | None, typer.Option(help="Sequences per microbatch.")]
    = None,
    schedule: Annotated[str | None, typer.Option(help="1f1b | interleaved | gpipe | zb-h1.")]
    = None,
    recompute: Annotated[str | None, typer.Option(
        help="none | selective | full | selective-op (TorchTitan's per-op policy: every "
             "other matmul kept; priced when given, not searched).")] = None,
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
             "sequence_parallel": sequence_parallel, "zero": zero, "cp": cp, "ep": ep,
             "cp_algorithm": cp_algorithm, "expert_tp": expert_tp,
             "pipeline_split": pipeline_split}
    request = api.PlanRequest(model, cluster, gpus, gpu, precision, global_batch, fixed,
                              tuple(policies), dp_policy, baselines, seq, attention,
                              overlap_param_gather, tp_comm_overlap, grad_reduce)
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
