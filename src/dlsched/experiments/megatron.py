"""Megatron-LM's weak-scaling runs (Narayanan et al., SC 2021, Table 1) priced by dlsched.

Published: GPT models from 1.7B parameters on 32 A100s to 1T on 3072, sequence 2048,
vocabulary 51,200, mixed precision with full activation recomputation, 137-163 TFLOP/s per GPU
counted with the paper's Eq. 3, ``96 B s l h^2 (1 + s / 6h + V / 16 l h)`` FLOP per iteration
(the forward counted four times: forward, recomputation, and a backward of twice the forward).
Each row's configuration (TP, PP, microbatch, layers per virtual stage of the interleaved
schedule) is that of Megatron-LM's ``examples/sc21/run_table_1.sh``; DP = GPUs / (TP x PP).

dlsched prices Megatron's configuration with the pipeline simulator on a DGX A100 cluster
(8 GPUs per server, NVLink 300 GB/s per direction, one 200 Gb/s HDR NIC per GPU): the
calibrated ``a100`` preset in fp16 (Megatron's fp16 weights, no autocast casts) prices every
op of the Megatron-style zoo GPT at the per-GPU shapes of its TP degree (no sequence
parallelism in 2021: norms, dropout and residual additions repeated on every GPU of a group),
the TP all-reduces block the GPUs (priced as NCCL's tuner prices them, ``collectives.nccl``,
as the job evaluator prices them), the data-parallel all-reduce of the 16-bit gradients runs
after the last backward with Megatron's ``local`` DDP, and in DDP's buckets overlapping the
backward for the four rows run with ``torch`` DDP; each microbatch's gradients are added to the
accumulated ones by a pass of their own (``job.grad_accumulation``, ``separate``: the code of
the paper's time, NVIDIA/Megatron-LM aed2f75, keeps fp16 gradients without
``--accumulate-allreduce-grads-in-fp32``, which the scripts do not pass, and fused no
accumulation into the GEMMs before 83b1e42 of 2022-02-13); the optimizer step is left out
(under 1% of these iterations). dlsched's own plan comes from the job-level planner
(``dlsched plan``, ``job.search``) over the same GPUs and batch, and its speedup is over
Megatron's configuration priced by that planner's evaluator, so it compares like with like.
A reproduction module (``experiments.reproduction``) whose ``Options`` are the rows, the
largest row dlsched plans and the GPU.

Why this prices through the pipeline simulator and not the job evaluator (issue 47): the same
ten rows are in the ledger (ledger/data/sc21.yaml) and ``dlsched validate`` prices them through
the job evaluator, the path ``dlsched plan`` runs. This reproduction is the other, independent
path: the pipeline domain's event simulation of the zoo model's op graph on a device graph (what
the INFOCOM planner and its baselines are scored with). Keeping both checks that the two
domains price a Megatron configuration alike; routing this one through the job evaluator too
would leave the simulator unchecked on any published run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlsched.collectives.nccl import nccl_node
from dlsched.hardware.device_graph import cluster_graph
from dlsched.hardware.gpu import get_gpu
from dlsched.job.compute.grad_accumulation import accumulation_bytes
from dlsched.models.compute import CalibratedCompute, calibrated
from dlsched.models.zoo import gpt_model
from dlsched.pipeline.chains.calibrated_chain import calibrated_chain
from dlsched.pipeline.chains.memory_model import MemoryModel
from dlsched.pipeline.chains.problem import PipelineProblem
from dlsched.pipeline.planners.grid import stage_groups
from dlsched.pipeline.plans.plan import PipelinePlan, Stage
from dlsched.pipeline.plans.schedules import interleaved_orders, one_f_one_b_orders
from dlsched.pipeline.simulation.simulate import simulate
from dlsched.report import Column
from dlsched.report.columns import percents, standard
from dlsched.report.sections import Paragraph, Section, Table
from dlsched.report.tables import fixed, in_percent

NAME = "megatron"
SEQ, VOCAB = 2048, 51200
GPUS_PER_SERVER, GPU_MEMORY = 8, 80 * 2**30
NVLINK, NIC = (300e9, 5e-6), (25e9, 5e-6)
# The TP all-reduces as NCCL's tuner prices them on a DGX A100 (``collectives.nccl``: the
# NVLinks credited 240 GB/s), as the job evaluator prices the ledger's rows: the a100 GEMM fit
# on FITTED_ROW runs through this path, so both price TP alike.
NCCL_NODE = nccl_node("dgx-a100", "a100", NVLINK[0], NIC[0], nvswitch=True)
# The row the a100 preset's 16-bit GEMM efficiency was fitted to; every other row is held out.
FITTED_ROW = "gpt-39.1b"
# The runs' gradients (module docstring): fp16, added up over the microbatches outside the GEMMs.
GRAD_PRECISION = "fp16"
GRAD_ACCUMULATION = "separate"
SOURCE = ("Narayanan et al., 'Efficient Large-Scale Language Model Training on GPU Clusters "
          "Using Megatron-LM', SC 2021, Table 1; configurations from Megatron-LM "
          "examples/sc21/run_table_1.sh")


@dataclass(frozen=True)
class MegatronRow:
    """One row of Table 1 and its run configuration (``per_virtual``: layers per virtual
    stage of the interleaved schedule, None without interleaving)."""

    params_b: float
    heads: int
    hidden: int
    layers: int
    tp: int
    pp: int
    gpus: int
    batch: int
    published_tflops: float
    microbatch: int
    per_virtual: int | None = None
    torch_ddp: bool = False

    @property
    def name(self) -> str:
        """``gpt-145.6b``."""
        return f"gpt-{self.params_b:g}b"

    @property
    def dp(self) -> int:
        """Data-parallel degree."""
        return self.gpus // (self.tp * self.pp)

    @property
    def chunks(self) -> int:
        """Model chunks (virtual stages) per pipeline rank."""
        return 1 if self.per_virtual is None else self.layers // self.pp // self.per_virtual

    @property
    def num_microbatches(self) -> int:
        """Microbatches per iteration over all replica pipelines."""
        return self.batch // self.microbatch

    def iteration_flops(self) -> float:
        """FLOP per iteration by the paper's Eq. 3 (full recomputation counted)."""
        b, s, depth, h = self.batch, SEQ, self.layers, self.hidden
        return 96.0 * b * s * depth * h * h * (1 + s / (6 * h) + VOCAB / (16 * depth * h))


