"""Fit a GPU's 16-bit GEMM efficiency to a user's own measured runs (``dlsched calibrate runs``).

The runs (``ledger.user_runs``: the ledger's schema) are priced by the job evaluator as
``dlsched validate`` prices the ledger. One constant is fitted, the one the a100 preset itself
was fitted by (presets/gpus.yaml): ``efficiency.gemm.bf16``, the fraction of the 16-bit dense
peak the GPU's large GEMMs reach (fp16 uses the same entry). Fitted on the log of predicted
over measured iteration time:

* per run, the efficiency at which that run is predicted exactly (bisection over
  ``BOUNDS``; a run that no efficiency within them explains is reported at the bound);
* jointly, the efficiency minimizing the sum of squared log time ratios over the runs
  (bounded scalar minimization): the fitted value. Its uncertainty is the spread of the
  per-run fits: their standard deviation over the square root of their count (the standard
  error of their mean), with their range;
* leave-one-out: each run predicted by the joint fit of the others (its error held out).

Refused, with one line saying why (``ConfigError``), before anything is written: fewer than
``MIN_RUNS`` runs the evaluator can price; runs on more than one GPU model; runs whose
predicted times barely depend on the constant (at most ``MIN_ELASTICITY``: a 1% change of the
efficiency moves no run's predicted time by more than that many percent); a joint fit at a
bound (within ``AT_BOUND`` of it). Not fitted, and said so: the network's efficiency (the GPU
file holds compute constants only; the node preset's NVLink and NIC figures stay).

The written GPU file is the runs' compute preset with the fitted efficiency and its source
(the file, the runs, value, uncertainty and leave-one-out error), a file every ``--gpu`` and
``--device`` accepts (``dlsched plan --gpu FILE``, ``dlsched validate --ledger RUNS --gpu
FILE``).
"""

from __future__ import annotations

import copy
import itertools
import math
import statistics
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from dlsched.config import bundled_presets
from dlsched.errors import ConfigError
from dlsched.ledger.predict import GPU_PRESETS
from dlsched.ledger.schema import LedgerRow
from dlsched.ledger.user_runs import Priced, price

PARAMETER = "efficiency.gemm.bf16"
BOUNDS = (0.05, 1.0)  # fraction of the 16-bit dense peak
MIN_RUNS = 3  # two to fit on, one left out
MIN_ELASTICITY = 0.1  # % of predicted time per % of efficiency, on the most sensitive run
AT_BOUND = 0.005
TOLERANCE = 1e-5  # of the efficiency, for the bisection and the joint fit


@dataclass(frozen=True)
class RunsFit:
    """A calibration: the GPU preset the runs use, the fitted ``value`` of ``PARAMETER``,
    its standard error and the per-run fits' range, per run the record (``rows``), the
    GPU file's document and what was not fitted (``notes``)."""

    preset: str
    value: float
    standard_error: float
    per_run_range: tuple[float, float]
    rows: list[dict[str, Any]]
    document: dict[str, Any]
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def loo_mean_abs_error(self) -> float:
        """Mean |leave-one-out error| over the runs."""
        return sum(abs(r["loo_error"]) for r in self.rows) / len(self.rows)


class _Trial:
    """GPU files of the runs' preset at trial efficiencies, in a temporary folder (a new name
    per value: the evaluator caches presets by name)."""

    def __init__(self, preset: str, folder: Path) -> None:
        self.base = bundled_presets("gpus.yaml")[preset]
        self.folder = folder
        self.files: dict[float, str] = {}
        self.counter = itertools.count()

    def gpu(self, efficiency: float) -> str:
        """A GPU file with ``efficiency`` as the 16-bit GEMM fraction."""
        efficiency = float(efficiency)
        if efficiency not in self.files:
            path = self.folder / f"trial-{next(self.counter)}.yaml"
            path.write_text(yaml.safe_dump(with_efficiency(self.base, efficiency)))
            self.files[efficiency] = str(path)
        return self.files[efficiency]


def with_efficiency(preset: dict[str, Any], efficiency: float) -> dict[str, Any]:
    """The preset's document with ``efficiency`` as its 16-bit GEMM fraction."""
    document = copy.deepcopy(preset)
    document["efficiency"]["gemm"]["bf16"] = efficiency
    return document


def preset_of(rows: Sequence[LedgerRow]) -> str:
    """The one compute preset of the runs' GPU model; ConfigError otherwise."""
    gpus = sorted({row.hardware.gpu for row in rows})
    if len(gpus) != 1:
        raise ConfigError(f"hardware.gpu: the runs use {', '.join(gpus)}; calibrate one GPU "
                          "model at a time")
    if gpus[0] not in GPU_PRESETS:
        raise ConfigError(f"hardware.gpu: no dlsched preset for {gpus[0]} to calibrate; "
                          f"accepted: {', '.join(GPU_PRESETS)}")
    return GPU_PRESETS[gpus[0]][1]


def _log_ratio(row: LedgerRow, gpu: str) -> float:
    return math.log(price(row, gpu).time_ratio)


def _bisect(row: LedgerRow, trial: _Trial) -> float:
    """The efficiency within ``BOUNDS`` at which ``row`` is predicted exactly (a bound when
    none is)."""
    low, high = BOUNDS
    if _log_ratio(row, trial.gpu(high)) > 0:
        return high  # slower than measured even at the upper bound
    if _log_ratio(row, trial.gpu(low)) < 0:
        return low
    while high - low > TOLERANCE:
        middle = (low + high) / 2
        low, high = (middle, high) if _log_ratio(row, trial.gpu(middle)) > 0 else (low, middle)
    return (low + high) / 2


