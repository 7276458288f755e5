"""vTrain's single-node measured layouts (Bang et al., MICRO 2024) priced by dlsched's job
evaluator: how well dlsched ranks the layouts a user chooses between.

The data (``data/vtrain_single.csv``, bundled from VIA-Research/vTrain
``data/ground_truth_single.csv`` at f8dda84; ``data/vtrain_single.source.yaml`` gives the
provenance): 1,440 measured iteration times of 8 GPT models (hidden 1024 or 2048, 12 to 24
layers, 16 heads, sequence 1024) on one node of 2, 4 or 8 A100s, one row per TP x PP x DP
layout, microbatch and global batch, run with Megatron-DeepSpeed. The run settings the CSV does
not print come from the repository's per-row configurations (``config/validation/single/``):
activation checkpointing (full recomputation), no gradient bucketing (the gradients all-reduced
after the last backward: ``dp_policy`` ``none``), the 1F1B schedule, vocabulary 50,257 (which
Megatron-DeepSpeed pads per TP degree, ``VOCAB``); and
fp16 (the simulator's model runs in half precision). Nothing else is stated: these are
assumptions, each a choice of the code the runs used, not fitted: fp16 gradients all-reduced
in fp16 and added up over the microbatches outside the GEMMs (DeepSpeed's fp16 engine keeps
16-bit ``.grad`` that autograd accumulates), Megatron's unfused attention (its fused
softmax; FlashAttention is an option Megatron-DeepSpeed leaves off), pipeline transfers that
block the rank (DeepSpeed's pipeline engine runs them as instructions between its compute
steps), no ZeRO, and Adam on the fp16 weights without FP32 master weights (``MASTER_WEIGHTS``:
vTrain's simulator's update, which the rows' optimizer time agrees with). Every row is
priced on the ``dgx-a100`` node preset with one compute preset
(``a100`` by default, or a GPU file): no per-model or per-row factor, nothing fitted to these
rows.

A group is one model, GPU count and global batch (144 groups of 2 to 26 layouts). Reported:
mean |error| and bias overall, per model, by TP, PP and microbatch; per group the Kendall tau
between predicted and measured times and whether the layout predicted fastest measures within
3% / 5% of the best measured one (``experiments.layout_ranking``); over the one-stage rows,
where the time goes, measured and predicted (``decomposition``). A reproduction module
(``experiments.reproduction``): a scenario is one model.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from dlsched.errors import ConfigError
from dlsched.experiments.bundled_csv import bundled_text, parse_csv
from dlsched.experiments.layout_ranking import by, error, error_summary, groups, ranking_summary
from dlsched.experiments.shape_cells import cell_errors, oracle_rows, split
from dlsched.hardware.gpu import get_gpu
from dlsched.job.cluster import load_cluster
from dlsched.job.evaluation.evaluate import Job, evaluate
from dlsched.job.execution import Execution
from dlsched.job.memory.parameters import padded_vocab
from dlsched.job.model_spec import Model
from dlsched.job.run_settings import RunSettings
from dlsched.report import Column
from dlsched.report.columns import percents, text
from dlsched.report.sections import Paragraph, Section, Table
from dlsched.report.tables import fixed, in_ms, in_percent

NAME = "vtrain"
DATA = "vtrain_single.csv"
VOCAB = 50257  # vTrainConfig's default vocabulary (src/config.py)
# The runs' model pads it: Megatron-DeepSpeed rounds the vocabulary up to a multiple of
# ``--make-vocab-size-divisible-by`` (default 128) x TP before building the embedding and the
# head (``_vocab_size_with_padding``, megatron/tokenizer/tokenizer.py; the default in
# megatron/arguments.py, at f4157bea), as Megatron-LM does (``job.memory.parameters.padded_vocab``):
# 50,304 rows at TP 1, 50,432 at TP 2, 50,688 at TP 4, 51,200 at TP 8 (50,304, 25,216, 12,672
# and 6,400 per rank).
NODE = "dgx-a100"

# The runs' settings (module docstring): the execution's run settings and its recomputation.
PRECISION, ATTENTION, DP_POLICY = "fp16", "unfused", "none"
GRAD_REDUCE, GRAD_ACCUMULATION, PIPELINE_P2P, RECOMPUTE = "fp16", "separate", "blocking", "full"
# The weight update: Adam on the fp16 weights, no FP32 master copy (``MASTER_WEIGHTS``): what
# vTrain's simulator runs as the runs' update (``src/trainer.py``: apex ``FusedAdam`` over the
# half model's parameters, at f8dda84), and what the set measures: the TP 8, DP 1 rows' optimizer,
# 0.131 ms per layer at hidden 2048 and 0.060 at 1024 (``decomposition``'s c), is 15 ps per
# parameter, 23 B at the a100 preset's memory rate, where DeepSpeed's FP16_Optimizer would move
# about 70 B and synchronise once per parameter tensor (docs/validation.md).
MASTER_WEIGHTS = False
RUN = RunSettings(PRECISION, "baseline", DP_POLICY, ATTENTION, grad_reduce=GRAD_REDUCE,
                  grad_accumulation=GRAD_ACCUMULATION, pipeline_p2p=PIPELINE_P2P,
                  master_weights=MASTER_WEIGHTS)
SOURCE = ("VIA-Research/vTrain data/ground_truth_single.csv at f8dda84 (Bang et al., 'vTrain', "
          "MICRO 2024): Megatron-DeepSpeed on one node of 2-8 A100s; settings from the "
          "repository's config/validation/single/*.json")
HEADER = ("# GPUs", "global batch", "micro batch", "hidden size", "attention heads",
          "# layers", "sequence length", "tensor parallelism", "data parallelism",
          "pipeline parallelism", "iteration time (ms)")


@dataclass(frozen=True)
class VTrainRow:
    """One measured layout (sizes in elements, ``seq`` in tokens, ``measured_s`` seconds)."""

    gpus: int
    global_batch: int
    microbatch: int
    hidden: int
    heads: int
    layers: int
    seq: int
    tp: int
    dp: int
    pp: int
    measured_s: float

    @property
    def model(self) -> str:
        """``h1024-l24``: the model's width and depth."""
        return f"h{self.hidden}-l{self.layers}"

    def spec(self) -> Model:
        """The GPT (tied embeddings, learned positions, biases, LayerNorm: the zoo's GPT) with
        the vocabulary the run's model has: ``VOCAB`` padded for its TP degree (``VOCAB``'s
        comment)."""
        return Model(name=f"gpt-{self.model}", layers=self.layers,
                     hidden=self.hidden, heads=self.heads, seq=self.seq,
                     vocab=padded_vocab(VOCAB, self.tp))

    def layout(self) -> Execution:
        """The measured layout: 1F1B, full recomputation, no sequence parallelism or ZeRO, run
        with the runs' settings (``RUN``)."""
        return Execution(self.tp, self.pp, self.dp, self.microbatch, self.global_batch, 1, "1f1b",
                         RECOMPUTE, run=RUN)


