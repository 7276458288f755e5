"""Hagemann et al.'s layout sweep (NeurIPS 2023 WANT, arXiv 2311.05610) priced by dlsched's
job evaluator: how well dlsched ranks multi-node layouts of LLaMA 13B to 65B, and whether its
memory check foresees which of them ran out of memory.

The data (``data/layout_sweep.csv``, converted from the ten result sheets of
Aleph-Alpha/NeurIPS-WANT-submission-efficient-parallelization-layouts at e13c2cb;
``data/layout_sweep.source.yaml`` gives the provenance and the licence, CC BY-NC-SA 4.0):
984 trials of LLaMA 13B, 30B and 65B in bfloat16 with AdamW and ZeRO-1 on DGX A100 nodes
(32-256 GPUs, sequences of 2,048 or 8,192 tokens), each one TP x PP x micro-batch x activation
checkpointing x kernel combination with its average step time or its failure (out of memory,
most of them). A **group** is one sheet's trials with one kernel and one sequence-parallel
setting: the layouts a user with that software would choose between (20 groups priced).

Settings, each stated where it comes from; none fitted to these rows:

* **Shapes** (``SHAPES``): LLaMA 13B, 33B ("30B") and 65B's width, heads and layers
  (Touvron et al., "LLaMA", 2023, Table 2), SwiGLU, RMSNorm, rotary positions, no biases, no
  dropout, untied embeddings (the sweep's configurations, ``weight_tying: false``); FFN widths
  13,824, 17,888 and 22,016 (Aleph Alpha's ``mlp_factor`` x width: 2.7, 2.6875, 2.6875) and
  Aleph Alpha's 128,000-token vocabulary (``VOCAB``), not LLaMA's 32,000: the sheets' own
  Megatron TFLOP/s column, undone with the formula of the code that wrote it
  (``scaling/transformer/utils/get_tflops.py`` ``get_tflops_megatron`` at Aleph-Alpha/scaling
  737f855: ``6 B s N + 60 B s^2 h l`` FLOP a step), gives every trial's parameter count N,
  each sheet's least within 0.02% of these shapes' (``sheet_parameters``; with 32,000 tokens
  they would be 7% to 9% short).
* **Global batch** (``GLOBAL_BATCH``): 4,194,304 tokens a step, 2,048 sequences of 2,048 or
  512 of 8,192: not printed by the sheets; with it the parameter counts above come out the
  same at both sequence lengths (half or twice the batch would make them 2x off).
* **The run** (``run_settings``; Aleph-Alpha/scaling 737f855, the public code nearest the
  2023 sweep): bf16 with ZeRO-1 (sharded FP32 master weights and Adam states); the gradients
  kept in bf16 and added up over the micro-batches by autograd (``grad_reduce`` ``bf16``,
  ``grad_accumulation`` ``separate``: the memory and the adds as the code has them) and reduced
  once, inside the optimizer step after the last backward (``dp_policy`` ``none``); the code
  casts each bucket to FP32 for that reduction (``core/optimizer/allreduce.py``), which no
  ``grad_reduce`` value expresses beside bf16 gradients, so it is priced at 16 bits;
  transfers between pipeline stages that block the rank (``PipelineScheduleTrain``,
  DeepSpeed's 1F1B instruction schedule, with blocking ``send`` / ``recv``); activation
  checkpointing ``every_layer`` as full recomputation. The layers of an uneven pipeline split
  spread as that code's ``pipe_partition_uniform`` spreads them, the remainder one each to the
  first stages (``pipeline_layout``). Not expressed, each a cost the evaluator leaves out or
  prices as Megatron runs it: the gradients all-reduced whole (ZeRO-1 here reduce-scatters)
  before the bf16 parameter all-gather, a backward all-reduce per column-parallel linear where
  Megatron has one per block (without SP), the head's logits gathered over TP and its FP32
  cross-entropy run on every TP rank, gradient clipping's host syncs.
* **Kernels** (``KERNELS``): ``flash_attention2`` and ``flash_attention2 + RMS kernel`` as the
  evaluator's FlashAttention-2 (``flash``), ``fused`` as Megatron's unfused attention with its
  fused softmax (``unfused``); the rest of each layer as eager PyTorch modules (``ops``
  ``eager``: the norms, rotary embedding, SwiGLU and residual additions one kernel per op, as
  the evaluator prices TorchTitan's Llama; the fused RMSNorm of the ``RMS kernel`` trials is
  not expressed, so those trials' norms are priced eager too). ``torch`` (PyTorch's own softmax
  attention) and FlashAttention 1.0.8 have no pricing in the evaluator and are left out
  (``UNPRICED``).

Every trial is priced on the ``dgx-a100`` node preset with the ``a100`` compute preset. A
trial the evaluator refuses (a layout it cannot express) is counted apart with the reason.
Reported: mean |error| and bias per group and overall, by kernel, TP, PP and micro-batch; per
group the Kendall tau and the first-ranked layout against the best measured
(``experiments.layout_ranking``); and the memory check against the trials' outcomes: of the
trials that ran, how many ``dlsched plan`` would admit, and of those that ran out of memory,
how many it would refuse. A reproduction module (``experiments.reproduction``): a scenario is
one sheet.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from dlsched.errors import ConfigError
from dlsched.experiments.bundled_csv import bundled_text, parse_csv
from dlsched.experiments.layout_ranking import by, error, error_summary, groups, ranking_summary
from dlsched.job.cluster import load_cluster
from dlsched.job.evaluation.evaluate import Job, evaluate
from dlsched.job.execution import Execution
from dlsched.job.model_spec import Model
from dlsched.job.run_settings import RunSettings
from dlsched.report import Column
from dlsched.report.columns import percents, text
from dlsched.report.sections import Paragraph, Section, Table
from dlsched.report.tables import fixed, in_percent

NAME = "layouts"
DATA = "layout_sweep.csv"
NODE, GPU = "dgx-a100", "a100"
VOCAB = 128000  # Aleph Alpha's tokenizer, not LLaMA's 32,000 (module docstring)
SHAPES = {  # layers, width, heads, FFN width (module docstring)
    "13b": (40, 5120, 40, 13824),
    "30b": (60, 6656, 52, 17888),
    "65b": (80, 8192, 64, 22016),
}
SEQ = {"2k": 2048, "8k": 8192}
GLOBAL_BATCH = {2048: 2048, 8192: 512}  # sequences a step by sequence length (docstring)
KERNELS = {  # the sheet's kernel: the evaluator's attention, ops
    "flash_attention2": ("flash", "eager"),
    "flash_attention2 + RMS kernel": ("flash", "eager"),
    "fused": ("unfused", "eager"),
}
UNPRICED = {
    "torch": "PyTorch's own softmax attention (the evaluator's unfused attention is Megatron's "
             "fused softmax)",
    "flash_attentionv1.0.8": "FlashAttention 1.0.8 (the evaluator's flash is "
                             "FlashAttention-2)",
    "flash_attention": "FlashAttention, version not stated",
}
RECOMPUTE = {"disabled": "none", "every_layer": "full"}
SOURCE = ("Aleph-Alpha/NeurIPS-WANT-submission-efficient-parallelization-layouts at e13c2cb "
          "(Hagemann et al., NeurIPS 2023 WANT, arXiv 2311.05610), CC BY-NC-SA 4.0: Aleph "
          "Alpha's training code on DGX A100 nodes")
HEADER = ("sweep", "trial_id", "gpus", "step_time_s", "outcome", "activation_checkpointing",
          "kernel", "micro_batch_size", "model_parallel_size", "pipe_parallel_size",
          "sequence_parallel", "tflops_aleph_alpha", "tflops_megatron")
OUTCOMES = ("ok", "oom", "error", "kernel-unavailable")


@dataclass(frozen=True)
class Trial:
    """One trial of the sweep (``step_time_s`` seconds; ``tflops_aleph_alpha`` and
    ``tflops_megatron``, the sheet's FLOP/s per GPU in TFLOP/s by its two counts; None when it
    did not run)."""

    sweep: str
    trial_id: int
    gpus: int
    step_time_s: float | None
    outcome: str
    checkpointing: str
    kernel: str
    microbatch: int
    tp: int
    pp: int
    sequence_parallel: bool
    tflops_aleph_alpha: float | None = None
    tflops_megatron: float | None = None

    @property
    def size(self) -> str:
        """The model (``13b``, ``30b``, ``65b``)."""
        return self.sweep.split("-")[0]

    @property
    def seq(self) -> int:
        """Tokens per sequence."""
        return SEQ[self.sweep.split("-")[1]]

    def spec(self) -> Model:
        """The LLaMA of the trial's size (``SHAPES``) at its sequence length."""
        layers, hidden, heads, ffn = SHAPES[self.size]
        return Model(name=f"llama-{self.size}", layers=layers, hidden=hidden, heads=heads,
                     seq=self.seq, vocab=VOCAB, ffn_hidden=ffn, gated_ffn=True, bias=False,
                     rms_norm=True, learned_positions=False, tied_embeddings=False,
                     attention_dropout=0.0, hidden_dropout=0.0)

    def layout(self) -> Execution:
        """The trial's layout run with the sweep's settings (``run_settings``); ConfigError for
        a kernel the evaluator does not price."""
        if self.kernel not in KERNELS:
            raise ConfigError(f"kernel {self.kernel!r}: not priced ("
                              f"{UNPRICED.get(self.kernel, 'unknown')})")
        dp = self.gpus // (self.tp * self.pp)
        return Execution(self.tp, self.pp, dp, self.microbatch, GLOBAL_BATCH[self.seq], 1,
                         "1f1b", RECOMPUTE[self.checkpointing],
                         sequence_parallel=self.sequence_parallel, zero=1,
                         pipeline_split=pipeline_layout(SHAPES[self.size][0], self.pp),
                         run=run_settings(self.kernel))


