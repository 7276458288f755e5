"""Each ledger row priced by the job evaluator (``dlsched.job``), configured exactly as published.

``job_and_layout(row)`` maps a row to the ``Job`` and ``Execution`` that ``dlsched plan`` would
evaluate, the row's ``parallel`` section as the ``Execution`` the schema's validator made of it
at load (``schema.LedgerRow.execution``: each field under its own name, a layout field or a run
setting; only what the section states its own way, ``schema.PARALLEL_ONLY``, mapped): the
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
recomputation included: SC21's Eq. 3 convention), ``model_tflops_per_gpu`` (the model's FLOP,
without recomputation: Megatron-LM's ``num_floating_point_operations``, MFU's numerator),
``mfu`` and ``hfu`` (fractions of the 16-bit dense peak), ``tokens_per_s_per_gpu`` (global
batch x sequence / iteration / GPUs) and ``memory_gib_per_gpu`` (GiB, the counter the
source's figure reads: ``ledger.memory``). ``scored`` marks the one time-derived metric of the
row that the statistics count (the first the row publishes; MFU and HFU published beside an
iteration time follow from it and would count the same error twice) and the memory metric (its
own family).
``admitted`` says whether ``dlsched plan``'s search would admit the published layout, by the
memory check it asks of every layout (``job.memory.per_gpu.MemoryBreakdown.fits``: the
evaluator's memory per GPU within the GPU's memory less the runtime reserve and a
fragmentation margin); every published layout ran, so one refused is a layout the planner
would wrongly rule out. ``memory_gib`` is that memory per GPU (GiB) and ``capacity_gib`` the
GPU's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dlsched.errors import ConfigError
from dlsched.experiments.megatron import FITTED_ROW
from dlsched.job.compute.fp8 import FP8_RECIPES
from dlsched.job.evaluation.evaluate import Job, JobResult, check_run, evaluate
from dlsched.job.execution import Execution
from dlsched.ledger.memory import memory_unmodelled, published_memory_gib
from dlsched.ledger.schema import GPU_PRESETS, NO_PRESET, LedgerRow, by_row_key

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
    "torchtitan-2508-mi300x-8b-bf16": "the mi300x preset's tensor-core fractions were fitted "
                                      "to this row (presets/gpus.yaml)",
}
TIME_METRICS = ("iteration_s", "tflops_per_gpu", "model_tflops_per_gpu", "mfu", "hfu",
                "tokens_per_s_per_gpu")
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
    admitted: bool | None = None
    memory_gib: float | None = None
    capacity_gib: float | None = None

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
        job = Job(shape, hw.system())
        layout = row.execution  # the section's own Execution (schema.LedgerRow.execution)
        check_run(job, layout.run)
    except ConfigError as error:  # by field (gpus, cp, ...): the row's key for it
        raise ConfigError(f"{row.id}: {by_row_key(error)}") from None
    return job, layout


def metric_value(metric: str, job: Job, result: JobResult) -> float:
    """``metric`` of an evaluated layout in the ledger's published unit."""
    layout = result.layout
    if metric == "tokens_per_s_per_gpu":
        return layout.global_batch * job.spec.seq / result.iteration_s / layout.gpus
    if metric == "memory_gib_per_gpu":
        return result.memory_bytes / 2**30
    if metric == "model_tflops_per_gpu":  # the executed rate x model / executed FLOP
        return result.tflops_per_gpu * result.mfu / result.hfu
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
        fit = (result.fits, result.memory_bytes / 2**30, job.cluster.memory / 2**30)
    except ConfigError as error:  # the evaluator's refusals by field: the row's key for it
        reason, values, parts = str(by_row_key(error)).removeprefix(f"{row.id}: "), {}, {}
        fit = (None, None, None)
    held_out = row.id not in FITTED_ROWS  # the fits are compute constants: memory held out
    first_time = next((m.metric for m in row.measured if m.metric in TIME_METRICS), None)
    unmodelled = reason or memory_unmodelled(row)
    if unmodelled:
        values = {metric: value for metric, value in values.items()
                  if metric not in MEMORY_METRICS}
    return [Prediction(row, m.metric, m.value, values.get(m.metric),
                       unmodelled if m.metric in MEMORY_METRICS else reason,
                       m.metric == first_time or m.metric in MEMORY_METRICS,
                       held_out or m.metric in MEMORY_METRICS, parts, *fit)
            for m in row.measured]


def predict_rows(rows: list[LedgerRow]) -> list[Prediction]:
    """Every published metric of ``rows``, in order."""
    return [prediction for row in rows for prediction in predict_row(row)]
