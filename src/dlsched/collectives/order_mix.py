"""The best mix of dimension orders: minimise the most-loaded dimension (a small LP).

Each column is the per-dimension load (seconds per byte of buffer) of one way of routing a
chunk; columns are split into groups (e.g. RS orders and AG orders) whose weights each sum to 1.
HiGHS (through scipy) solves it exactly; with D dimensions there are D! columns per group.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def min_max_mix(columns: Sequence[np.ndarray], groups: Sequence[Sequence[int]],
                offset: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """Weights per column and the minimal max over dimensions of ``offset`` + weighted load.

    ``offset`` (seconds per dimension, default 0) is load every mix pays, such as step latency.
    """
    num = len(columns)
    load_matrix = np.column_stack(columns)
    fixed = np.zeros(load_matrix.shape[0]) if offset is None else np.asarray(offset, float)
    # Loads are ~1e-10 s/B: rescale to O(1) so the solver's absolute tolerances do not
    # round them to zero.
    scale = max(float(np.abs(load_matrix).max()), float(np.abs(fixed).max()), 1e-300)
    cost = np.zeros(num + 1)
    cost[-1] = 1.0
    a_ub = np.hstack([load_matrix / scale, -np.ones((load_matrix.shape[0], 1))])
    a_eq = np.zeros((len(groups), num + 1))
    for row, group in enumerate(groups):
        a_eq[row, list(group)] = 1.0
    from scipy.optimize import linprog

    result = linprog(cost, A_ub=a_ub, b_ub=-fixed / scale, A_eq=a_eq,
                     b_eq=np.ones(len(groups)), bounds=[(0, None)] * (num + 1), method="highs")
    if result.status != 0:
        raise RuntimeError(f"order-mix LP failed: {result.message}")
    return np.clip(result.x[:-1], 0.0, None), float(result.x[-1]) * scale