def sheet_parameters(trial: Trial) -> float:
    """The parameter count the sheet's Megatron TFLOP/s of ``trial`` was computed with, undone
    with the code's formula (``6 B s N + 60 B s^2 h l`` FLOP a step over step time x GPUs,
    ``get_tflops_megatron``) at the sweep's ``GLOBAL_BATCH``: the evidence for ``VOCAB``,
    ``SHAPES`` and ``GLOBAL_BATCH``; ConfigError for a trial that did not run."""
    if trial.tflops_megatron is None or trial.step_time_s is None:
        raise ConfigError(f"trial {trial.trial_id}: did not run ({trial.outcome})")
    layers, hidden, _, _ = SHAPES[trial.size]
    batch, seq = GLOBAL_BATCH[trial.seq], trial.seq
    flop = trial.tflops_megatron * 1e12 * trial.step_time_s * trial.gpus
    return (flop - 60 * batch * seq**2 * hidden * layers) / (6 * batch * seq)


def run_settings(kernel: str) -> RunSettings:
    """The sweep's run settings with ``kernel``'s attention and ops (module docstring)."""
    attention, ops = KERNELS[kernel]
    return RunSettings("bf16", "baseline", "none", attention, grad_reduce="bf16",
                       grad_accumulation="separate", pipeline_p2p="blocking", ops=ops)


