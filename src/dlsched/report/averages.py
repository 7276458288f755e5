"""The averages summaries take over cases: the geometric mean, the one average of speedups and
other ratios (2x faster and 2x slower cancel), used by the sweep summaries and every paper
reproduction."""

from __future__ import annotations

import math
from collections.abc import Sequence


def geomean(values: Sequence[float]) -> float:
    """Geometric mean of positive numbers (a ratio in, a ratio out; a single value is returned
    exactly)."""
    if len(values) == 1:
        return values[0]
    return math.exp(math.fsum(math.log(v) for v in values) / len(values))
