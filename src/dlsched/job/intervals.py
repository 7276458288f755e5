"""How sure each number of a plan is: a 90% interval on its iteration time, MFU and memory per
GPU from the ledger's held-out residuals (``job.envelope``), widened where the plan leaves what
the ledger has checked, and a note naming each such feature.

**Base interval** (split conformal, as ``dlsched.ledger.score``): the half-width ``q`` is the
``ceil((n + 1) 0.9)``-th smallest ``|error|`` of the ``n`` residuals of the plan's family (time
or memory) whose runs share the most of the plan's categorical features (``job.envelope``:
GPU, 16-bit format, schedule or no pipeline, recomputation, ZeRO stage, microbatch, TP/CP/EP
used): the residuals are taken in order of the number of features that differ, whole levels
at a time, until there are ``MIN_ROWS`` (9, the fewest with a finite 90% quantile). The
interval on the measured value is ``[predicted / (1 + q), predicted / (1 - q)]`` (the values
whose error would be within ``q``; unbounded above when ``q >= 1``).

**Outside the envelope** (``uncovered``): a categorical value no residual of the family has
(schedule zb-h1, a GPU no run used; its base ``q`` is also at least that of the plan with the
value replaced by each value the residuals have, ``unchecked_base``: the nearest runs of a
value nobody ran can be a calmer set than those of a value many ran, and an unchecked value
must not look surer than a checked one, or ``--objective upper`` would prefer it), a scale
outside the range of the residuals that share one of the plan's values (``recomputation none``
priced only up to 406B parameters, ``microbatch 1`` only up to 64 stages; sizes within
``SIZE_TOLERANCE``), and an MFU above that of every priced run of the GPU in the plan's
tensor-core format (FP8, or 16-bit) with its expert parallelism (``frontier``). Each adds
``widening`` to ``q``: the excess the ledger itself shows when a feature value is hidden, at
the same 90% level (for every categorical feature value, the residuals of the runs that have it
get their base ``q`` from the others alone; the 90% conformal quantile of ``max(0, |error| -
q)`` over all of them; unbounded with fewer than ``MIN_ROWS``), added once per feature (errors
of independent unchecked effects add at worst). Above that best priced MFU the time's upper end
is also at least the time at it (no such run has been measured faster). MFU's interval is the
time's, inverted.

**Memory** follows the same rule with the memory residuals. With fewer than ``MIN_ROWS`` of
them no 90% interval can be calibrated, and it is unvalidated: ``q`` is the larger of
``pipeline.chains.memory_model.FRAGMENTATION`` (0.15: the share of GPU memory PyTorch's caching
allocator loses to fragmentation in LLM training, GMLake, Guo et al. ASPLOS 2024) and the
largest memory residual, and a note says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from itertools import product
from typing import TYPE_CHECKING, Any

from dlsched.job.envelope import (
    FEATURES,
    Features,
    Residual,
    bundled_residuals,
    features,
    label,
)
from dlsched.pipeline.chains.memory_model import FRAGMENTATION

if TYPE_CHECKING:
    from dlsched.job.evaluation.evaluate import Job, JobResult

LEVEL = 0.9
MIN_ROWS = 9
"""The fewest residuals whose 90% conformal quantile is finite: ceil((n + 1) 0.9) <= n."""
SIZE_TOLERANCE = 0.01
"""Relative slack of the parameter-count range: one architecture counted from a bundled spec and
from a ledger row's published shape differs by far less (Llama 3 70B: 70.554B vs 70.558B, a
norm's and a bias's parameters), two models of the ledger by 2% or more (310B vs 316B)."""


_SEEN: dict[int, Sequence[Residual]] = {}
_MEMO: dict[tuple[int, str, object], Any] = {}
MAX_TABLES = 16  # residual tables remembered at once (a search uses one or two)


def _memo(table: Sequence[Residual], what: str, key: object, compute: Callable[[], Any]) -> Any:
    """``compute()`` remembered per residual table (by identity: hashing a table of ~150
    residuals costs more than most of what is remembered) and ``key``; the search asks the
    same plan features of the same table for thousands of layouts."""
    ident = id(table)
    if _SEEN.get(ident) is not table:
        if len(_SEEN) >= MAX_TABLES:
            _SEEN.clear()
            _MEMO.clear()
        for stale in [k for k in _MEMO if k[0] == ident]:  # an earlier table's id, reused
            del _MEMO[stale]
        _SEEN[ident] = table
    entry = (ident, what, key)
    if entry not in _MEMO:
        _MEMO[entry] = compute()
    return _MEMO[entry]


def conformal_quantile(scores: Sequence[float], level: float = LEVEL) -> float:
    """The ``ceil((n + 1) level)``-th smallest of ``scores`` (inf when that exceeds n): the
    split-conformal half-width that covers a new exchangeable score with probability >=
    ``level``."""
    rank = math.ceil((len(scores) + 1) * level - 1e-12)
    return sorted(scores)[rank - 1] if rank <= len(scores) else math.inf


def distance(a: Features, b: Features) -> int:
    """How many categorical features differ."""
    return sum(x != y for x, y in zip(a.values, b.values, strict=True))


def nearest(plan: Features, residuals: Sequence[Residual]) -> list[Residual]:
    """The residuals of the runs nearest ``plan``: whole distance levels, nearest first, until
    ``MIN_ROWS`` (all when fewer); remembered per table and categorical values."""
    return _memo(residuals, "nearest", plan.values, lambda: _nearest(plan, residuals))


def _nearest(plan: Features, residuals: Sequence[Residual]) -> list[Residual]:
    scored = [(distance(plan, r.features), r) for r in residuals]
    chosen: list[Residual] = []
    for level in sorted({d for d, _ in scored}):
        if len(chosen) >= MIN_ROWS:
            break
        chosen.extend(r for d, r in scored if d == level)
    return chosen


def base_half_width(plan: Features, residuals: Sequence[Residual]) -> float:
    """The base ``q`` of ``plan`` (module docstring)."""
    return conformal_quantile([abs(r.error) for r in nearest(plan, residuals)])


def widening(residuals: Sequence[Residual]) -> float:
    """What each uncovered feature adds to ``q`` (module docstring): the 90% conformal
    quantile of the excesses ``max(0, |error| - q)`` of every residual whose feature value is
    hidden from its calibration (values hidden only while ``MIN_ROWS`` others are left);
    remembered per table."""
    return _memo(residuals, "widening", None, lambda: _widening(residuals))


def _widening(residuals: Sequence[Residual]) -> float:
    excess = []
    for index, name in enumerate(FEATURES):
        for value in {r.features.values[index] for r in residuals}:
            others = [r for r in residuals if r.features.get(name) != value]
            if len(others) < MIN_ROWS:
                continue
            excess.extend(max(0.0, abs(r.error) - conformal_quantile(
                [abs(x.error) for x in _nearest(r.features, others)]))  # not remembered:
                for r in residuals if r.features.get(name) == value)  # each is used once
    return conformal_quantile(excess)


def _billions(parameters: float) -> str:
    value = parameters / 1e9
    return f"{value:.1f}B" if value < 100 else f"{value:.0f}B"


def _range(values: Sequence[float]) -> tuple[float, float]:
    return min(values), max(values)


def uncovered(plan: Features, residuals: Sequence[Residual], mfu: float | None = None
              ) -> list[str]:
    """Each feature of ``plan`` no residual covers (module docstring), as a note names it."""
    found = []
    for name in FEATURES:
        value = plan.get(name)
        ranges = _memo(residuals, "sharing", (name, value),
                       lambda name=name, value=value: _sharing(name, value, residuals))
        if ranges is None:
            found.append(f"{label(name, value)} (no priced run)")
            continue
        (low, high), (first, last) = ranges
        if not low * (1 - SIZE_TOLERANCE) <= plan.parameters <= high * (1 + SIZE_TOLERANCE):
            found.append(f"{label(name, value)} at {_billions(plan.parameters)} parameters "
                         f"(priced runs: {_billions(low)}-{_billions(high)})")
        if not first <= plan.stages <= last:
            found.append(f"{label(name, value)} at {plan.stages} pipeline stages (priced runs: "
                         f"{first:g}-{last:g})")
    above = _above_frontier(plan, residuals, mfu)
    return found if above is None else [*found, above]


def _sharing(name: str, value: object, residuals: Sequence[Residual]
             ) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """The parameter and stage ranges of the residuals whose feature ``name`` is ``value``
    (None: none is)."""
    sharing = [r.features for r in residuals if r.features.get(name) == value]
    if not sharing:
        return None
    return _range([f.parameters for f in sharing]), _range([f.stages for f in sharing])


def _above_frontier(plan: Features, residuals: Sequence[Residual], mfu: float | None
                    ) -> str | None:
    """The note of an MFU above every priced run of the plan's GPU, tensor-core format and
    expert parallelism (None: not above)."""
    best = frontier(plan, residuals)
    if mfu is None or best is None or mfu <= best:
        return None
    kind = f"{_format_class(plan.get('precision'))}{' EP' if plan.get('ep') else ''}"
    return f"MFU {mfu:.1%} above every priced {plan.get('gpu')} {kind} run (best {best:.1%})"


def _format_class(precision: object) -> str:
    """``fp8``, ``fp4`` (NVFP4, ``job.envelope.features``) or ``16-bit``: the tensor-core
    format whose runs bound a plan's MFU."""
    return precision if precision in ("fp8", "fp4") else "16-bit"


