"""Each ledger row priced by the job evaluator (``dlsched.job``), configured exactly as published.

``job_and_layout(row)`` maps a row to the ``Job`` and ``Execution`` that ``dlsched plan`` would
evaluate, each field of the row's ``parallel`` section under its own name (``run_settings``:
the run settings, ``job.run_settings``; ``execution``: the layout; only what the section states
its own way, ``schema.PARALLEL_ONLY``, is turned into the evaluator's terms): the
row's model (a ``job.model_spec.Model`` as the row states it, no copy), one node preset
and one compute preset per GPU
(``GPU_PRESETS``: no per-row or per-source factor), its TP / CP / PP / DP and EP (``Execution.cp``
with the row's ``cp_algorithm``, ring or all-to-all, priced by ``job.context_parallel``;
``Execution.ep`` over the MoE layers that ``job.moe_costs`` prices), model chunks (interleaved 1F1B
when more than one) and the layers' split over them (``Execution.pipeline_split``), microbatch,
global batch, recomputation (TorchTitan's per-op ``selective-op`` as ``job.op_checkpoint``
prices it; Megatron-Core's ``--recompute-modules`` as ``job.compute.module_recompute`` prices
them), sequence parallelism, ZeRO stage
(FSDP is ZeRO 3) and 16-bit format; the shape as published (FFN width, KV heads, SwiGLU,
biases, RMSNorm, rotary or learned positions, tied or untied embeddings; for a
mixture-of-experts model its experts, top-k and capacity factor, the router taken as balanced:
``router_imbalance`` 1.0, which a row states by forced balancing or a capacity factor of at
most 1, the busiest expert then capped at the mean); gradients overlap the backward in DDP's
buckets (``dp_policy`` ``ddp``) when the row says the run overlapped them (``dp_grad_reduce``),
and are all-reduced after the last backward otherwise (Megatron-LM's ``local`` DDP, ``none``).
A row the evaluator cannot express raises ``ConfigError`` with every reason (the data's own
``reason`` alone where it has one), and so does a row whose network differs from its node
preset's (inter-node Gb/s per GPU); what the evaluator itself refuses (``job.evaluate``'s
checks: e.g. MoE layers under CP, layers that do not split) comes back from ``predict_row`` as
the row's reason.

``predict_row(row)`` returns one ``Prediction`` per published metric, in the metric's published
unit (``schema.METRIC_UNITS``): ``iteration_s`` (s), ``tflops_per_gpu`` (the FLOP executed,
recomputation included: SC21's Eq. 3 convention), ``mfu`` and ``hfu`` (fractions of the 16-bit
dense peak), ``tokens_per_s_per_gpu`` (global batch x sequence / iteration / GPUs) and
``memory_gib_per_gpu`` (GiB, the counter the source's figure reads: ``ledger.memory``).
``scored`` marks the one time-derived metric of the row that the
statistics count (the first the row publishes; MFU and HFU published beside an iteration time
follow from it and would count the same error twice) and the memory metric (its own family).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dlsched.errors import ConfigError
from dlsched.experiments.megatron import FITTED_ROW
from dlsched.job.compute.fp8 import FP8_RECIPES
from dlsched.job.compute.module_recompute import modules_recompute
from dlsched.job.evaluation.evaluate import Job, JobResult, check_run, evaluate
from dlsched.job.execution import LAYOUT_FIELDS, Execution
from dlsched.job.run_settings import RunSettings, run_settings_of
from dlsched.ledger.memory import memory_unmodelled, published_memory_gib, sharding_of
from dlsched.ledger.schema import (
    GPU_PRESETS,
    NO_PRESET,
    NOT_OVERLAPPED,
    OVERLAP_SETTINGS,
    LedgerRow,
    Parallelism,
)

# Rows a preset constant was fitted to: their errors are not held out (presets/gpus.yaml,
# a100 ``efficiency.gemm.bf16``: bisected so that SC21's 39.1B row gives its 138 TFLOP/s).
FITTED_ROWS: dict[str, str] = {
    f"sc21-t1-{FITTED_ROW}": "the a100 preset's 16-bit GEMM efficiency was fitted to this row "
                             "(presets/gpus.yaml)",
    "torchtitan-2412-t1-8b-fsdp": "the h100-hbm2e-96gb preset's 16-bit tensor-core fractions "
                                  "were fitted to this row (presets/gpus.yaml)",
    "dgxc-2504-h100-llama3.1-8b-bf16-8gpu": "the h100 preset's 16-bit GEMM efficiency was "
                                            "fitted to this row (presets/gpus.yaml)",
    "megatron-bridge-2511-b200-llama3.1-405b-cp2": "the b200 preset's 16-bit GEMM efficiency "
                                                   "(its FP8 one tied by a ratio) was "
                                                   "fitted to this row (presets/gpus.yaml)",
}
TIME_METRICS = ("iteration_s", "tflops_per_gpu", "mfu", "hfu", "tokens_per_s_per_gpu")
MEMORY_METRICS = ("memory_gib_per_gpu",)
# The predicted iteration's parts (seconds) a record carries (``breakdown``).
EXPOSED_KEYS = ("tp_s", "pp_s", "dp_s", "zero3_s", "optimizer_s", "grad_accumulation_s")
BREAKDOWN_KEYS = ("iteration_s", "compute_s", "bubble_s", *EXPOSED_KEYS)


@dataclass(frozen=True)
class Prediction:
    """One published metric of one row and dlsched's prediction, in the published unit
    (``predicted`` None when the row is unsupported, ``reason`` then says why). ``family``:
    ``time`` or ``memory``; ``held_out`` False for a row a preset was fitted to."""

    row: LedgerRow
    metric: str
    published: float
    predicted: float | None
    reason: str | None
    scored: bool
    held_out: bool
    breakdown: dict[str, float] = field(default_factory=dict)

    @property
    def family(self) -> str:
        """``time`` (iteration time and the rates derived from it) or ``memory``."""
        return "memory" if self.metric in MEMORY_METRICS else "time"

    @property
    def error(self) -> float | None:
        """predicted / published - 1 (None when not predicted)."""
        return None if self.predicted is None else self.predicted / self.published - 1


def job_and_layout(row: LedgerRow) -> tuple[Job, Execution]:
    """The evaluator's inputs for ``row`` (module docstring); ConfigError with the reason
    when the row cannot be expressed."""
    if not row.supported:
        raise ConfigError(f"{row.id}: {row.reason}")
    hw, shape, par = row.hardware, row.model, row.parallel
    reasons = []
    if hw.gpu not in GPU_PRESETS:
        why = f" ({NO_PRESET[hw.gpu]})" if hw.gpu in NO_PRESET else ""
        reasons.append(f"hardware.gpu: no dlsched preset for {hw.gpu}{why}; accepted: "
                       + ", ".join(GPU_PRESETS))
    if par.precision == "fp8" and par.fp8_recipe is None:
        reasons.append("parallel.fp8_recipe: not published (how the run scaled its FP8 "
                       "tensors); accepted: " + ", ".join(FP8_RECIPES))
    if shape.experts and shape.router_balance == "learned" and \
            (shape.capacity_factor is None or shape.capacity_factor > 1):
        reasons.append("model.router_balance: a learned router without a capacity factor <= 1: "
                       "the busiest expert's share of the tokens (the evaluator's "
                       "router_imbalance) is not published")
    if reasons:
        raise ConfigError(f"{row.id}: " + "; ".join(reasons))
    missing = [name for name in ("microbatch_size", "recompute", "sequence_parallel", "chunks",
                                 "zero", "attention")
               if getattr(par, name) is None]
    if par.cp > 1 and par.cp_algorithm is None:
        missing.append("cp_algorithm")
    if shape.experts and shape.router_balance is None:
        missing.append("router_balance")
    if missing:
        raise ConfigError(f"{row.id}: parallel: not published: {', '.join(missing)}")
    try:  # the section's own System (schema.Hardware.system), no copy of its fields here
        system = hw.system()
    except ConfigError as error:
        raise ConfigError(f"{row.id}: {error}") from None
    job = Job(shape, system)
    layout = execution(par, run_settings(row))  # nvlink_domain None: whole domains
    check_run(job, layout.run)
    return job, layout


def run_settings(row: LedgerRow) -> RunSettings:
    """The run settings of ``row``: every field its ``parallel`` section names as a run
    setting (``job.run_settings.RUN_FIELDS``) as the row has it, and those the section states
    its own way (``schema.PARALLEL_ONLY``): each overlap of ``overlap`` as the setting it
    turns on (``schema.OVERLAP_SETTINGS``; a row without ``pp_p2p`` ran its pipeline
    transfers blocking), ``torch_compile`` as ``compile`` and ZeRO 3's ``sharding`` by the
    row's framework (``ledger.memory.sharding_of``)."""
    par = row.parallel
    turned_on = dict(OVERLAP_SETTINGS[name] for name in par.overlap if name in OVERLAP_SETTINGS)
    return run_settings_of(par, **{**NOT_OVERLAPPED, **turned_on}, compile=par.torch_compile,
                           sharding=sharding_of(row))