def pipeline_layout(layers: int, pp: int) -> str:
    """``even`` when ``pp`` divides ``layers``, else the stages as Aleph Alpha's
    ``pipe_partition_uniform`` fills them: ``layers // pp`` each, one more on each of the first
    ``layers % pp`` (a ``layout:`` split, ``job.evaluation.pipeline_layout``: the embedding on
    the first stage, the head and loss on the last)."""
    if layers % pp == 0:
        return "even"
    base, extra = divmod(layers, pp)
    stages = [f"t*{base + (1 if s < extra else 0)}" for s in range(pp)]
    return "layout:E" + "|".join(stages) + "L"


def parse_trials(text_: str) -> list[Trial]:
    """The CSV's rows (its header must be ``HEADER``); ConfigError naming the line."""
    return parse_csv(text_, HEADER, "layout sweep data", _trial)


def _trial(cells: list[str]) -> Trial:
    """One trial from its cells (ValueError for a cell the sheet cannot hold)."""
    sweep, trial, gpus, step, outcome, ckpt, kernel, mb, tp, pp, sp, aa, meg = cells
    if outcome not in OUTCOMES or ckpt not in RECOMPUTE or sp not in ("true", "false"):
        raise ValueError("outcome, checkpointing or sequence_parallel not accepted")
    if not (outcome == "ok") == bool(step) == bool(aa) == bool(meg):
        raise ValueError("a step time and TFLOP/s where the trial ran, none where it did not")
    return Trial(sweep, int(trial), int(gpus), float(step) if step else None, outcome, ckpt,
                 kernel, int(mb), int(tp), int(pp), sp == "true", float(aa) if aa else None,
                 float(meg) if meg else None)


