"""Parse counts with a decimal suffix at the edges: "15.6T" tokens, "1.2M" iterations."""

from __future__ import annotations

import math
import re

from dlsched.errors import ConfigError

SUFFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12, "P": 1e15}
_COUNT = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)\s*([kKMBGTP]?)\s*$")


def parse_count(value: str | int | float, option: str) -> float:
    """A positive count: a number, optionally with k, M, B (or G), T or P (powers of ten;
    "15.6T" = 1.56e13). ConfigError naming ``option`` (if not empty) otherwise."""
    name = f"{option}: " if option else ""
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    else:
        match = _COUNT.match(str(value))
        if match is None:
            raise ConfigError(f"{name}{value!r} is not accepted; accepted: a number with an "
                              "optional k, M, B, T or P suffix, e.g. '15.6T'")
        number = float(match.group(1)) * SUFFIX[match.group(2)]
    if not (math.isfinite(number) and number > 0):
        raise ConfigError(f"{name}{value!r} is not accepted; accepted: a finite count > 0")
    return number