def parse_rows(text_: str) -> list[VTrainRow]:
    """The CSV's rows (its header must be ``HEADER``); ConfigError naming the line."""
    return parse_csv(text_.lstrip("\ufeff"), HEADER, "vtrain data", _row, (ValueError, TypeError))


def _row(cells: list[str]) -> VTrainRow:
    """One row from its cells: the integers, then the time in ms (stored in s)."""
    *ints, ms = cells
    return VTrainRow(*(int(v) for v in ints), float(ms) / 1e3)  # type: ignore[arg-type]


@cache
def load_rows() -> tuple[VTrainRow, ...]:
    """The bundled measurements, in the CSV's order."""
    return tuple(parse_rows(bundled_text(DATA)))


MODELS = tuple(sorted({row.model for row in load_rows()},
                      key=lambda m: tuple(int(p[1:]) for p in m.split("-"))))
"""The eight models (width, then depth)."""


def job(row: VTrainRow, gpu: str = "a100") -> Job:
    """The evaluator's job for ``row``: its model on ``row.gpus`` GPUs of the node preset with
    the GPU preset or file ``gpu`` (the runs' settings are its layout's, ``RUN``)."""
    return Job(row.spec(), load_cluster(NODE, row.gpus, gpu))


def price(row: VTrainRow, gpu: str = "a100", index: int = 0) -> dict[str, Any]:
    """One row measured and predicted (seconds), with its layout and error; ``index``: its
    line in the CSV after the header (from 0)."""
    result = evaluate(job(row, gpu), row.layout())
    return {"index": index, "model": row.model, "gpus": row.gpus, "global_batch": row.global_batch,
            "tp": row.tp, "pp": row.pp, "dp": row.dp, "microbatch": row.microbatch,
            "measured_s": row.measured_s, "predicted_s": result.iteration_s,
            "error": error(result.iteration_s, row.measured_s)}


def group_key(row: dict[str, Any]) -> tuple[str, int, int]:
    """A group of layouts a user chooses between: model, GPUs, global batch."""
    return row["model"], row["gpus"], row["global_batch"]