@cache
def load_trials() -> tuple[Trial, ...]:
    """The bundled trials, in the CSV's order."""
    return tuple(parse_trials(bundled_text(DATA)))


SWEEPS = tuple(dict.fromkeys(t.sweep for t in load_trials()))
"""The ten sheets, in the CSV's order."""


def price(trial: Trial, index: int = 0) -> dict[str, Any]:
    """One trial priced: its layout, outcome, measured and predicted step time (seconds; None
    where it did not run / was refused), error, whether the plan's memory check admits it
    (``fits``) and the evaluator's refusal (``refused``, None when priced)."""
    row = {"index": index, "sweep": trial.sweep, "kernel": trial.kernel,
           "sequence_parallel": trial.sequence_parallel, "tp": trial.tp, "pp": trial.pp,
           "microbatch": trial.microbatch, "checkpointing": trial.checkpointing,
           "outcome": trial.outcome, "measured_s": trial.step_time_s, "predicted_s": None,
           "error": None, "fits": None, "refused": None}
    try:
        result = evaluate(Job(trial.spec(), load_cluster(NODE, trial.gpus, GPU)), trial.layout())
    except ConfigError as refusal:
        return {**row, "refused": str(refusal)}
    row.update(predicted_s=result.iteration_s, fits=result.fits)
    if trial.step_time_s is not None:
        row["error"] = error(result.iteration_s, trial.step_time_s)
    return row


def group_key(row: dict[str, Any]) -> tuple[str, str, bool]:
    """A group of layouts a user chooses between: sheet, kernel, sequence parallelism."""
    return row["sweep"], row["kernel"], row["sequence_parallel"]


@dataclass(frozen=True)
class Options:
    """The sheets to price (``SWEEPS`` names)."""

    sweeps: tuple[str, ...] = SWEEPS


@dataclass(frozen=True)
class Scenario:
    """One sheet's trials."""

    sweep: str


def scenarios(options: Options | None = None) -> list[Scenario]:
    """One scenario per chosen sheet."""
    return [Scenario(sweep) for sweep in (options or Options()).sweeps]


def run_scenario(scenario: Scenario) -> list[dict[str, Any]]:
    """Every trial of the scenario's sheet, priced (``price``)."""
    return [price(trial, index) for index, trial in enumerate(load_trials())
            if trial.sweep == scenario.sweep]


def memory_check(rows: list[dict[str, Any]]) -> dict[str, int]:
    """The plan's memory check against the outcomes of the priced trials: ``ran_admitted`` /
    ``ran_refused`` (trials that ran), ``oom_refused`` / ``oom_admitted`` (trials that ran out
    of memory)."""
    return {f"{o}_{a}": sum(1 for r in rows if r["outcome"] == outcome and r["fits"] is fit)
            for o, outcome in (("ran", "ok"), ("oom", "oom"))
            for a, fit in (("admitted", True), ("refused", False))}