ROWS = (
    MegatronRow(1.7, 24, 2304, 24, 1, 1, 32, 512, 137, 16, torch_ddp=True),
    MegatronRow(3.6, 32, 3072, 30, 2, 1, 64, 512, 138, 16, torch_ddp=True),
    MegatronRow(7.5, 32, 4096, 36, 4, 1, 128, 512, 142, 16, torch_ddp=True),
    MegatronRow(18.4, 48, 6144, 40, 8, 1, 256, 1024, 135, 8, torch_ddp=True),
    MegatronRow(39.1, 64, 8192, 48, 8, 2, 512, 1536, 138, 4),
    MegatronRow(76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140, 2, 5),
    MegatronRow(145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148, 2, 5),
    MegatronRow(310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155, 1, 3),
    MegatronRow(529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163, 1, 1),
    MegatronRow(1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163, 1),
)


def a100_compute(device: str = "a100") -> CalibratedCompute:
    """The calibrated GPU in fp16 without autocast casts (Megatron keeps fp16 weights)."""
    return calibrated(device, "fp16", autocast=False)


def row_problem(row: MegatronRow, compute: CalibratedCompute,
                recompute: tuple[str, ...] = ("full",)) -> PipelineProblem:
    """The row's model on its GPUs: a DGX A100 cluster whose GPUs run at the GEMM rate of
    ``compute`` (the calibrated chain's time unit)."""
    model = gpt_model(row.name, row.hidden, row.layers, row.heads, SEQ, VOCAB, dtype_bytes=2)
    rate = compute.gpu.kind_rate("gemm", compute.precision)
    # 2021: no sequence parallelism
    memory = MemoryModel("fp16", GRAD_PRECISION, sequence_parallel=False)
    grad_bytes = memory.grad_bytes
    added = accumulation_bytes(GRAD_ACCUMULATION, "fp16", grad_bytes) / grad_bytes
    chain = calibrated_chain(model, row.microbatch, compute, rate, memory, heads=row.heads,
                             seq=SEQ, accumulation_per_byte=added)
    graph = cluster_graph(row.gpus // GPUS_PER_SERVER, GPUS_PER_SERVER, rate, GPU_MEMORY,
                          NVLINK, NIC)
    return PipelineProblem(chain, graph, row.num_microbatches, recompute, nccl=NCCL_NODE)