@dataclass(frozen=True)
class Options:
    """The models to price (``MODELS`` names), the GPU preset or file, and the rows (CSV
    indices) that file was fitted to: reported apart from the held-out rest."""

    models: tuple[str, ...] = MODELS
    gpu: str = "a100"
    fitted: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        try:  # an unknown preset or an unreadable file is refused before any work
            get_gpu(self.gpu)
        except ConfigError as error:
            raise error.renamed("--gpu") from None


@dataclass(frozen=True)
class Scenario:
    """One model's rows on ``gpu``."""

    model: str
    gpu: str = "a100"


def scenarios(options: Options | None = None) -> list[Scenario]:
    """One scenario per chosen model."""
    chosen = options or Options()
    return [Scenario(model, chosen.gpu) for model in chosen.models]


def run_scenario(scenario: Scenario) -> list[dict[str, Any]]:
    """Every row of the scenario's model, priced (``price``)."""
    return [price(row, scenario.gpu, index) for index, row in enumerate(load_rows())
            if row.model == scenario.model]


def sample(model: str, every: int) -> list[int]:
    """CSV indices of every ``every``-th row of ``model`` (from its first): a calibration
    sample (``every`` 20: 9 of the model's 180 rows, 5%)."""
    return [i for i, row in enumerate(load_rows()) if row.model == model][::every]


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Errors (``layout_ranking.error_summary``) and the group ranking over ``rows``."""
    return {**error_summary(rows), **ranking_summary(groups(rows, group_key))}


def document(rows: list[dict[str, Any]], options: Options | None = None) -> dict[str, Any]:
    """What ``--json`` prints: over the held-out rows (all but ``Options.fitted``) the totals,
    per model, by TP, PP and microbatch; the fitted rows' errors (None when none was); their
    ``decomposition``; then every row."""
    chosen = options or Options()
    held = [r for r in rows if r["index"] not in chosen.fitted]
    fitted = [r for r in rows if r["index"] in chosen.fitted]
    models = [m for m in chosen.models if any(r["model"] == m for r in held)]
    return {"summary": summary(held),
            "models": [{"model": m, **summary([r for r in held if r["model"] == m])}
                       for m in models],
            "by_tp": by(held, "tp"), "by_pp": by(held, "pp"),
            "by_microbatch": by(held, "microbatch"),
            "fitted_rows": error_summary(fitted) if fitted else None,
            "decomposition": decomposition(held), "shape_cells": shape_cells(held),
            "rows": rows}


def kernel_shape(row: dict[str, Any]) -> tuple[int, int, int]:
    """The cell of layouts whose layers run the same kernels (``experiments.shape_cells``):
    hidden size, TP degree and microbatch size (the sequence is 1,024 tokens in every row)."""
    return _by_model()[row["model"]].hidden, row["tp"], row["microbatch"]


@cache
def _by_model() -> dict[str, VTrainRow]:
    """A row of each model, by its name (``VTrainRow.model``): its hidden size and depth."""
    return {r.model: r for r in load_rows()}


def shape_cells(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """``rows``' error split by kernel shape (``experiments.shape_cells``, cells
    ``kernel_shape``): ``cells`` (each hidden, TP, microbatch with its mean signed error),
    ``between`` and ``within`` (fractions), and ``oracle``: the group ranking with each cell's
    mean error divided out of its rows' predictions (fitted on these very rows: an upper
    bound of what per-shape kernel rates alone could correct, not a prediction). None for no
    rows."""
    if not rows:
        return None
    means = cell_errors(rows, kernel_shape)
    corrected = oracle_rows(rows, kernel_shape, means)
    return {**split(rows, kernel_shape, corrected),
            "cells": [{"hidden": h, "tp": t, "microbatch": m, "bias": means[(h, t, m)]}
                      for h, t, m in sorted(means)],
            "oracle": ranking_summary(groups(corrected, group_key))}


_signed = in_percent(1, signed=True)
SUMMARY_COLUMNS = [
    *text("model"), Column("rows", "rows"),
    *percents(in_percent(1), mean_abs_error="|error|"), *percents(_signed, bias="bias"),
    *percents(_signed, worst_error="worst"), Column("groups", "groups"),
    Column("mean_kendall_tau", "mean Kendall tau", fixed(2)),
    Column("first_within_3pct", "first within 3%"),
    Column("first_within_5pct", "first within 5%"),
    Column("worst_first_ratio", "worst first/best (x)", fixed(3))]


def _by_columns(key: str, header: str) -> list[Column]:
    return [Column(key, header), Column("rows", "rows"),
            *percents(in_percent(1), mean_abs_error="|error|"), *percents(_signed, bias="bias"),
            *percents(_signed, worst_error="worst")]


_PARTS = (("per_layer_microbatch_s", "layer x microbatch"), ("per_microbatch_s", "microbatch"),
          ("per_layer_s", "layer"), ("per_iteration_s", "iteration"))
DECOMPOSITION_COLUMNS = [
    Column("hidden", "hidden"), Column("tp", "TP"), Column("microbatch", "microbatch"),
    Column("rows", "rows"),
    *(Column(f"{key}_{kind}", f"{label} {kind[:4]}. (ms)", in_ms(2))
      for key, label in _PARTS for kind in ("measured", "predicted"))]


def _decomposition_table(parts: list[dict[str, Any]]) -> list[Section]:
    """``decomposition``'s determined parts as one table (none when no part is)."""
    rows = [{**{k: p[k] for k in ("hidden", "tp", "microbatch", "rows")},
             **{f"{key}_{kind}": p[kind][key] for key, _ in _PARTS
                for kind in ("measured", "predicted")}}
            for p in parts if p["measured"] is not None]
    return [Table(rows, DECOMPOSITION_COLUMNS,
                  "where one-stage iterations spend their time (vtrain.decomposition: least "
                  "squares over the PP 1 rows of every depth), measured and predicted")
            ] if rows else []