def measured(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The trials that ran and were priced."""
    return [r for r in rows if r["error"] is not None]


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Errors (``layout_ranking.error_summary``) and the group ranking over ``rows``' priced
    measurements."""
    timed = measured(rows)
    return {**error_summary(timed), **ranking_summary(groups(timed, group_key))}


def document(rows: list[dict[str, Any]], options: Options | None = None) -> dict[str, Any]:
    """What ``--json`` prints: the totals, per group, by kernel, TP, PP and micro-batch, the
    memory check, the trials left out (unpriced kernels, refusals), then every row."""
    timed = measured(rows)
    keys = list(dict.fromkeys(group_key(r) for r in timed))
    per_group = [{"sweep": s, "kernel": k, "sequence_parallel": sp,
                  **summary([r for r in timed if group_key(r) == (s, k, sp)])}
                 for s, k, sp in keys]
    refused = [r for r in rows if r["refused"] is not None and r["kernel"] in KERNELS]
    return {"summary": summary(rows), "groups": per_group, "by_kernel": by(timed, "kernel"),
            "by_tp": by(timed, "tp"), "by_pp": by(timed, "pp"),
            "by_microbatch": by(timed, "microbatch"), "memory_check": memory_check(rows),
            "unpriced_ran": sum(1 for r in rows if r["kernel"] not in KERNELS
                                and r["outcome"] == "ok"),
            "refused_ran": [{k: r[k] for k in ("sweep", "kernel", "tp", "pp", "microbatch",
                                               "refused")}
                            for r in refused if r["outcome"] == "ok"],
            "rows": rows}


_signed = in_percent(1, signed=True)
_ERRORS = [Column("rows", "rows"), *percents(in_percent(1), mean_abs_error="|error|"),
           *percents(_signed, bias="bias"), *percents(_signed, worst_error="worst")]
GROUP_COLUMNS = [
    *text("sweep"), *text("kernel"), Column("sequence_parallel", "SP"), *_ERRORS,
    Column("mean_kendall_tau", "Kendall tau", fixed(2)),
    Column("first_within_3pct", "first within 3%"),
    Column("worst_first_ratio", "first/best (x)", fixed(3))]


def sections(document_: dict[str, Any], options: Options | None = None) -> list[Section]:
    """The per-group table with the totals, the errors by kernel, TP, PP and micro-batch, the
    memory check, what was left out, the source and the settings."""
    total = {"sweep": "all", "kernel": "", "sequence_parallel": "", **document_["summary"]}
    memory = document_["memory_check"]
    refused = document_["refused_ran"]
    return [
        Table([*document_["groups"], total], GROUP_COLUMNS,
              f"Hagemann et al.'s layout sweep on {NODE} ({GPU}): error = predicted / measured "
              "step time - 1; per group (sheet, kernel, sequence parallelism) the Kendall tau "
              "of predicted vs measured time and the layout predicted fastest over the best "
              "measured"),
        *(Table(document_[f"by_{key}"], [Column(key, header), *_ERRORS], f"errors by {header}")
          for key, header in (("kernel", "kernel"), ("tp", "TP"), ("pp", "PP"),
                              ("microbatch", "micro-batch"))),
        Paragraph(f"memory check (dlsched plan's) against the outcomes: of the trials that ran, "
                  f"{memory['ran_admitted']} admitted, {memory['ran_refused']} refused; of the "
                  f"trials that ran out of memory, {memory['oom_refused']} refused, "
                  f"{memory['oom_admitted']} admitted"),
        Paragraph(f"left out: {document_['unpriced_ran']} trials that ran with kernels the "
                  f"evaluator does not price ({', '.join(UNPRICED)}); {len(refused)} that ran "
                  "and the evaluator refuses"
                  + "".join(f"; {r['sweep']} TP {r['tp']} PP {r['pp']} mb {r['microbatch']}: "
                            f"{r['refused']}" for r in refused[:3])),
        Paragraph(f"source: {SOURCE}"),
        Paragraph("settings (stated, not fitted): LLaMA widths, heads and layers with Aleph "
                  "Alpha's FFN widths and 128,000-token vocabulary, 2,048 x 2,048 or 512 x "
                  "8,192 tokens a step (both read off the sheets' TFLOP/s); bf16, ZeRO-1, bf16 "
                  "gradients accumulated by autograd and reduced after the last backward (at "
                  "16 bits; the code's FP32 wire not expressed), blocking pipeline transfers "
                  "(1F1B), every_layer checkpointing as full recomputation; FlashAttention-2 "
                  "or Megatron's fused softmax, the other ops eager")]
