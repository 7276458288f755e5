"""Plausibility rules of a data-parallel network calibration (``calibrate.time_loads``).

A calibration is measured again while one holds and refused after its last attempt (the
reasons, the means and why not medians: docs/runtime.md, *Trust: warm-up, spread, refusal*).
``timed`` is ``time_loads``' measurement: per load key (``none``, ``compute``, ``stream``,
``idle_stream``) the (bytes, mean seconds) per size, and under ``<key>_times`` the (bytes,
seconds of every repeat).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

ERROR_LIMIT = 0.15  # largest standard error of a size's mean, relative to the mean (see docs)
TOLERANCE_S = 20e-6  # a mean known within this holds (loopback one-way latency 39-66 us)
QUEUED_FLOOR = 0.5  # a queued message costs at least this times an idle one (fast_idle)
LOAD_NAMES = {"none": "idle", "compute": "loaded", "stream": "queued",
              "idle_stream": "queued idle"}


def implausible(timed: dict[str, Any], limit: float = ERROR_LIMIT,
                floor: float = QUEUED_FLOOR) -> str | None:
    """The first reason to refuse a calibration, one line, or None: a size whose mean is
    uncertain (``unsteady``), or an ``impossible`` value. Single repeats may scatter widely
    (a 4 KiB loopback all-reduce's repeats spread 43-1175% of their median on an idle
    16-core machine, 0.3-6 ms on the 2-core VM); the fit uses the mean, so it is the mean that
    must hold."""
    for load, size, relative, count in unsteady(timed, limit)[:1]:
        return (f"{LOAD_NAMES[load]} all-reduce of {size} B: the mean of its {count} repeats "
                f"is uncertain by {relative:.0%} (standard error; limit {limit:.0%} or "
                f"{TOLERANCE_S * 1e6:.0f} us; the machine is too busy to calibrate)")
    return impossible(timed, floor)


def unsteady(timed: dict[str, Any], limit: float = ERROR_LIMIT
             ) -> list[tuple[str, int, float, int]]:
    """(load, bytes, relative standard error, repeats) of every size whose mean's standard
    error is over ``limit`` of the mean and over ``TOLERANCE_S``."""
    found = []
    for load in LOAD_NAMES:
        for size, samples in timed.get(f"{load}_times", ()):
            relative = standard_error(samples)
            if relative > limit and relative * statistics.mean(samples) > TOLERANCE_S:
                found.append((load, int(size), relative, len(samples)))
    return found


def impossible(timed: dict[str, Any], floor: float = QUEUED_FLOOR) -> str | None:
    """Why a measurement holds an impossible value, one line, or None: a queued message,
    under load or idle, faster than ``floor`` times an idle one of the same size that waited
    for nothing (queued behind others, a message is not much faster than alone on idle
    ranks). That idle message is the lower quartile of the idle repeats (``fast_idle``), not
    their mean or median: on the 2-core VM a single 2-rank all-reduce of 4 KiB after a
    barrier takes 0.3-1 ms or, a third of the time, 2.5-4.5 ms (a woken gloo thread waits
    out another thread's scheduler slice; 4 ms ticks), which a message queued right behind
    another does not wait. The mean (1.5 ms) then called a queued 32 KiB message of 732 us
    impossible, and the median jumps between the two clusters from one measurement to the
    next; the lower quartile stays in the fast one."""
    idle = fast_idle(timed)
    for load in ("stream", "idle_stream"):
        for size, seconds in timed.get(load, ()):
            if size in idle and seconds < floor * idle[size]:
                where = "under load" if load == "stream" else "on idle ranks"
                return (f"queued all-reduce of {size} B {where}: {seconds * 1e6:.1f} us per "
                        f"message, below {floor:g}x its idle time {idle[size] * 1e6:.1f} us "
                        "(lower quartile of the idle repeats)")
    return None


def fast_idle(timed: dict[str, Any]) -> dict[int, float]:
    """Seconds per idle all-reduce that waited for nothing, per size (bytes): the lower
    quartile of its idle repeats (the repeat itself when there is one)."""
    return {size: _quartiles(samples)[0] if len(samples) > 1 else samples[0]
            for size, samples in timed["none_times"]}


def spread(samples: Sequence[float]) -> float:
    """The spread of repeated measurements: interquartile range / median (0 for fewer than
    two samples)."""
    if len(samples) < 2:
        return 0.0
    low, high = _quartiles(samples)
    middle = statistics.median(samples)
    return (high - low) / middle if middle > 0 else math.inf


def standard_error(samples: Sequence[float]) -> float:
    """How well repeated measurements know their mean: the standard error (sample standard
    deviation / sqrt(repeats)) over the mean (0 for fewer than two samples)."""
    if len(samples) < 2:
        return 0.0
    middle = statistics.mean(samples)
    error = statistics.stdev(samples) / math.sqrt(len(samples))
    return error / middle if middle > 0 else math.inf


def _quartiles(samples: Sequence[float]) -> tuple[float, float]:
    """Lower and upper quartile of two or more repeats (inclusive method: the repeats are the
    whole population, not a sample of a wider one)."""
    low, _, high = statistics.quantiles(samples, n=4, method="inclusive")
    return low, high