def _shape_cell_sections(cells: dict[str, Any] | None) -> list[Section]:
    """``shape_cells`` as one table (hidden x TP rows, a column per microbatch) and what it
    says (none without rows)."""
    if cells is None:
        return []
    sizes = sorted({c["microbatch"] for c in cells["cells"]})
    table: dict[tuple[int, int], dict[str, Any]] = {}
    for c in cells["cells"]:
        table.setdefault((c["hidden"], c["tp"]), {"hidden": c["hidden"], "tp": c["tp"]})[
            f"mb{c['microbatch']}"] = c["bias"]
    within, oracle = cells["within"], cells["oracle"]
    return [
        Table(list(table.values()),
              [Column("hidden", "hidden"), Column("tp", "TP"),
               *(Column(f"mb{m}", f"microbatch {m} (%)", _signed) for m in sizes)],
              "mean error per kernel shape (hidden x TP x microbatch: the cell of layouts "
              "whose layers run the same kernels; experiments.shape_cells)"),
        Paragraph(f"{len(cells['cells'])} kernel-shape cells: their mean errors average "
                  f"{cells['between']:.1%} over the rows; within a cell, once its mean is "
                  f"divided out, {within['mean_abs_error']:.1%} (the composition: depth, PP, "
                  "DP, schedule). With every cell's mean divided out (an oracle fitted on "
                  "these rows, not a prediction): mean Kendall tau "
                  f"{oracle['mean_kendall_tau']:.2f}, first-ranked within 3% in "
                  f"{oracle['first_within_3pct']} of {oracle['groups']} groups")]


def sections(document_: dict[str, Any], options: Options | None = None) -> list[Section]:
    """The per-model summary with the totals, the errors by TP, PP and microbatch, the
    decomposition (when the chosen models determine it), the errors per kernel shape, the
    source and the settings."""
    chosen = options or Options()
    total = {"model": "all", **document_["summary"]}
    fitted = document_["fitted_rows"]
    held = (f", the {fitted['rows']} rows it was fitted to left out"
            if fitted else "")
    return [
        Table([*document_["models"], total], SUMMARY_COLUMNS,
              f"vTrain single-node layouts on {NODE} ({chosen.gpu}{held}): error = predicted / "
              "measured - 1; per group (model, GPUs, global batch) Kendall tau of predicted vs "
              "measured time, and the layout predicted fastest against the best measured"),
        *([Paragraph(f"fitted rows ({fitted['rows']}): mean |error| "
                     f"{fitted['mean_abs_error']:.1%}, bias {fitted['bias']:+.1%}")]
          if fitted else []),
        *(Table(document_[f"by_{key}"], _by_columns(key, header), f"errors by {header}")
          for key, header in (("tp", "TP"), ("pp", "PP"), ("microbatch", "microbatch"))),
        *_decomposition_table(document_["decomposition"]),
        *_shape_cell_sections(document_["shape_cells"]),
        Paragraph(f"source: {SOURCE}"),
        Paragraph(f"settings (assumed, not fitted): {PRECISION}, {ATTENTION} attention, "
                  f"{RECOMPUTE} recomputation, gradients reduced in {GRAD_REDUCE} after the "
                  f"last backward and accumulated {GRAD_ACCUMULATION}ly, {PIPELINE_P2P} "
                  "pipeline transfers, no ZeRO, Adam on the fp16 weights (no master weights), "
                  "vocabulary 50,257 padded to a multiple of 128 x TP as Megatron-DeepSpeed "
                  "pads it")]