def _joint(rows: Sequence[LedgerRow], trial: _Trial) -> float:
    """The efficiency minimizing the runs' summed squared log time ratios."""
    from scipy.optimize import minimize_scalar

    def loss(efficiency: float) -> float:
        return sum(_log_ratio(row, trial.gpu(round(float(efficiency), 6))) ** 2 for row in rows)

    found = minimize_scalar(loss, bounds=BOUNDS, method="bounded",
                            options={"xatol": TOLERANCE})
    return round(float(found.x), 6)


def _priceable(rows: Sequence[LedgerRow]) -> tuple[list[LedgerRow], list[str]]:
    """The runs the evaluator prices, and a line per run it cannot."""
    kept, left = [], []
    for row in rows:
        try:
            price(row)
            kept.append(row)
        except ConfigError as error:
            left.append(str(error))
    return kept, left


def _elasticity(row: LedgerRow, trial: _Trial, at: float) -> float:
    """-d log(time) / d log(efficiency) of ``row`` near ``at`` (a 2% step)."""
    up, down = at * 1.01, at / 1.01
    return -(_log_ratio(row, trial.gpu(up)) - _log_ratio(row, trial.gpu(down))) / \
        math.log(up / down)


def fit_runs(rows: Sequence[LedgerRow], source: str,
             progress: Callable[[str], None] | None = None) -> RunsFit:
    """Fit ``PARAMETER`` to ``rows`` (module docstring); ``source`` names the runs file in the
    GPU file's provenance."""
    say = progress or (lambda _: None)
    preset = preset_of(rows)
    kept, left = _priceable(rows)
    if len(kept) < MIN_RUNS:
        why = f" ({'; '.join(left)})" if left else ""
        raise ConfigError(f"runs: {len(kept)} run(s) the evaluator can price; a fit needs at "
                          f"least {MIN_RUNS} (two to fit, one to leave out){why}")
    base = bundled_presets("gpus.yaml")[preset]["efficiency"]["gemm"]["bf16"]
    with tempfile.TemporaryDirectory() as folder:
        trial = _Trial(preset, Path(folder))
        elasticities = [_elasticity(row, trial, base) for row in kept]
        if max(elasticities) < MIN_ELASTICITY:
            raise ConfigError(f"runs: {PARAMETER} is not exercised: a 1% change moves no "
                              f"run's predicted time by more than {max(elasticities):.2f}% "
                              f"(needed: {MIN_ELASTICITY}%); the runs are not GEMM-bound")
        say("fitting each run")
        per_run = [_bisect(row, trial) for row in kept]
        say("fitting jointly")
        value = _joint(kept, trial)
        if min(abs(value - bound) for bound in BOUNDS) < AT_BOUND:
            raise ConfigError(f"runs: the fit of {PARAMETER} lands at its bound ({value:.4f}, "
                              f"bounds {BOUNDS[0]}-{BOUNDS[1]}): the runs are "
                              f"{'faster' if value > 0.5 else 'slower'} than any efficiency "
                              "explains; check their settings (recompute, precision, "
                              "overlaps) before calibrating")
        say("leaving each run out")
        loo = [_joint([r for r in kept if r is not row], trial) for row in kept]
        before = [price(row) for row in kept]
        after = [price(row, trial.gpu(value)) for row in kept]
        held = [price(row, trial.gpu(v)) for row, v in zip(kept, loo, strict=True)]
    spread = statistics.stdev(per_run)
    records = [_record(*items) for items in zip(before, after, held, per_run, elasticities,
                                                 strict=True)]
    notes = tuple(f"not priced: {line}" for line in left)
    if any(row.hardware.gpus > row.hardware.gpus_per_node for row in kept):
        notes += ("network efficiency not fitted: the GPU file holds compute constants "
                  "only; the node preset's NVLink and NIC figures stay",)
    fit = RunsFit(preset, value, spread / math.sqrt(len(per_run)), (min(per_run), max(per_run)),
                  records, {}, notes)
    return replace(fit, document=gpu_document(fit, base, source, kept))


def _record(before: Priced, after: Priced, held: Priced, own: float,
            elasticity: float) -> dict[str, Any]:
    """One run: published, predicted by the preset and by the fit, the leave-one-out
    prediction, its own fit and how much its time depends on the constant."""
    return {**after.record(), "preset_predicted": before.predicted,
            "preset_error": before.error, "loo_predicted": held.predicted,
            "loo_error": held.error, "own_fit": own, "elasticity": elasticity}


def gpu_document(fit: RunsFit, base: float, source: str,
                 rows: Sequence[LedgerRow]) -> dict[str, Any]:
    """The GPU file: the preset with the fitted efficiency and where it comes from."""
    preset = bundled_presets("gpus.yaml")[fit.preset]
    document = with_efficiency(preset, round(fit.value, 4))
    document["description"] = f"{preset['description']}, calibrated on {source}"
    low, high = fit.per_run_range
    document.setdefault("sources", {})[PARAMETER] = (
        f"fitted by `dlsched calibrate runs` to {len(rows)} measured runs of {source} "
        f"({', '.join(row.id for row in rows)}): {fit.value:.4f} +- {fit.standard_error:.4f} "
        f"(standard error of the per-run fits, which range {low:.4f}-{high:.4f}); "
        f"leave-one-out mean |error| {fit.loo_mean_abs_error:.1%}; the {fit.preset} preset "
        f"had {base}")
    return document