def frontier(plan: Features, residuals: Sequence[Residual]) -> float | None:
    """The highest published MFU of a priced run on the plan's GPU, in the plan's tensor-core
    format class, with expert parallelism as the plan (None: no such run). MFU counts the
    model's FLOPs against the GPU's 16-bit peak whatever the run's format, so an FP8 run
    reaches 75-83% on H100 and GB200 where the best 16-bit one reaches 62%: a 16-bit plan is
    bounded by 16-bit runs, an FP8 plan by FP8 ones (bf16 and fp16 share the 16-bit tensor
    cores' peak). Expert-parallel runs spend time no dense run has (the All-to-Alls, the
    router, small expert GEMMs) and publish lower MFU (GB200's 16-bit runs are all MoE, at
    35%): they bound expert-parallel plans, dense runs dense ones."""
    key = (plan.get("gpu"), _format_class(plan.get("precision")), plan.get("ep"))
    return _memo(residuals, "frontier", key, lambda: max(
        (r.mfu_published for r in residuals if r.mfu_published is not None
         and (r.features.get("gpu"), _format_class(r.features.get("precision")),
              r.features.get("ep")) == key), default=None))


@dataclass(frozen=True)
class Bounds:
    """One number's interval: ``low``, ``high`` (inf: unbounded), the half-width ``q``, the
    residuals it was calibrated on (``rows``; 0: unvalidated) and the uncovered features."""

    low: float
    high: float
    q: float
    rows: int
    outside: tuple[str, ...]