TERMS = ("per_layer_microbatch_s", "per_microbatch_s", "per_layer_s", "per_iteration_s")
"""The four parts ``decomposition`` reads off one-stage rows (seconds)."""


def _terms(times: list[float], layers: list[int], microbatches: list[int]) -> dict | None:
    """Least squares of ``times`` on m x L, m, L and 1 (``decomposition``); None when the
    rows do not determine the four (rank below 4)."""
    import numpy as np

    m, depth = np.array(microbatches, float), np.array(layers, float)
    design = np.column_stack([m * depth, m, depth, np.ones_like(m)])
    if len(times) < 4 or np.linalg.matrix_rank(design) < 4:
        return None
    solution = np.linalg.lstsq(design, np.array(times), rcond=None)[0]
    return dict(zip(TERMS, map(float, solution), strict=True))


def decomposition(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Where one-stage (PP 1) iterations spend their time, read off the measurements and off
    the predictions alike, with no model: per hidden size, TP degree and microbatch size, the
    iteration times of the rows (every depth, global batch and DP degree) fitted by least
    squares to ``a m L + b m + c L + d`` (m microbatches per replica, L layers): ``a`` one
    layer's forward and backward of one microbatch (its recomputation, TP collectives and
    host launches included), ``b`` the rest of a microbatch (embedding, head, loss and any
    fixed cost per microbatch), ``c`` one layer's share of the iteration's end (gradient
    all-reduce, optimizer), ``d`` the iteration's fixed cost; seconds, ``measured`` and
    ``predicted`` (None where the rows do not determine the four, e.g. one depth only).
    ``rows``: ``price``'s dicts."""
    found: dict[tuple[int, int, int], list[dict[str, Any]]] = {}
    by_model = _by_model()
    for row in rows:
        if row["pp"] == 1:
            hidden = by_model[row["model"]].hidden
            found.setdefault((hidden, row["tp"], row["microbatch"]), []).append(row)
    parts = []
    for (hidden, tp, microbatch), group in sorted(found.items()):
        layers = [by_model[r["model"]].layers for r in group]
        counts = [r["global_batch"] // (r["dp"] * r["microbatch"]) for r in group]
        parts.append({"hidden": hidden, "tp": tp, "microbatch": microbatch, "rows": len(group),
                      **{kind: _terms([r[f"{kind}_s"] for r in group], layers, counts)
                         for kind in ("measured", "predicted")}})
    return parts


def ledger_run(row: VTrainRow, index: int) -> dict[str, Any]:
    """``row`` as a run in the ledger's schema (``dlsched calibrate runs`` and ``dlsched
    validate --ledger`` read a list of them), with the runs' settings (module docstring);
    ``index`` is its line in the CSV after the header (from 0)."""
    return {
        "id": f"vtrain-single-{index:04d}", "source": "vtrain-single",
        "citation": f"VIA-Research/vTrain data/ground_truth_single.csv at f8dda84, row {index}",
        "hardware": {"gpu": "a100-80gb", "gpus": row.gpus, "cluster": "vtrain-a100-node",
                     "gpus_per_node": 8},
        "model": {"name": f"gpt-{row.model}", "layers": row.layers, "hidden": row.hidden,
                  "ffn_hidden": 4 * row.hidden, "heads": row.heads, "kv_heads": row.heads,
                  "vocab": row.spec().vocab, "seq": row.seq, "tied_embeddings": True,
                  "gated_ffn": False, "bias": True, "norm": "layernorm",
                  "position_embedding": "learned",
                  "params_published": float(row.spec().parameters())},
        "parallel": {"tp": row.tp, "pp": row.pp, "dp": row.dp, "chunks": 1,
                     "microbatch_size": row.microbatch, "global_batch": row.global_batch,
                     "recompute": RECOMPUTE, "sequence_parallel": False, "zero": 0,
                     "precision": PRECISION, "attention": ATTENTION,
                     "grad_reduce": GRAD_REDUCE, "grad_accumulation": GRAD_ACCUMULATION,
                     "master_weights": MASTER_WEIGHTS},
        "measured": [{"metric": "iteration_s", "value": row.measured_s}],
        "notes": "A100 memory size not stated (a100-80gb: the only A100 of the schema); "
                 "params_published: the shape's count, not published"}