def megatron_plan(problem: PipelineProblem, row: MegatronRow) -> PipelinePlan:
    """Megatron's own configuration: equal layers per (virtual) stage, the embedding on the
    first and the head on the last, TP groups of ``row.tp`` GPUs, DP replicas round-robin,
    full recomputation, 1F1B or interleaved 1F1B."""
    sub = problem.tensor(row.tp).under("full")
    v, per_stage = row.chunks, row.layers // (row.pp * row.chunks)
    groups = stage_groups(row.pp, row.dp, "pp-outer")
    last = sub.chain.num_blocks
    stages = []
    for index in range(row.pp * v):
        first = 1 + index * per_stage
        stages.append(Stage(0 if index == 0 else first,
                            last if index == row.pp * v - 1 else first + per_stage,
                            groups[index % row.pp]))
    stages_t = tuple(stages)
    n, m = sub.graph.num_devices, problem.num_microbatches
    orders = (interleaved_orders(v, m, tuple(groups), n) if v > 1
              else one_f_one_b_orders(stages_t, n, m))
    schedule = "interleaved" if v > 1 else "1f1b"
    notes = {"schedule": schedule, "pp": row.pp, "dp": row.dp, "tp": row.tp,
             "recompute": "full", "mapping": "pp-outer", "chunks": v}
    return PipelinePlan("megatron", stages_t, orders, m, notes, "full", row.tp,
                        ddp_buckets=row.torch_ddp)


def reproduce_row(row: MegatronRow, compute: CalibratedCompute,
                  plan_ours: bool) -> dict[str, Any]:
    """One row: Megatron's configuration simulated, and dlsched's plan when ``plan_ours``."""
    problem = row_problem(row, compute)
    sim = simulate(problem, megatron_plan(problem, row))
    flops = row.iteration_flops()
    predicted = flops / (sim.iteration_s * row.gpus) / 1e12
    peak = compute.peak_flops
    out: dict[str, Any] = {
        "model": row.name, "gpus": row.gpus, "tp": row.tp, "pp": row.pp, "dp": row.dp,
        "chunks": row.chunks, "microbatch": row.microbatch, "global_batch": row.batch,
        "published_tflops_per_gpu": row.published_tflops,
        "predicted_tflops_per_gpu": predicted,
        "error": predicted / row.published_tflops - 1,
        "iteration_s": sim.iteration_s,
        "mfu": _model_flops(row) / (sim.iteration_s * row.gpus * peak),
        "hfu": predicted * 1e12 / peak,
        "fitted": row.name == FITTED_ROW, "ours": None}
    if plan_ours:
        out["ours"] = _our_plan(row, compute.gpu.name)
    return out


def _model_flops(row: MegatronRow) -> float:
    """Model FLOP per iteration without recomputation (3/4 of Eq. 3): MFU's numerator."""
    return 0.75 * row.iteration_flops()


def _our_plan(row: MegatronRow, device: str) -> dict[str, Any]:
    """dlsched's plan of the row's GPUs and batch by the job planner (``dlsched plan``'s
    search over TP, PP, DP, chunks, schedule, recomputation, sequence parallelism and ZeRO),
    and its speedup over Megatron's configuration priced by the same evaluator."""
    import time

    from dlsched.job.cluster import load_cluster
    from dlsched.job.evaluation.evaluate import Job, evaluate
    from dlsched.job.execution import Execution
    from dlsched.job.model_spec import bundled_specs
    from dlsched.job.run_settings import RunSettings
    from dlsched.job.search import SPACES, search

    job = Job(bundled_specs()[row.name], load_cluster("dgx-a100", row.gpus, device))
    run = RunSettings("fp16", dp_policy="ddp" if row.torch_ddp else "none", attention="unfused",
                      grad_reduce=GRAD_PRECISION, grad_accumulation=GRAD_ACCUMULATION)
    theirs = evaluate(job, Execution(row.tp, row.pp, row.dp, row.microbatch, row.batch,
                                     row.chunks, "interleaved" if row.chunks > 1 else "1f1b",
                                     "full", run=run))
    start = time.process_time()
    found = search(job, Execution.searching(global_batch=row.batch, run=run),
                   SPACES["dlsched"]).best
    layout = found.layout
    return {"schedule": layout.schedule, "pp": layout.pp, "chunks": layout.chunks,
            "dp": layout.dp, "tp": layout.tp, "recompute": layout.recompute,
            "sequence_parallel": layout.sequence_parallel, "zero": layout.zero,
            "microbatch": layout.microbatch_size, "iteration_s": found.iteration_s,
            "mfu": found.mfu, "hfu": found.hfu, "megatron_iteration_s": theirs.iteration_s,
            "speedup": theirs.iteration_s / found.iteration_s,
            "planning_s": time.process_time() - start}


ROW_NAMES = tuple(row.name for row in ROWS)


