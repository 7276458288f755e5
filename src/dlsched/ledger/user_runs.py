"""A user's own measured runs in the ledger's schema, read and priced.

A runs file (YAML or JSON) is a list of rows in the schema of ``dlsched.ledger.schema.LedgerRow``
(docs/examples/my-runs.yaml is a template), or ``{runs: [...]}``; ``source`` and ``citation``
are free text there (the bundled sources' names are not required). ``load_runs(path)`` returns
the validated rows; a row that breaks the schema or repeats an id raises ``ConfigError`` naming
the file, the row and the field.

``price(row, gpu)`` prices one row as ``dlsched validate`` prices the ledger
(``ledger.predict.job_and_layout``: the row's node preset, model, layout and settings) with
the compute preset replaced by ``gpu`` (a preset name or a GPU file, e.g. one written by
``dlsched calibrate runs``; None: the row's own preset): the row's first time-derived metric
(``iteration_s``, ``tflops_per_gpu``, ``mfu``, ``hfu`` or ``tokens_per_s_per_gpu``) published
and predicted in its unit, and ``time_ratio``, the predicted over the measured iteration time
(> 1: predicted slower), whatever the metric.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dlsched.config import load_document
from dlsched.errors import ConfigError
from dlsched.hardware.gpu import get_gpu
from dlsched.job.evaluation.evaluate import evaluate
from dlsched.ledger.predict import TIME_METRICS, job_and_layout, metric_value
from dlsched.ledger.schema import METRIC_UNITS, LedgerRow, by_row_key

RATES = ("tflops_per_gpu", "model_tflops_per_gpu", "mfu", "hfu", "tokens_per_s_per_gpu")
"""Time-derived metrics that grow as the iteration gets faster."""


class UserRun(LedgerRow):
    """A ledger row whose ``source`` is the user's own label (any text)."""

    source: str = "user"  # type: ignore[assignment]


def load_runs(path: str | Path, option: str = "--ledger") -> list[LedgerRow]:
    """The rows of the runs file ``path`` (module docstring), in file order; every refusal
    starts with ``option``, the command's name for the file."""
    try:
        return _load_runs(path)
    except ConfigError as error:
        raise ConfigError(f"{option}: {error}") from None


def _load_runs(path: str | Path) -> list[LedgerRow]:
    raw = load_document(str(path))
    if isinstance(raw, dict) and set(raw) == {"runs"}:
        raw = raw["runs"]
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{path}: expected a non-empty list of runs in the ledger schema "
                          "(or {runs: [...]}); see docs/examples/my-runs.yaml")
    rows: list[LedgerRow] = []
    for index, entry in enumerate(raw):
        label = entry.get("id", f"run {index}") if isinstance(entry, dict) else f"run {index}"
        try:
            row = UserRun.model_validate(entry)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "row"
            raise ConfigError(f"{path}: {label}: {where}: {first['msg']} ({error.error_count()} "
                              "problem(s) in this run)") from None
        if any(row.id == other.id for other in rows):
            raise ConfigError(f"{path}: id {row.id!r} appears twice; accepted: a different id "
                              "per run")
        rows.append(row)
    return rows


@dataclass(frozen=True)
class Priced:
    """One run's time-derived metric as published and predicted (its unit:
    ``schema.METRIC_UNITS``), and the predicted over the measured iteration time."""

    row: LedgerRow
    metric: str
    published: float
    predicted: float

    @property
    def error(self) -> float:
        """predicted / published - 1, in the metric's own terms."""
        return self.predicted / self.published - 1

    @property
    def time_ratio(self) -> float:
        """Predicted over measured iteration time (a rate's ratio inverted)."""
        ratio = self.predicted / self.published
        return 1 / ratio if self.metric in RATES else ratio

    def record(self) -> dict[str, Any]:
        """A flat record: id, metric, unit, published, predicted, error."""
        return {"id": self.row.id, "metric": self.metric,
                "unit": METRIC_UNITS[self.metric][0], "published": self.published,
                "predicted": self.predicted, "error": self.error}


def time_metric(row: LedgerRow) -> str:
    """The row's first published time-derived metric; ConfigError when it has none."""
    metric = next((m.metric for m in row.measured if m.metric in TIME_METRICS), None)
    if metric is None:
        raise ConfigError(f"{row.id}: measured: no time-derived metric; accepted: "
                          + ", ".join(TIME_METRICS))
    return metric


def price(row: LedgerRow, gpu: str | None = None) -> Priced:
    """The row priced with the compute preset or GPU file ``gpu`` (module docstring);
    ConfigError with the reason when the evaluator cannot express it."""
    metric = time_metric(row)
    job, layout = job_and_layout(row)
    if gpu is not None:
        job = replace(job, cluster=job.cluster.with_gpu(gpu))
    value = metric_value(metric, job, evaluate(job, layout))
    published = row.value(metric)
    assert published is not None
    return Priced(row, metric, published, value)


def score_runs(rows: Sequence[LedgerRow], gpu: str | None = None
               ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Each run priced (``price``; a run the evaluator cannot express keeps its reason and no
    prediction), and the summary: runs, priced, mean |error|, bias, worst run. An unknown
    ``gpu`` is refused first (ConfigError)."""
    if gpu is not None:
        try:
            get_gpu(gpu)
        except ConfigError as error:
            raise error.renamed("--gpu") from None
    records = []
    for row in rows:
        try:
            records.append({**price(row, gpu).record(), "reason": None})
        except ConfigError as error:
            records.append({"id": row.id, "metric": None, "unit": None, "published": None,
                            "predicted": None, "error": None,
                            "reason": str(by_row_key(error)).removeprefix(f"{row.id}: ")})
    priced = [r for r in records if r["error"] is not None]
    errors = [r["error"] for r in priced]
    worst = max(priced, key=lambda r: abs(r["error"]), default=None)
    return records, {"runs": len(records), "priced": len(priced),
                     "mean_abs_error": sum(map(abs, errors)) / len(errors) if errors else None,
                     "bias": sum(errors) / len(errors) if errors else None,
                     "worst_run": None if worst is None else worst["id"],
                     "worst_error": None if worst is None else worst["error"]}
