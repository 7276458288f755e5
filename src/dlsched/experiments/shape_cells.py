"""Where a set of measured layouts' prediction error lives: per cell of layouts that share the
shapes of their per-layer kernels, or across the composition of those layers.

A layer's kernels see only the per-GPU shapes of one microbatch: hidden size, tensor-parallel
degree and microbatch size fix every GEMM, attention and elementwise shape of a layer (the
sequence fixed within a set). Everything else a layout changes (pipeline depth and schedule,
data parallelism, the model's depth, the global batch) changes how often and in what order
those kernels run, and what runs beside them. So grouping the rows into **cells** of equal
kernel shapes and dividing each cell's mean error out of its rows separates the two:

* ``between``: each cell's mean error (a number per shape) is what per-shape kernel rates
  would have to correct;
* ``within``: the errors left once that is divided out (``(1 + e) / (1 + cell mean) - 1``) are
  the composition's: everything priced from the kernels' times upwards.

``oracle_rows`` applies that correction to the predictions, as if the per-shape rates were
known exactly; it is an upper bound on what a correction of per-shape rates alone could
reach, fitted on the very rows it scores (one number per cell), never a prediction. Rows are
``layout_ranking`` rows (``predicted_s``, ``measured_s``, seconds).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from dlsched.experiments.layout_ranking import Row, error, error_summary


def cell_errors(rows: Sequence[Row], cell: Callable[[Row], Hashable]) -> dict[Hashable, float]:
    """Each cell's mean signed error (a fraction), cells in order of first appearance."""
    found: dict[Hashable, list[float]] = {}
    for row in rows:
        found.setdefault(cell(row), []).append(error(row["predicted_s"], row["measured_s"]))
    return {key: sum(errors) / len(errors) for key, errors in found.items()}


def oracle_rows(rows: Sequence[Row], cell: Callable[[Row], Hashable],
                means: dict[Hashable, float] | None = None) -> list[Row]:
    """``rows`` with each prediction divided by ``1 +`` its cell's mean error (``means``, by
    default ``cell_errors(rows, cell)``; module docstring): every cell's mean error becomes 0,
    the errors within a cell keep their spread."""
    means = cell_errors(rows, cell) if means is None else means
    return [{**row, "predicted_s": row["predicted_s"] / (1 + means[cell(row)])} for row in rows]


def split(rows: Sequence[Row], cell: Callable[[Row], Hashable],
          corrected: Sequence[Row] | None = None) -> dict[str, Any]:
    """``cells`` (count), ``between`` (the mean absolute cell error, weighted by rows) and
    ``within`` (``error_summary`` of the rows once their cell's mean error is divided out:
    ``corrected``, by default ``oracle_rows(rows, cell)``); fractions."""
    means = cell_errors(rows, cell)
    between = sum(abs(means[cell(row)]) for row in rows) / len(rows) if rows else None
    corrected = oracle_rows(rows, cell, means) if corrected is None else corrected
    return {"cells": len(means), "between": between, "within": error_summary(corrected)}
