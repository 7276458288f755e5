"""One tuning budget for every policy with knobs: the same grid, the same search.

Every size knob — ByteScheduler's partition, US-Byte's unit, DDP's bucket, Horovod's fusion
threshold — is searched over ``SIZES`` (1 MiB to 64 MiB, powers of two, 7 values); a policy's
second knob over four values (ByteScheduler's credit: 1, 2, 4 or 8 partitions; Horovod's cycle:
1, 2.5, 5 or 10 ms). The search is exhaustive: every grid point and the policy's shipped default
are planned and simulated, and the fastest plan is kept, the default winning ties — so a tuned
variant is never slower than its default. This stands in for each tool's own tuner
(ByteScheduler's Bayesian optimisation, Horovod's autotuner) with the same budget for all.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from dlsched.dataparallel.plan import DPPlan
from dlsched.dataparallel.problem import DPProblem
from dlsched.dataparallel.simulate import iteration_time

MiB = 2**20
SIZES = tuple(2**k * MiB for k in range(7))  # 1, 2, 4, ..., 64 MiB
ONE_IN_FLIGHT = 0  # the credit multiple meaning "one message at a time"
CREDITS = (ONE_IN_FLIGHT, 2, 4, 8)  # ByteScheduler's and US-Byte's credit, in partitions
# ByteScheduler's shipped knobs (US-Byte runs on its core with the same): BYTESCHEDULER_PARTITION
# 1,000,000 fp32 elements, BYTESCHEDULER_CREDIT 4,000,000 elements = 4 partitions
DEFAULT_PARTITION = 1_000_000 * 4  # bytes
DEFAULT_CREDIT_MULTIPLE = 4
CYCLES = (1e-3, 2.5e-3, 5e-3, 10e-3)  # Horovod's cycle time, seconds


def size_text(num_bytes: float) -> str:
    """Bytes as MiB or KiB for settings columns, e.g. ``'25 MiB'``; whole millions of bytes
    as MB (ByteScheduler's and US-Byte's 1M-element default: ``'4 MB'``)."""
    if num_bytes >= MiB and num_bytes % MiB and not num_bytes % 10**6:
        return f"{num_bytes / 10**6:g} MB"
    if num_bytes >= MiB:
        return f"{num_bytes / MiB:g} MiB"
    return f"{num_bytes / 1024:g} KiB"


def credit_bytes(multiple: int, partition: int) -> float:
    """The credit (bytes) of ``multiple`` partitions of ``partition`` bytes; ``ONE_IN_FLIGHT``
    gives 1 byte, which admits exactly one message at a time (a block starts only while the
    running ones hold less than the credit)."""
    return 1.0 if multiple == ONE_IN_FLIGHT else float(multiple * partition)


def credit_text(credit: float) -> str:
    """A credit (bytes) for settings columns: 'one in flight' or e.g. '16 MiB'."""
    return "one in flight" if credit <= 1 else size_text(credit)


def grid_search(problem: DPProblem, build: Callable[..., DPPlan],
                grid: Mapping[str, Sequence[Any]], default: Mapping[str, Any],
                policy: str) -> DPPlan:
    """The fastest simulated plan of ``build(problem, **knobs)`` over the ``default`` knobs
    and every combination in ``grid`` (ties: the default, then grid order), named ``policy``."""
    names = list(grid)
    candidates = [dict(default)]
    for values in itertools.product(*grid.values()):
        knobs = dict(zip(names, values, strict=True))
        if knobs not in candidates:
            candidates.append(knobs)
    best, best_time = None, 0.0
    for knobs in candidates:
        plan = build(problem, **knobs)
        time = iteration_time(problem, plan)
        if best is None or time < best_time:
            best, best_time = plan, time
    assert best is not None
    return replace(best, policy=policy)


def credit_search(problem: DPProblem, build: Callable[..., DPPlan], size_knob: str,
                  policy: str, *, tune_size: bool,
                  credits: Sequence[int] = CREDITS) -> DPPlan:
    """``grid_search`` of a policy on ByteScheduler's core, whose knobs are a size (bytes;
    ``build``'s keyword ``size_knob``: ByteScheduler's partition, US-Byte's unit) and
    ``credit_multiple``: the credit over ``credits`` and, with ``tune_size``, the size over
    ``SIZES`` too (else the default partition only); the shipped default (``DEFAULT_PARTITION``,
    ``DEFAULT_CREDIT_MULTIPLE``) wins ties."""
    sizes = (DEFAULT_PARTITION, *SIZES) if tune_size else (DEFAULT_PARTITION,)
    return grid_search(problem, build, {size_knob: sizes, "credit_multiple": credits},
                       {size_knob: DEFAULT_PARTITION,
                        "credit_multiple": DEFAULT_CREDIT_MULTIPLE}, policy)
