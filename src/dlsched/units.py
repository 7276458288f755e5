"""Parse and format physical quantities at the edges of dlsched.

Inside dlsched every quantity has exactly one unit:

* time: seconds (``float``)
* data size: bytes (``int``)
* bandwidth: bytes per second (``float``)
* compute: FLOP and FLOP/s (``float``)

Decimal prefixes are powers of ten (``1 GB = 10**9 B``), binary prefixes powers of two
(``1 GiB = 2**30 B``).  A lower-case ``b`` means bits (``100 Gb/s = 12.5e9 B/s``).
"""

from __future__ import annotations

import math
import re

from dlsched.errors import UnitError

_DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
_TIME = {
    "s": 1.0,
    "sec": 1.0,
    "ms": 1e-3,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ns": 1e-9,
    "ps": 1e-12,
    "min": 60.0,
    "h": 3600.0,
}
_NUMBER = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
_QUANTITY = re.compile(rf"^\s*{_NUMBER}\s*([A-Za-zµμ/]*)\s*$")


def _split(text: str, what: str, examples: str) -> tuple[float, str]:
    match = _QUANTITY.match(text)
    if match is None:
        raise UnitError(f"cannot parse {text!r} as a {what}; expected a number and a unit such as "
                        f"{examples}")
    return float(match.group(1)), match.group(2)


def _prefix_factor(prefix: str) -> float | None:
    if prefix in _BINARY:
        return _BINARY[prefix]
    return _DECIMAL.get(prefix)


def _data_factor(unit: str) -> float | None:
    """Bytes per unit for a data unit like ``GB``, ``GiB``, ``Gb``, ``B``; None if unknown."""
    for suffix, scale in (("B", 1.0), ("b", 0.125), ("bit", 0.125), ("bits", 0.125)):
        if unit.endswith(suffix):
            factor = _prefix_factor(unit[: -len(suffix)])
            if factor is not None:
                return factor * scale
    return None


def parse_bytes(value: str | int | float) -> int:
    """Parse a data size ("1 GiB", "100 MB", "4096") into bytes (int); plain numbers are bytes."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        number, unit = float(value), "B"
    else:
        number, unit = _split(str(value), "data size", "'100 MB', '1 GiB', '4096 B'")
    factor = _data_factor(unit or "B")
    if factor is None:
        raise UnitError(f"unknown data-size unit {unit!r} in {value!r}; accepted: B, kB, MB, GB, "
                        "TB, KiB, MiB, GiB, TiB (and bits: b, Mb, Gb)")
    result = number * factor
    if not math.isfinite(result):
        raise UnitError(f"data size {value!r} is not finite")
    return round(result)


def parse_bandwidth(value: str | int | float) -> float:
    """Parse a bandwidth ("200 GB/s", "100 Gb/s", "25 Gbps") into bytes/s; plain numbers are B/s."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    number, unit = _split(str(value), "bandwidth", "'200 GB/s', '100 Gb/s', '25 Gbps'")
    if unit.endswith(("bps", "Bps")):
        unit = unit[:-2] + "/s"
    if not unit.endswith("/s"):
        raise UnitError(f"bandwidth {value!r} needs a per-second unit such as GB/s, GiB/s or Gb/s")
    factor = _data_factor(unit[:-2])
    if factor is None:
        raise UnitError(f"unknown bandwidth unit {unit!r} in {value!r}; accepted: B/s, MB/s, GB/s, "
                        "GiB/s, Mb/s, Gb/s, Gbps")
    return number * factor


def parse_time(value: str | int | float) -> float:
    """Parse a duration ("700 ns", "1.5 ms", "2 s") into seconds; plain numbers are seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    number, unit = _split(str(value), "duration", "'700 ns', '20 us', '1.5 ms'")
    if unit not in _TIME:
        raise UnitError(f"unknown time unit {unit!r} in {value!r}; accepted: "
                        + ", ".join(sorted(_TIME)))
    return number * _TIME[unit]


def parse_flops(value: str | int | float) -> float:
    """Parse a compute rate ("312 TFLOP/s", "19.5 TFLOPS") into FLOP/s; plain numbers are FLOP/s."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    number, unit = _split(str(value), "compute rate", "'312 TFLOP/s', '19.5 TFLOPS'")
    for suffix in ("FLOP/s", "FLOPS", "FLOPs", "flop/s"):
        if unit.endswith(suffix):
            factor = _DECIMAL.get(unit[: -len(suffix)])
            if factor is not None:
                return number * factor
    raise UnitError(f"unknown compute-rate unit {unit!r} in {value!r}; accepted: FLOP/s, GFLOP/s, "
                    "TFLOP/s, PFLOP/s (or FLOPS)")


def _scaled(value: float, steps: list[tuple[float, str]], digits: int) -> str:
    for scale, name in steps:
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g} {name}"
    scale, name = steps[-1]
    return f"{value / scale:.{digits}g} {name}"


def format_bytes(num_bytes: float, digits: int = 4) -> str:
    """Format bytes with a decimal prefix, e.g. ``1.5e8`` -> ``'150 MB'``."""
    steps = [(1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1.0, "B")]
    return _scaled(float(num_bytes), steps, digits)


def format_time(seconds: float, digits: int = 4) -> str:
    """Format seconds with a readable unit, e.g. ``0.0021`` -> ``'2.1 ms'``."""
    steps = [(1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")]
    return _scaled(float(seconds), steps, digits)


def format_duration(seconds: float) -> str:
    """A duration a person reads at a glance: ``format_time`` below a minute, else minutes
    and seconds (``'2 min 51 s'``) or hours and minutes (``'3 h 07 min'``)."""
    if seconds < 59.5:
        return format_time(seconds, 2)
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    minutes = round(seconds / 60)
    return f"{minutes // 60:,} h {minutes % 60:02d} min"


def format_bandwidth(bytes_per_second: float, digits: int = 4) -> str:
    """Format a bandwidth in bytes/s, e.g. ``2e11`` -> ``'200 GB/s'``."""
    steps = [(1e12, "TB/s"), (1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s"), (1.0, "B/s")]
    return _scaled(float(bytes_per_second), steps, digits)
