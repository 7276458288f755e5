"""Fit a GPU's 16-bit GEMM efficiency, and the host's kernel-launch cost where the runs
exercise it, to a user's own measured runs (``dlsched calibrate runs``).

The runs (``ledger.user_runs``: the ledger's schema) are priced by the job evaluator as
``dlsched validate`` prices the ledger. Two compute constants of the GPU file can be fitted:

* ``efficiency.gemm.bf16`` (``PARAMETER``), the fraction of the 16-bit dense peak the GPU's
  large GEMMs reach (fp16 uses the same entry): the constant the a100 preset itself was fitted
  by (presets/gpus.yaml). Always fitted.
* the host's launch cost per kernel (``HOST``): ``kernel_overhead`` and ``backward_overhead``
  scaled by one factor, their ratio kept (it is the H100 host's measurement, presets/gpus.yaml).
  The presets carry the H100 host's costs under eager PyTorch 2.11; another host, another
  PyTorch or a framework with more Python per layer (Megatron-DeepSpeed's custom autograd
  functions) launches slower or faster, and nothing published prices that host. Fitted only
  when the runs exercise it (``MIN_ELASTICITY``: a 1% change of the launch cost moves some
  run's predicted time by more than that many percent: the run's blocks are launch-bound,
  ``models.compute.CalibratedCompute.repeated_time``); otherwise kept, and said so.

Fitted on the log of predicted over measured iteration time:

* jointly, the constants minimizing the sum of squared log time ratios over the runs
  (bounded scalar minimization for the efficiency alone; bounded Nelder-Mead on the
  efficiency and the log of the launch factor for both): the fitted values;
* per run, the efficiency at which that run is predicted exactly with the launch factor at
  its joint fit (bisection over ``BOUNDS``; a run no efficiency within them explains is
  reported at the bound); the efficiency's uncertainty is their spread: standard deviation over
  the square root of their count (the standard error of their mean), with their range;
* leave-one-out: each run predicted by the joint fit of the others (its error held out);
  the launch factor's uncertainty is the jackknife standard error of those fits,
  sqrt((n - 1) / n x sum (f_i - mean f)^2).

Refused, with one line saying why (``ConfigError``), before anything is written: fewer than
``MIN_RUNS`` runs the evaluator can price; runs on more than one GPU model; runs whose
predicted times barely depend on the GEMM efficiency (at most ``MIN_ELASTICITY``); a joint fit
at a bound (within ``AT_BOUND`` of it). Not fitted, and said so: the network's efficiency (the
GPU file holds compute constants only; the node preset's NVLink and NIC figures stay).

The written GPU file is the runs' compute preset with the fitted constants and their source
(the file, the runs, values, uncertainties and leave-one-out error), a file every ``--gpu``
and ``--device`` accepts (``dlsched plan --gpu FILE``, ``dlsched validate --ledger RUNS --gpu
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

import numpy as np
import yaml

from dlsched.config import bundled_presets
from dlsched.errors import ConfigError
from dlsched.ledger.predict import GPU_PRESETS
from dlsched.ledger.schema import LedgerRow
from dlsched.ledger.user_runs import Priced, price
from dlsched.units import parse_time

PARAMETER = "efficiency.gemm.bf16"
HOST = "kernel_overhead"  # with backward_overhead at the preset's ratio (module docstring)
BOUNDS = (0.05, 1.0)  # fraction of the 16-bit dense peak
HOST_BOUNDS = (0.1, 10.0)  # factor on the preset's launch costs
MIN_RUNS = 3  # two to fit on, one left out
MIN_ELASTICITY = 0.1  # % of predicted time per % of a constant, on the most sensitive run
AT_BOUND = 0.005  # of the efficiency; of the log of the launch factor for HOST_BOUNDS
TOLERANCE = 1e-5  # of the efficiency, for the bisection and the joint fit
BEST_SHAPE = {"a100": 271.2 / 312, "h100": 794.5 / 989, "h200": 794.5 / 989,
              "b200": 1745.0 / 2250, "gb200": 1822.0 / 2500}
"""The best-shape 16-bit matmul rate measured on each GPU, as a fraction of its dense peak (Stas
Bekman, Machine Learning Engineering, compute/accelerator/README.md, 'Maximum Achievable Matmul
FLOPS comparison table': A100 SXM and H100 SXM at 744d01e, the H200 'the same' as the H100,
B200 and GB200 at b9e2972; the sources presets/gpus.yaml cites). A fit above it asks the GEMMs
of whole training steps to beat the best single GEMM: the runs did less work than priced."""
HOST_TOLERANCE = 1e-3  # of the efficiency and of the log launch factor, Nelder-Mead's
SIMPLEX_STEPS = ((0.1, 0.35), (0.02, 0.05))
"""Nelder-Mead's first steps in (efficiency, log launch factor): from the grid's best point
(a third of the grid's spacing), and from the joint fit when a run is left out."""


@dataclass(frozen=True)
class RunsFit:
    """A calibration: the GPU preset the runs use, the fitted ``value`` of ``PARAMETER``,
    its standard error and the per-run fits' range, the fitted launch factor (``host``: 1.0
    and ``host_fitted`` False when the runs do not exercise it) and its jackknife standard
    error, per run the record (``rows``), the GPU file's document and what was not fitted
    (``notes``)."""

    preset: str
    value: float
    standard_error: float
    per_run_range: tuple[float, float]
    rows: list[dict[str, Any]]
    document: dict[str, Any]
    notes: tuple[str, ...] = field(default_factory=tuple)
    host: float = 1.0
    host_standard_error: float = 0.0
    host_fitted: bool = False

    @property
    def loo_mean_abs_error(self) -> float:
        """Mean |leave-one-out error| over the runs."""
        return sum(abs(r["loo_error"]) for r in self.rows) / len(self.rows)


class _Trial:
    """GPU files of the runs' preset at trial constants, in a temporary folder (a new name
    per pair of values: the evaluator caches presets by name)."""

    def __init__(self, preset: str, folder: Path) -> None:
        self.base = bundled_presets("gpus.yaml")[preset]
        self.folder = folder
        self.files: dict[tuple[float, float], str] = {}
        self.counter = itertools.count()

    def gpu(self, efficiency: float, host: float = 1.0) -> str:
        """A GPU file with ``efficiency`` as the 16-bit GEMM fraction and the launch costs
        ``host`` times the preset's."""
        key = (round(float(efficiency), 7), round(float(host), 7))
        if key not in self.files:
            path = self.folder / f"trial-{next(self.counter)}.yaml"
            path.write_text(yaml.safe_dump(with_efficiency(self.base, *key)))
            self.files[key] = str(path)
        return self.files[key]


def with_efficiency(preset: dict[str, Any], efficiency: float,
                    host: float = 1.0) -> dict[str, Any]:
    """The preset's document with ``efficiency`` as its 16-bit GEMM fraction and its
    forward and backward launch costs ``host`` times its own (microseconds)."""
    document = copy.deepcopy(preset)
    document["efficiency"]["gemm"]["bf16"] = efficiency
    if host != 1.0:
        for name in ("kernel_overhead", "backward_overhead"):
            document[name] = f"{parse_time(preset[name]) * host * 1e6:.4f} us"
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


def _bisect(row: LedgerRow, trial: _Trial, host: float = 1.0) -> float:
    """The efficiency within ``BOUNDS`` at which ``row`` is predicted exactly with the launch
    costs ``host`` times the preset's (a bound when none is)."""
    low, high = BOUNDS
    if _log_ratio(row, trial.gpu(high, host)) > 0:
        return high  # slower than measured even at the upper bound
    if _log_ratio(row, trial.gpu(low, host)) < 0:
        return low
    while high - low > TOLERANCE:
        middle = (low + high) / 2
        slow = _log_ratio(row, trial.gpu(middle, host)) > 0
        low, high = (middle, high) if slow else (low, middle)
    return (low + high) / 2


def _loss(rows: Sequence[LedgerRow], trial: _Trial, efficiency: float, host: float) -> float:
    return sum(_log_ratio(row, trial.gpu(efficiency, host)) ** 2 for row in rows)


def _joint(rows: Sequence[LedgerRow], trial: _Trial, fit_host: bool = False,
           start: tuple[float, float] | None = None) -> tuple[float, float]:
    """The (efficiency, launch factor) minimizing the runs' summed squared log time ratios;
    the factor stays 1.0 unless ``fit_host`` (Nelder-Mead from ``start``, else from the best
    of a coarse grid)."""
    from scipy.optimize import minimize, minimize_scalar

    if not fit_host:
        found = minimize_scalar(lambda e: _loss(rows, trial, round(float(e), 6), 1.0),
                                bounds=BOUNDS, method="bounded", options={"xatol": TOLERANCE})
        return round(float(found.x), 6), 1.0
    grid_start = start is None
    if start is None:
        grid = itertools.product((0.4, 0.6, 0.8), (0.5, 1.0, 2.0))
        start = min(grid, key=lambda point: _loss(rows, trial, *point))

    def loss(point: Any) -> float:
        return _loss(rows, trial, round(float(point[0]), 6), round(math.exp(point[1]), 6))

    origin = np.array([start[0], math.log(start[1])])
    steps = np.array(SIMPLEX_STEPS[0] if grid_start else SIMPLEX_STEPS[1])
    simplex = np.vstack([origin, origin + np.diag(steps)])
    found = minimize(loss, origin, method="Nelder-Mead",
                     bounds=[BOUNDS, tuple(math.log(b) for b in HOST_BOUNDS)],
                     options={"xatol": HOST_TOLERANCE, "fatol": 1e-9, "maxiter": 200,
                              "initial_simplex": simplex})
    return round(float(found.x[0]), 6), round(math.exp(float(found.x[1])), 6)


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


def _elasticity(row: LedgerRow, trial: _Trial, at: float, host: bool = False) -> float:
    """-d log(time) / d log(constant) of ``row`` near the preset (a 2% step): of the
    efficiency at ``at``, or with ``host`` of the launch factor at 1 (sign flipped: a larger
    launch cost makes the run slower)."""
    if host:
        return (_log_ratio(row, trial.gpu(at, 1.01)) - _log_ratio(row, trial.gpu(at, 1 / 1.01))) \
            / math.log(1.01 ** 2)
    up, down = at * 1.01, at / 1.01
    return -(_log_ratio(row, trial.gpu(up)) - _log_ratio(row, trial.gpu(down))) / \
        math.log(up / down)


def _check_bounds(value: float, host: float) -> None:
    """ConfigError when a joint fit lands at a bound (``AT_BOUND``)."""
    if min(abs(value - bound) for bound in BOUNDS) < AT_BOUND:
        raise ConfigError(f"runs: the fit of {PARAMETER} lands at its bound ({value:.4f}, "
                          f"bounds {BOUNDS[0]}-{BOUNDS[1]}): the runs are "
                          f"{'faster' if value > 0.5 else 'slower'} than any efficiency "
                          "explains; check their settings (recompute, precision, "
                          "overlaps) before calibrating")
    if min(abs(math.log(host / bound)) for bound in HOST_BOUNDS) < AT_BOUND:
        raise ConfigError(f"runs: the fit of {HOST} lands at its bound ({host:.3g} x the "
                          f"preset's, bounds {HOST_BOUNDS[0]}-{HOST_BOUNDS[1]} x): no launch "
                          "cost explains the launch-bound runs; check their settings")


def fit_runs(rows: Sequence[LedgerRow], source: str,
             progress: Callable[[str], None] | None = None) -> RunsFit:
    """Fit ``PARAMETER``, and ``HOST`` where the runs exercise it, to ``rows`` (module
    docstring); ``source`` names the runs file in the GPU file's provenance."""
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
        launch = [_elasticity(row, trial, base, host=True) for row in kept]
        fit_host = max(launch) >= MIN_ELASTICITY
        say("fitting jointly")
        value, host = _joint(kept, trial, fit_host)
        _check_bounds(value, host)
        say("fitting each run")
        per_run = [_bisect(row, trial, host) for row in kept]
        say("leaving each run out")
        loo = [_joint([r for r in kept if r is not row], trial, fit_host, (value, host))
               for row in kept]
        before = [price(row) for row in kept]
        after = [price(row, trial.gpu(value, host)) for row in kept]
        held = [price(row, trial.gpu(*pair)) for row, pair in zip(kept, loo, strict=True)]
    spread = statistics.stdev(per_run)
    records = [_record(*items) for items in zip(before, after, held, per_run, elasticities,
                                                 launch, strict=True)]
    notes = tuple(f"not priced: {line}" for line in left)
    if not fit_host:
        notes += ((f"{HOST} not fitted: a 1% change moves no run's predicted time by more "
                   f"than {max(launch):.2f}% (the runs are not launch-bound); the preset's "
                   "kept"),)
    if value > BEST_SHAPE.get(preset, 1.0):
        notes += ((f"{PARAMETER} {value:.4f} is above the best-shape matmul rate measured on "
                   f"this GPU ({BEST_SHAPE[preset]:.3f} of the peak, Bekman's MAMF table): the "
                   "runs are faster than their GEMMs allow, so they likely do less work than "
                   "priced (recomputation, precision, attention kernel); check their settings"),)
    if any(row.hardware.gpus > row.hardware.gpus_per_node for row in kept):
        notes += (("network efficiency not fitted: the GPU file holds compute constants "
                   "only; the node preset's NVLink and NIC figures stay"),)
    factors = [pair[1] for pair in loo]
    mean = statistics.fmean(factors)
    jackknife = math.sqrt((len(factors) - 1) / len(factors)
                          * sum((f - mean) ** 2 for f in factors))
    fit = RunsFit(preset, value, spread / math.sqrt(len(per_run)), (min(per_run), max(per_run)),
                  records, {}, notes, host, jackknife if fit_host else 0.0, fit_host)
    return replace(fit, document=gpu_document(fit, base, source, kept))


def host_text(fit: RunsFit) -> str:
    """``; kernel launch costs x F +- E`` for a fit that fitted them, else empty."""
    return (f"; kernel launch costs x {fit.host:.3f} +- {fit.host_standard_error:.3f}"
            if fit.host_fitted else "")


def _record(before: Priced, after: Priced, held: Priced, own: float,
            elasticity: float, launch: float) -> dict[str, Any]:
    """One run: published, predicted by the preset and by the fit, the leave-one-out
    prediction, its own fit and how much its time depends on each constant."""
    return {**after.record(), "preset_predicted": before.predicted,
            "preset_error": before.error, "loo_predicted": held.predicted,
            "loo_error": held.error, "own_fit": own, "elasticity": elasticity,
            "launch_elasticity": launch}


def gpu_document(fit: RunsFit, base: float, source: str,
                 rows: Sequence[LedgerRow]) -> dict[str, Any]:
    """The GPU file: the preset with the fitted constants and where they come from."""
    preset = bundled_presets("gpus.yaml")[fit.preset]
    document = with_efficiency(preset, round(fit.value, 4), round(fit.host, 4))
    document["description"] = f"{preset['description']}, calibrated on {source}"
    low, high = fit.per_run_range
    runs = f"{len(rows)} measured runs of {source} ({', '.join(row.id for row in rows)})"
    sources = document.setdefault("sources", {})
    sources[PARAMETER] = (
        f"fitted by `dlsched calibrate runs` to {runs}: {fit.value:.4f} +- "
        f"{fit.standard_error:.4f} (standard error of the per-run fits, which range "
        f"{low:.4f}-{high:.4f}); leave-one-out mean |error| {fit.loo_mean_abs_error:.1%}; the "
        f"{fit.preset} preset had {base}")
    if fit.host_fitted:
        sources[HOST] = (
            f"fitted by `dlsched calibrate runs` with {PARAMETER} to {runs}: the preset's "
            f"launch costs ({preset['kernel_overhead']} forward, {preset['backward_overhead']} "
            f"backward) x {fit.host:.3f} +- {fit.host_standard_error:.3f} (jackknife standard "
            "error of the leave-one-out fits), their ratio kept")
        document.setdefault("provenance", {}).update(
            {"kernel_overhead": "fitted", "backward_overhead": "fitted"})
    return document
