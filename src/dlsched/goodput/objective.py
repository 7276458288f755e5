"""Rank candidate plans by what users pay for: time to train, energy or cost.

The search keeps a shortlist of its fastest layouts (each evaluated with the job's
data-parallel policy); ``choose`` re-ranks those rows, each with its time-to-train columns
(``goodput.time_to_train``), by the objective's column, ties broken by the iteration. When the
choice is not the iteration-best row, ``reason`` says what moved it, column by column.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dlsched.errors import ConfigError

OBJECTIVES = {"upper": "iteration_high_s", "expected": "iteration_s",
              "time-to-train": "ttt_days", "energy": "energy_mwh", "cost": "cost"}
"""Objective name -> the row column it minimises."""
SEARCH_RANKED = ("upper", "expected")
"""Objectives the search ranks by itself (``job.ranking``): the upper end of the iteration's
90% interval, or the predicted iteration; the others re-rank its shortlist."""
EXPLAINED = (("iteration_s", "iteration", "{:.3f} s"),
             ("iteration_mean_s", "mean iteration with stragglers", "{:.3f} s"),
             ("goodput", "goodput", "{:.2%}"),
             ("checkpoint_load_s", "checkpoint load", "{:.1f} s"),
             ("checkpoint_blocking_s", "checkpoint blocking", "{:.2f} s"),
             ("ttt_days", "time to train", "{:.2f} days"),
             ("energy_mwh", "energy", "{:,.0f} MWh"),
             ("cost", "cost", "{:,.0f}"))


def check_objective(objective: str, priced: bool) -> str:
    """The objective's column; ConfigError for an unknown one, for one that needs a time to
    train without ``--tokens``/``--iterations`` or for cost without ``--gpu-hour-price``."""
    if objective not in OBJECTIVES:
        raise ConfigError(f"{objective!r} is not accepted; accepted: " + ", ".join(OBJECTIVES),
                          "objective")
    if objective not in SEARCH_RANKED and not priced:
        raise ConfigError(f"{objective} needs --tokens or --iterations", "objective")
    return OBJECTIVES[objective]


def choose(rows: Sequence[dict[str, Any]], objective: str) -> int:
    """Index of the row minimising the objective's column (then the iteration, then the
    order given)."""
    column = OBJECTIVES[objective]
    if column == "cost" and any(row.get("cost") is None for row in rows):
        raise ConfigError("cost needs --gpu-hour-price", "objective")
    return min(range(len(rows)), key=lambda i: (rows[i][column], rows[i]["iteration_s"], i))


def reason(chosen: dict[str, Any], fastest: dict[str, Any], objective: str) -> str:
    """One line: why ``chosen`` beats the iteration-best ``fastest`` under ``objective``."""
    parts = []
    for key, name, form in EXPLAINED:
        a, b = chosen.get(key), fastest.get(key)
        if a is None or b is None or a == b:
            continue
        parts.append(f"{name} {form.format(a)} vs {form.format(b)}")
    return (f"--objective {objective}: chose {chosen['layout']} over the iteration-best "
            f"{fastest['layout']}: " + "; ".join(parts))