@dataclass(frozen=True)
class Options:
    """The rows to price (names, ``ROW_NAMES`` order), dlsched's own plan only for rows of at
    most ``max_plan_gpus`` GPUs (planning thousands of GPUs takes too long to run here), on
    ``device``."""

    rows: tuple[str, ...] = ROW_NAMES
    max_plan_gpus: int = 32
    device: str = "a100"


@dataclass(frozen=True)
class Scenario:
    """One row of Table 1 (by name) on ``device``, with dlsched's own plan when ``plan_ours``."""

    row: str
    plan_ours: bool
    device: str = "a100"


def scenarios(options: Options | None = None) -> list[Scenario]:
    """The options' rows, each planned by dlsched when it has few enough GPUs."""
    chosen = options or Options()
    by_name = {row.name: row for row in ROWS}
    return [Scenario(name, by_name[name].gpus <= chosen.max_plan_gpus, chosen.device)
            for name in chosen.rows]


def run_scenario(scenario: Scenario) -> list[dict[str, Any]]:
    """The row's result (``reproduce_row``) as the one row of this scenario."""
    row = next(row for row in ROWS if row.name == scenario.row)
    return [reproduce_row(row, a100_compute(scenario.device), scenario.plan_ours)]


def notes(rows: list[dict[str, Any]], max_plan_gpus: int) -> list[str]:
    """Per row: the row the GEMM efficiency was fitted to, a prediction above the best
    published utilization of the A100 (Megatron's or dlsched's plan), a plan not run."""
    limit = get_gpu("a100").spec.best_published_utilization or 1.0
    said = []
    for r in rows:
        ours = r["ours"]
        if r["fitted"]:
            said.append(f"{r['model']}: the row the a100 GEMM efficiency was fitted to; the "
                        "other rows are held out")
        if r["hfu"] > limit:
            said.append(f"{r['model']}: Megatron's configuration predicted at {r['hfu']:.0%} "
                        f"of peak (recomputation counted), above the best published "
                        f"{limit:.0%}: the model over-predicts this row by {r['error']:.1%}")
        if not ours:
            said.append(f"{r['model']}: dlsched's own plan not run ({r['gpus']} GPUs > "
                        f"--max-plan-gpus {max_plan_gpus}: planning this many GPUs takes "
                        "too long here)")
        elif ours["hfu"] > limit:
            said.append(f"{r['model']}: dlsched's plan runs {ours['hfu']:.0%} of peak (FLOP "
                        f"executed), above the best published {limit:.0%} on this GPU: the "
                        "model, not a measurement, says it is faster")
    return said


def document(rows: list[dict[str, Any]], options: Options | None = None) -> dict[str, Any]:
    """What ``--json`` prints: the ``notes`` on the rows, then the rows."""
    return {"notes": notes(rows, (options or Options()).max_plan_gpus), "rows": rows}


COLUMNS = [
    Column("model", "model", justify="left"), Column("gpus", "GPUs"),
    Column("config", "TP x PP x DP, mb, v", justify="left"),
    Column("published_tflops_per_gpu", "published (TFLOP/s/GPU)", fixed(0)),
    Column("predicted_tflops_per_gpu", "predicted (TFLOP/s/GPU)", fixed(1)),
    *percents(in_percent(1, signed=True), error="error"),
    *standard("mfu"),
    Column("ours_config", "dlsched plan", justify="left"),
    *percents(in_percent(1), ours_mfu="dlsched MFU"),
    Column("speedup", "speedup (x)", fixed(2)),
]


def _table_row(r: dict[str, Any]) -> dict[str, Any]:
    """A row with Megatron's configuration and dlsched's plan as text."""
    ours = r["ours"] or {}
    return {**r, "config": f"{r['tp']}x{r['pp']}x{r['dp']}, {r['microbatch']}, {r['chunks']}",
            "ours_config": (f"{ours['schedule']} {ours['tp']}x{ours['pp']}x{ours['dp']} "
                            f"{ours['recompute']}") if ours else None,
            "ours_mfu": ours.get("mfu"), "speedup": ours.get("speedup")}


def sections(document: dict[str, Any], options: Options | None = None) -> list[Section]:
    """Table 1 beside our prediction and plan, the source, then the notes."""
    return [Table([_table_row(r) for r in document["rows"]], COLUMNS,
                  "Megatron-LM SC21 Table 1 on the calibrated a100 preset (TFLOP/s per GPU by "
                  "the paper's Eq. 3, recomputation counted; MFU without it; speedup = "
                  "Megatron's time / dlsched plan's, same model)"),
            Paragraph(f"source: {SOURCE}"),
            *(Paragraph(f"note: {note}") for note in document["notes"])]