def upper_end(value: float, q: float) -> float:
    """The upper end of ``value``'s interval of half-width ``q``: ``value / (1 - q)`` (inf
    when ``q >= 1``)."""
    return value / (1 - q) if q < 1 else math.inf


def _bounds(value: float, q: float, rows: int, outside: Sequence[str]) -> Bounds:
    return Bounds(value / (1 + q), upper_end(value, q), q, rows, tuple(outside))


def family_residuals(family: str, residuals: Sequence[Residual] | None = None
                     ) -> tuple[Residual, ...]:
    """The residuals of ``family`` (default: the bundled table's)."""
    chosen = bundled_residuals() if residuals is None else residuals
    return _memo(chosen, "family", family,
                 lambda: tuple(r for r in chosen if r.family == family))


def _envelope(plan: Features, table: tuple[Residual, ...]) -> tuple[float, tuple[str, ...], int]:
    """``plan``'s half-width without the MFU term, its uncovered features and the residuals
    its base interval is built on (remembered: the search asks it of every layout)."""
    def compute() -> tuple[float, tuple[str, ...], int]:
        outside = tuple(uncovered(plan, table))
        return _half_width(plan, table, outside), outside, len(nearest(plan, table))
    return _memo(table, "envelope", plan, compute)


def _half_width(plan: Features, table: tuple[Residual, ...], outside: Sequence[str]) -> float:
    """The base ``q`` (``unchecked_base`` where a categorical value is unpriced) plus the
    widening once per uncovered feature."""
    base = unchecked_base(plan, table)
    return base + len(outside) * widening(table) if outside else base


def unchecked_base(plan: Features, residuals: Sequence[Residual]) -> float:
    """``plan``'s base ``q``, at least that of the plan with its categorical values no
    residual has replaced, together, by any values the residuals have (module docstring: an
    unpriced value is as uncertain as the least certain priced one); remembered per table and
    plan."""
    return _memo(residuals, "unchecked", plan, lambda: _unchecked_base(plan, residuals))


