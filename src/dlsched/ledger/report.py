"""``dlsched validate``'s report: every ledger row predicted, scored and summarized.

``validate()`` prices every row of every source once (the intervals of one source need the
errors of the others), and returns the records of the requested source: per published metric
``id``, ``source``, ``metric``, ``unit``, ``published``, ``predicted``, ``error``, ``low``,
``high`` (the 90% interval on the published value, ``dlsched.ledger.score``), ``covered``,
``interval_method``, ``scored``, ``held_out``, ``supported`` and ``reason``, the predicted
iteration's parts (seconds), and whether the plan search's memory check admits the published
layout (``memory_admitted``, with ``memory_per_gpu_gib`` and ``gpu_memory_gib``:
``ledger.predict``); per source and family the ``SourceStats`` fields, and the same
over every source's mixture-of-experts rows (``moe``) and over all rows (``all``); and for each
row that leaves its micro-batch size, recomputation or virtual pipeline size unpublished, the
best rate over those settings against the published one (``bounds``: ``ledger.setting_search``,
a one-sided check: were the evaluator exact, the published rate would not exceed it).

``expected_errors()`` reads the recorded mean absolute error per source
(``ledger/data/expected.yaml``) that the CI test holds the ledger to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dlsched.errors import ConfigError
from dlsched.ledger import SOURCES, load_ledger
from dlsched.ledger.by_gpu import gpu_summary
from dlsched.ledger.predict import BREAKDOWN_KEYS, Prediction, predict_rows
from dlsched.ledger.schema import METRIC_UNITS
from dlsched.ledger.score import Interval, summarize
from dlsched.ledger.setting_search import search_rows
from dlsched.pipeline.chains.memory_model import FRAGMENTATION

FIT_MARGIN = FRAGMENTATION
"""The fragmentation margin the plan search's memory check keeps (``memory_admitted``)."""


@dataclass(frozen=True)
class LedgerReport:
    """The records of each published metric, the statistics per source (module docstring),
    per GPU with the provenance of its constants (``ledger.by_gpu``) and the rows with
    unpublished settings against the best of them (``bounds``)."""

    rows: list[dict[str, Any]]
    sources: list[dict[str, Any]]
    gpus: list[dict[str, Any]] = field(default_factory=list)
    bounds: list[dict[str, Any]] = field(default_factory=list)


def record(prediction: Prediction, interval: Interval | None) -> dict[str, Any]:
    """One published metric's flat record (module docstring)."""
    row = prediction.row
    covered = None if interval is None else interval.covers(prediction.published)
    return {"id": row.id, "source": row.source, "metric": prediction.metric,
            "unit": METRIC_UNITS[prediction.metric][0], "published": prediction.published,
            "predicted": prediction.predicted, "error": prediction.error,
            "low": None if interval is None else interval.low,
            "high": None if interval is None else interval.high,
            "covered": covered,
            "interval_method": None if interval is None else interval.method,
            "interval_calibration_rows": None if interval is None else interval.n,
            "scored": prediction.scored, "held_out": prediction.held_out,
            "supported": prediction.predicted is not None, "reason": prediction.reason,
            **{f"predicted_{key}": prediction.breakdown.get(key) for key in BREAKDOWN_KEYS},
            "memory_admitted": prediction.admitted, "memory_per_gpu_gib": prediction.memory_gib,
            "gpu_memory_gib": prediction.capacity_gib}


def validate(source: str | None = None) -> LedgerReport:
    """Predict the whole ledger; the records and statistics of ``source`` (every source when
    None; ``load_ledger`` refuses an unknown one), with the ``all`` line and, when the source
    has mixture-of-experts rows, the ``moe`` line."""
    load_ledger(source)  # an unknown source fails before any work
    predictions = predict_rows(load_ledger())
    intervals, stats = summarize(predictions, SOURCES)
    rows = [record(p, i) for p, i in zip(predictions, intervals, strict=True)
            if source is None or p.row.source == source]
    moe = any(p.row.model.experts > 0 for p in predictions
              if source in (None, p.row.source))
    shown = (source, "all", *(("moe",) if moe else ()))
    sources = [s.row() for s in stats if source is None or s.source in shown]
    bounds = [found.record() for found in search_rows(load_ledger(source))]
    return LedgerReport(rows, sources, gpu_summary(rows), bounds)


class ErrorRecord(BaseModel):
    """One source's recorded error: mean absolute (None while no row is priced) and signed
    error of its scored predictions, how many were priced, when, on which commit, and why
    the record is what it is."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    mean_abs_error: float | None = Field(ge=0)
    mean_signed_error: float | None = None
    priced: int = Field(ge=0)
    recorded: str
    commit: str
    reason: str


def expected_errors() -> dict[str, ErrorRecord]:
    """The recorded errors by source (``ledger/data/expected.yaml``); ConfigError when the
    file breaks its schema or names a source the ledger does not have."""
    path = "ledger/data/expected.yaml"
    raw = yaml.safe_load(resources.files("dlsched").joinpath(path).read_text())
    if not isinstance(raw, dict) or not set(raw) <= set(SOURCES):
        raise ConfigError(f"{path}: expected a mapping of ledger sources; accepted: "
                          + ", ".join(SOURCES))
    try:
        return {name: ErrorRecord.model_validate(entry) for name, entry in raw.items()}
    except ValidationError as error:
        raise ConfigError(f"{path}: {error}") from error