def execution(par: Parallelism, run: RunSettings) -> Execution:
    """The layout of a ``parallel`` section: every layout field it has
    (``job.execution.LAYOUT_FIELDS``) as it has it, but the values it states its own way: the
    schedule (not a field of the section) by its ``chunks``, interleaved 1F1B when more than
    one; ``zero`` ``fsdp`` as ZeRO 3; a ``cp_algorithm`` left empty (``cp`` 1) as ring;
    ``recompute`` ``modules`` with its ``recompute_modules`` as ``modules:a,b``
    (``job.compute.module_recompute``)."""
    named = {name: getattr(par, name) for name in LAYOUT_FIELDS if name in Parallelism.model_fields}
    assert par.chunks is not None  # job_and_layout refuses a row without it
    named.update(schedule="interleaved" if par.chunks > 1 else "1f1b",
                 recompute=(modules_recompute(par.recompute_modules)
                            if par.recompute == "modules" else par.recompute),
                 zero=3 if par.zero == "fsdp" else par.zero,
                 cp_algorithm=par.cp_algorithm or "ring")
    return Execution(**named, run=run)


def metric_value(metric: str, job: Job, result: JobResult) -> float:
    """``metric`` of an evaluated layout in the ledger's published unit."""
    layout = result.layout
    if metric == "tokens_per_s_per_gpu":
        return layout.global_batch * job.spec.seq / result.iteration_s / layout.gpus
    if metric == "memory_gib_per_gpu":
        return result.memory_bytes / 2**30
    if metric not in TIME_METRICS:
        raise ConfigError(f"metric: {metric!r} is not predicted; accepted: "
                          + ", ".join(TIME_METRICS + MEMORY_METRICS))
    return float(getattr(result, metric))