def _unchecked_base(plan: Features, residuals: Sequence[Residual]) -> float:
    choices = []
    for index, name in enumerate(FEATURES):
        seen = _memo(residuals, "values", name, lambda index=index: sorted(
            {r.features.values[index] for r in residuals}, key=repr))
        choices.append((plan.values[index],) if plan.values[index] in seen else tuple(seen))
    return max(base_half_width(replace(plan, values=values), residuals)
               for values in product(*choices))


def time_bounds(plan: Features, seconds: float, mfu: float | None,
                residuals: Sequence[Residual] | None = None) -> Bounds:
    """The iteration time's interval (module docstring); ``mfu`` None leaves the MFU
    frontier out (the search's lower bound on a layout before it is evaluated)."""
    table = family_residuals("time", residuals)
    if not table:
        return Bounds(0.0, math.inf, math.inf, 0, ("no priced time residual",))
    q, outside, rows = _envelope(plan, table)
    above = _above_frontier(plan, table, mfu)
    if above is None:
        return _bounds(seconds, q, rows, outside)
    outside = (*outside, above)
    bounds = _bounds(seconds, _half_width(plan, table, outside), rows, outside)
    at_best = seconds * mfu / frontier(plan, table)  # type: ignore[operator]
    return replace(bounds, high=max(bounds.high, at_best))


def memory_bounds(plan: Features, peak: float, residuals: Sequence[Residual] | None = None
                  ) -> Bounds:
    """The peak memory's interval: from the memory residuals, or, with fewer than
    ``MIN_ROWS``, not a calibrated 90% one (module docstring)."""
    table = family_residuals("memory", residuals)
    if len(table) < MIN_ROWS:
        return _bounds(peak, max([FRAGMENTATION, *(abs(r.error) for r in table)]), len(table),
                       ())
    outside = tuple(uncovered(plan, table))
    q = _half_width(plan, table, outside)
    return _bounds(peak, q, len(nearest(plan, table)), outside)


def interval_columns(job: Job, result: JobResult,
                     residuals: Sequence[Residual] | None = None) -> dict[str, object]:
    """A plan row's interval columns: ``iteration_low_s``/``iteration_high_s``,
    ``mfu_low``/``mfu_high``, ``memory_gib_low``/``memory_gib_high`` (None for an unbounded
    end), the residuals each was calibrated on and the features outside the envelope."""
    plan = features(job, result.layout)
    time = time_bounds(plan, result.iteration_s, result.mfu, residuals)
    memory = memory_bounds(plan, result.memory_bytes / 2**30, residuals)
    return {"iteration_low_s": time.low, "iteration_high_s": _finite(time.high),
            "mfu_low": result.mfu * result.iteration_s / time.high,
            "mfu_high": result.mfu * result.iteration_s / time.low,
            "memory_gib_low": memory.low, "memory_gib_high": _finite(memory.high),
            "interval_rows": time.rows, "memory_interval_rows": memory.rows,
            "outside_envelope": list(time.outside),
            "memory_outside_envelope": list(memory.outside)}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def envelope_notes(rows: Sequence[dict[str, Any]]) -> list[str]:
    """One note per row outside the envelope, naming each uncovered feature, and one per
    memory interval calibrated on too few runs."""
    notes = []
    for row in rows:
        outside = [*row["outside_envelope"],
                   *(f"memory: {what}" for what in row["memory_outside_envelope"])]
        if outside:
            notes.append(f"{row['layout']}: outside the validated envelope (90% interval "
                         "widened for each): " + "; ".join(outside))
    runs = sorted({row["memory_interval_rows"] for row in rows})
    return notes + [memory_note(n) for n in runs if n < MIN_ROWS]


def memory_note(runs: int) -> str:
    """The note of a memory interval calibrated on ``runs`` < ``MIN_ROWS`` residuals."""
    return (f"memory per GPU: {runs} of the priced ledger runs measure it, fewer than the "
            f"{MIN_ROWS} a 90% interval needs, so its interval is unvalidated: "
            f"+-{FRAGMENTATION:.0%} (the allocator's fragmentation share, GMLake) or the largest "
            "memory residual if larger")

