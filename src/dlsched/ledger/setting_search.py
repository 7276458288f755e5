"""Rows whose source leaves settings unpublished, priced at the best of those settings: a
one-sided check of the evaluator.

Megatron-LM's README H100 table (``ledger/data/megatron-h100.yaml``) publishes each run's
layout (TP, PP, DP, global batch) and rate, but not its micro-batch size, its activation
recomputation or, under PP, its virtual pipeline size: no script for the runs is published
(NVIDIA/Megatron-LM issue #1571). Such a row has no point prediction, but it has a bound. The
run used one of the settings it could have used, so were the evaluator exact, the published
rate could not exceed the best of them. ``search(row)`` prices every candidate setting
(``candidates``) through the ledger's own path (``ledger.predict.predict_row``), keeps those
``dlsched plan``'s memory check admits (settings the run could hold), and reports the best:

* ``headroom`` (the best rate / the published one - 1; published / best - 1 for an iteration
  time) >= 0 is consistent with the evaluator; its size is how far the run is from the
  evaluator's best, settings the run did not pick or the evaluator's optimism, which this
  check cannot tell apart;
* ``headroom`` < 0: the run beat every admitted setting, so the evaluator is too slow there, or
  its memory check refuses the setting the run used (``best_refused``: the best setting the
  check refused, and its headroom).

Candidates, as Megatron-Core r0.8.0 (the table's release) accepts them:

* micro-batch size: every divisor of the replica's local batch (global batch / DP);
* recomputation: ``none``, ``selective`` (the attention core, Korthikanti et al. 2022) and
  ``full`` (each layer's input kept, the layer rerun: ``--recompute-granularity full
  --recompute-method uniform --recompute-num-layers 1``);
* virtual pipeline size, when the row leaves ``chunks`` unpublished (PP > 1): every divisor of
  the layers per stage; above 1 only when the microbatches per replica are a multiple of PP
  (``forward_backward_pipelining_with_interleaving``, megatron/core/pipeline_parallel/
  schedules.py at core_r0.8.0: "number of microbatches ... is not divisible by
  pipeline-model-parallel-size when using interleaved schedule").

A row is searched when it is unsupported and every field it leaves unpublished is one of those
(``SEARCHED``) or one the evaluator prices by a stated default (``DEFAULTED``: no position
table, as ``schema`` prices an unpublished ``position_embedding``; the node preset's NIC for an
unpublished ``inter_node_gbps_per_gpu``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlsched.job.search import SEARCHED_RECOMPUTE, divisors
from dlsched.ledger.predict import TIME_METRICS, Prediction, predict_row
from dlsched.ledger.schema import METRIC_UNITS, LedgerRow

SEARCHED = ("microbatch_size", "recompute", "chunks")
"""The settings ``search`` tries (module docstring)."""
DEFAULTED = ("position_embedding", "inter_node_gbps_per_gpu")
"""Unpublished fields the evaluator prices by a stated default (module docstring)."""


@dataclass(frozen=True)
class Candidate:
    """One setting of a row's unpublished fields and its predicted value of the row's metric
    (its published unit), whether the memory check admits it and its memory per GPU (GiB)."""

    microbatch_size: int
    recompute: str
    chunks: int
    predicted: float
    admitted: bool
    memory_gib: float

    @property
    def setting(self) -> str:
        """``mb M, <recompute>, VP C``."""
        return f"mb {self.microbatch_size}, {self.recompute}, VP {self.chunks}"


@dataclass(frozen=True)
class SettingSearch:
    """The best admitted candidate of a row (module docstring), and the best refused one."""

    row: LedgerRow
    metric: str
    published: float
    best: Candidate | None
    best_refused: Candidate | None
    priced: int

    def headroom(self, candidate: Candidate | None) -> float | None:
        """How far ``candidate`` is beyond the published value (module docstring)."""
        if candidate is None:
            return None
        if self.metric == "iteration_s":
            return self.published / candidate.predicted - 1
        return candidate.predicted / self.published - 1

    def record(self) -> dict[str, Any]:
        """A flat record for tables, JSON and CSV."""
        best, refused = self.best, self.best_refused
        return {"id": self.row.id, "source": self.row.source, "metric": self.metric,
                "unit": METRIC_UNITS[self.metric][0], "published": self.published,
                "best": None if best is None else best.predicted,
                "headroom": self.headroom(best),
                "setting": None if best is None else best.setting,
                "memory_per_gpu_gib": None if best is None else best.memory_gib,
                "best_refused": None if refused is None else refused.predicted,
                "best_refused_headroom": self.headroom(refused),
                "best_refused_setting": None if refused is None else refused.setting,
                "candidates": self.priced}


def searchable(row: LedgerRow) -> bool:
    """Whether ``row`` is searched (module docstring)."""
    unpublished = set(row.unpublished)
    return (not row.supported and bool(unpublished & set(SEARCHED))
            and unpublished <= set(SEARCHED) | set(DEFAULTED))


def candidates(row: LedgerRow) -> list[tuple[int, str, int]]:
    """The (micro-batch size, recomputation, virtual pipeline size) settings to try for
    ``row`` (module docstring); a published one stays as published."""
    par, unpublished = row.parallel, set(row.unpublished)
    local = par.global_batch // par.dp
    sizes = divisors(local) if "microbatch_size" in unpublished else [par.microbatch_size]
    modes = SEARCHED_RECOMPUTE if "recompute" in unpublished else (par.recompute,)
    settings = []
    for size in sizes:
        if "chunks" in unpublished:
            per_stage = row.model.layers // par.pp
            interleavable = (local // size) % par.pp == 0
            chunks = [c for c in divisors(per_stage) if c == 1 or interleavable]
        else:
            chunks = [par.chunks]
        settings += [(size, mode, c) for mode in modes for c in chunks]
    return settings


def filled(row: LedgerRow, microbatch_size: int, recompute: str, chunks: int) -> LedgerRow:
    """``row`` with the setting filled in, priced like a published row (the defaulted fields
    stay unpublished, ``position_embedding`` priced as ``schema`` prices it when null)."""
    data = row.model_dump(exclude_unset=True)
    data["parallel"] = {**data["parallel"], "microbatch_size": microbatch_size,
                        "recompute": recompute, "chunks": chunks}
    data["supported"] = True
    data.pop("reason", None)
    data["unpublished"] = [name for name in row.unpublished
                           if name not in SEARCHED and name != "position_embedding"]
    return LedgerRow.model_validate(data)


def search(row: LedgerRow) -> SettingSearch:
    """Every candidate of ``row`` priced, the best admitted and the best refused one (module
    docstring); ValueError for a row that is not searched (``searchable``)."""
    if not searchable(row):
        raise ValueError(f"{row.id}: not searched: supported, or it leaves unpublished a "
                         f"field other than {', '.join(SEARCHED + DEFAULTED)}")
    metric = next(m.metric for m in row.measured if m.metric in TIME_METRICS)
    faster = (lambda a, b: a < b) if metric == "iteration_s" else (lambda a, b: a > b)
    best: dict[bool, Candidate] = {}
    priced = 0
    for size, mode, chunks in candidates(row):
        prediction: Prediction = next(p for p in predict_row(filled(row, size, mode, chunks))
                                      if p.metric == metric)
        if prediction.predicted is None:
            continue
        priced += 1
        admitted = bool(prediction.admitted)
        candidate = Candidate(size, mode, chunks, prediction.predicted, admitted,
                              float(prediction.memory_gib or 0.0))
        held = best.get(admitted)
        if held is None or faster(candidate.predicted, held.predicted):
            best[admitted] = candidate
    refused = best.get(False)
    if refused is not None and True in best and \
            not faster(refused.predicted, best[True].predicted):
        refused = None  # a refused setting matters only when it beats every admitted one
    return SettingSearch(row, metric, row.value(metric) or 0.0, best.get(True), refused, priced)


def search_rows(rows: list[LedgerRow]) -> list[SettingSearch]:
    """``search`` of every searched row of ``rows``, in order."""
    return [search(row) for row in rows if searchable(row)]