def breakdown(job: Job, result: JobResult) -> dict[str, float]:
    """The predicted iteration split (seconds): the exposed communication, the optimizer step
    and the gradient accumulation outside the GEMMs by kind (``JobResult.exposed``), the
    pipeline bubble (``bubble_s``: the replica without transfers beyond its busiest rank's
    work, both from the evaluation: ``JobResult.quiet_s``, ``busiest_work_s``) and the rest
    (``compute_s``: the busiest rank's compute, what the other parts leave
    of the iteration)."""
    parts = {key: float(result.exposed.get(key, 0.0)) for key in EXPOSED_KEYS}
    parts["bubble_s"] = max(0.0, result.quiet_s - result.busiest_work_s)
    return {"iteration_s": result.iteration_s,
            "compute_s": result.iteration_s - sum(parts.values()), **parts}


def predict_row(row: LedgerRow) -> list[Prediction]:
    """One ``Prediction`` per published metric of ``row`` (module docstring)."""
    try:
        job, layout = job_and_layout(row)
        result = evaluate(job, layout)
        values = {m.metric: published_memory_gib(row, result.memory)
                  if m.metric in MEMORY_METRICS else metric_value(m.metric, job, result)
                  for m in row.measured}
        reason, parts = None, breakdown(job, result)
    except ConfigError as error:
        reason, values, parts = str(error).removeprefix(f"{row.id}: "), {}, {}
    held_out = row.id not in FITTED_ROWS  # the fits are compute constants: memory held out
    first_time = next((m.metric for m in row.measured if m.metric in TIME_METRICS), None)
    unmodelled = reason or memory_unmodelled(row)
    if unmodelled:
        values = {metric: value for metric, value in values.items()
                  if metric not in MEMORY_METRICS}
    return [Prediction(row, m.metric, m.value, values.get(m.metric),
                       unmodelled if m.metric in MEMORY_METRICS else reason,
                       m.metric == first_time or m.metric in MEMORY_METRICS,
                       held_out or m.metric in MEMORY_METRICS, parts)
            for m in row.measured]


def predict_rows(rows: list[LedgerRow]) -> list[Prediction]:
    """Every published metric of ``rows``, in order."""
    return [prediction for row in rows for prediction in predict_row(row)]
