"""Fit a GPU's compute constants to measured training steps (``dlsched compute calibrate``).

A measurements document names a base GPU (its datasheet peaks and bandwidth are kept) and lists
cases: a zoo model, batch size, precision, layout and what was measured — the step (forward +
backward), or its forward and backward, or a dlsched per-layer profile of the model
(``dlsched profile``; its layers' times summed)::

    device: h100
    source: "where the numbers come from"
    cases:
      - {model: resnet50, batch_size: 256, precision: bf16, channels_last: true, step: 64.1 ms}
      - {model: gpt2, lm_head: false, batch_size: 8, precision: fp32, step: 142.2 ms}
      - {model: resnet50, batch_size: 32, precision: fp32, profile: resnet50-b32.csv}

The fit chooses the host's launch overheads (forward, backward), the memory and transpose
efficiencies and the GEMM and convolution efficiencies in each precision the cases use,
minimizing the squared log error of the predicted steps (scipy's ``least_squares``,
efficiencies kept in (0, 1]). Constants no case depends on keep the base's values;
``constants`` (names such as ``kernel_overhead``, ``memory_efficiency``,
``efficiency.conv.tf32``, ``efficiency.attention.bf16``) restricts the fit to those, the others
kept from the base. ``check_cases`` refuses times faster than the GPU's peak allows and fewer
measured times than constants + 2; ``check_fit`` a worst error above 25% (the CLI's
``--force`` lets the last two through).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from dlsched.config import load_document, validate
from dlsched.errors import ConfigError
from dlsched.hardware.gpu import Gpu, GpuSpec, get_gpu
from dlsched.models.compute import CalibratedCompute
from dlsched.models.layer import Model
from dlsched.models.zoo import get_model
from dlsched.validation import BATCH, Duration

PRECISION_KEYS = {"fp32": "fp32", "tf32": "tf32", "bf16": "bf16", "fp16": "bf16", "fp8": "fp8"}


class CaseSpec(BaseModel):
    """One measurement: a whole ``step``, or its ``forward`` and ``backward``, or a dlsched
    per-layer ``profile`` (CSV/JSON, path relative to the measurements file) whose layers'
    forward and backward times are summed."""

    model_config = ConfigDict(extra="forbid")
    model: str
    batch_size: int = Field(ge=BATCH.low, le=BATCH.high)
    precision: str
    channels_last: bool = False
    lm_head: bool = True
    step: Duration | None = None
    forward: Duration | None = None
    backward: Duration | None = None
    profile: str | None = None

    @model_validator(mode="after")
    def _one_form(self) -> CaseSpec:
        forms = [self.step is not None, self.forward is not None or self.backward is not None,
                 self.profile is not None]
        if sum(forms) != 1 or ((self.forward is None) != (self.backward is None)):
            raise ValueError("give exactly one of: step, forward and backward, profile")
        return self

    def label(self) -> str:
        """``resnet50 b256 bf16+cl``: the case in one word group."""
        layout = "+channels_last" if self.channels_last else ""
        head = "" if self.lm_head else " (no LM head)"
        return f"{self.model}{head} b{self.batch_size} {self.precision}{layout}"


class MeasurementsSpec(BaseModel):
    """A measurements document (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")
    device: str
    source: str = ""
    constants: list[str] | None = None
    cases: list[CaseSpec] = Field(min_length=1, max_length=1000)


@dataclass(frozen=True)
class Case:
    """A validated case: the zoo model, its settings and what was measured (seconds): the step,
    or (forward, backward)."""

    spec: CaseSpec
    model: Model
    measured: tuple[float, ...]

    def compute(self, gpu: Gpu) -> CalibratedCompute:
        """The case's compute model on ``gpu``."""
        return CalibratedCompute(gpu, self.spec.precision, channels_last=self.spec.channels_last)

    def predict(self, gpu: Gpu) -> tuple[float, float]:
        """Predicted (forward, backward) seconds of the case's step on ``gpu``."""
        step = self.compute(gpu).step(self.model, self.spec.batch_size)
        return sum(step.forward), sum(step.backward)

    def targets(self, gpu: Gpu) -> list[tuple[str, float, float]]:
        """(label, measured, predicted) of each measured quantity."""
        forward, backward = self.predict(gpu)
        label = self.spec.label()
        if len(self.measured) == 1:
            return [(label, self.measured[0], forward + backward)]
        return [(f"{label} forward", self.measured[0], forward),
                (f"{label} backward", self.measured[1], backward)]


def _measured(spec: CaseSpec, folder: Path) -> tuple[float, ...]:
    """What a case measured: (step,) or (forward, backward), a profile's sums."""
    if spec.step is not None:
        return (spec.step,)
    if spec.profile is None:
        return (spec.forward, spec.backward)
    from dlsched.models.profile_io import load_profile

    profiled = load_profile(folder / spec.profile)
    return (sum(layer.forward_time or 0.0 for layer in profiled.layers),
            sum(layer.backward_time or 0.0 for layer in profiled.layers))


@dataclass(frozen=True)
class Measurements:
    """A loaded measurements document: the base GPU, the cases, their source and the
    constants to fit (None: every one the cases depend on)."""

    gpu: Gpu
    cases: list[Case]
    source: str
    constants: tuple[str, ...] | None = None


def load_measurements(path: str | Path | None = None) -> Measurements:
    """A measurements file; None: the bundled H100 measurements
    (``presets/calibration-h100.yaml``)."""
    if path is None:
        data, where, folder = _bundled(), "bundled H100 measurements", Path(".")
    else:
        data, where, folder = load_document(path), str(path), Path(path).parent
    spec = validate(MeasurementsSpec, data, where)
    gpu = get_gpu(spec.device)
    cases = []
    for index, case in enumerate(spec.cases):
        try:
            gpu.check_precision(case.precision)
            model = get_model(case.model, lm_head=case.lm_head)
            measured = _measured(case, folder)
        except ConfigError as error:
            raise ConfigError(f"{where}: cases[{index}]: {error}") from None
        if not all(value > 0 for value in measured):
            raise ConfigError(f"{where}: cases[{index}]: measured times must be > 0 "
                              f"(got {measured})")
        cases.append(Case(case, model, measured))
    constants = None if spec.constants is None else tuple(spec.constants)
    return Measurements(gpu, cases, spec.source or where, constants)


@cache
def _bundled() -> dict[str, Any]:
    text = resources.files("dlsched").joinpath("presets/calibration-h100.yaml").read_text()
    return yaml.safe_load(text)


FITTED_KINDS = ("gemm", "conv")
OVERHEADS = ("kernel_overhead", "backward_overhead")


def _parameters(cases: list[Case]) -> list[tuple[str, ...]]:
    """The constants the cases depend on by default: the launch overhead, the memory
    efficiency, and the GEMM and convolution efficiencies of each precision the cases run
    (attention keeps its published value unless ``constants`` names it)."""
    names: list[tuple[str, ...]] = [("kernel_overhead",), ("backward_overhead",),
                                    ("memory_efficiency",)]
    if any(PRECISION_KEYS[c.spec.precision] != "fp32" and not c.spec.channels_last
           and any(op.kind == "conv" for layer in c.model.layers for op in layer.ops)
           for c in cases):
        names.append(("transpose_efficiency",))
    for case in cases:
        key = PRECISION_KEYS[case.spec.precision]
        kinds = {op.kind for layer in case.model.layers for op in layer.ops}
        for kind in FITTED_KINDS:
            entry = ("efficiency", kind, key)
            if kind in kinds and entry not in names and (key != "fp8" or kind == "gemm"):
                names.append(entry)
    return names


def _known(cases: list[Case]) -> dict[str, tuple[str, ...]]:
    """Every constant ``constants`` may name for these cases."""
    known = {".".join(n): n for n in _parameters(cases)}
    for case in cases:
        key = PRECISION_KEYS[case.spec.precision]
        if any(op.kind == "attention" for layer in case.model.layers for op in layer.ops):
            name = ("efficiency", "attention", "bf16" if key == "fp8" else key)
            known[".".join(name)] = name
    return known


def _with(base: GpuSpec, names: list[tuple[str, ...]], values: np.ndarray) -> Gpu:
    data = base.model_dump()
    for name, value in zip(names, values, strict=True):
        if name[0] == "efficiency":
            data["efficiency"][name[1]][name[2]] = float(value)
        else:
            data[name[0]] = float(value)
    return Gpu(GpuSpec.model_validate(data))


MAX_OVERHEAD = 1e-3  # s per launch: the bound of the fitted launch overheads


def _to_free(name: tuple[str, ...], value: float) -> float:
    """Efficiencies and overheads (as fractions of ``MAX_OVERHEAD``) as logits: the fit is
    unconstrained and keeps them in (0, 1] and (0, MAX_OVERHEAD)."""
    scale = MAX_OVERHEAD if name[0] in OVERHEADS else 1.0
    value = min(max(value / scale, 1e-6), 1 - 1e-6)
    return math.log(value / (1 - value))


def _from_free(name: tuple[str, ...], free: float) -> float:
    scale = MAX_OVERHEAD if name[0] in OVERHEADS else 1.0
    return scale / (1.0 + math.exp(-min(max(free, -700.0), 700.0)))


@dataclass(frozen=True)
class Fit:
    """The fitted GPU, the constants fitted, and each measured quantity's (label, measured,
    predicted) seconds."""

    gpu: Gpu
    fitted: tuple[str, ...]
    steps: tuple[tuple[str, float, float], ...]

    def worst_error(self) -> float:
        """The largest |predicted / measured - 1| over the cases."""
        return max(abs(predicted / measured - 1) for _, measured, predicted in self.steps)


MAX_WORST_ERROR = 0.25
EXTRA_CASES = 2
WINOGRAD_SAVING = 2.25  # FP32 3x3 convolutions: Winograd's multiplies (models.pricing)


def fitted_names(data: Measurements) -> list[str]:
    """The constants a fit of ``data`` chooses (its ``constants``, or every one its cases
    depend on)."""
    if data.constants is not None:
        return list(data.constants)
    return [".".join(name) for name in _parameters(data.cases)]


def check_cases(data: Measurements, force: bool = False) -> None:
    """Refuse (ConfigError) a measured time faster than the GPU's peak allows for the case's
    model FLOP, and, unless ``force``, fewer measured quantities than the constants fitted
    + ``EXTRA_CASES`` (the fit would describe the cases, not predict)."""
    from dlsched.models.compute import training_flops

    for case in data.cases:
        spec = case.spec
        peak = data.gpu.peak_flops(spec.precision)
        peak *= WINOGRAD_SAVING if PRECISION_KEYS[spec.precision] == "fp32" else 1.0
        fastest = training_flops(case.model, spec.batch_size) / peak
        if sum(case.measured) < fastest:
            raise ConfigError(f"cases: {spec.label()} measured {sum(case.measured) * 1e3:.4g} "
                              f"ms, faster than the {data.gpu.name} peak allows "
                              f"({fastest * 1e3:.4g} ms for its FLOP); accepted: times the "
                              "GPU can reach (check the units)")
    names = fitted_names(data)
    quantities = sum(len(case.measured) for case in data.cases)
    if quantities < len(names) + EXTRA_CASES and not force:
        raise ConfigError(f"cases: {quantities} measured times for {len(names)} constants "
                          f"fitted ({', '.join(names)}); accepted: at least "
                          f"{len(names) + EXTRA_CASES} (add cases, restrict `constants`, or "
                          "--force)")


def check_fit(fit: Fit, force: bool = False) -> None:
    """Refuse (ConfigError), unless ``force``, a fit whose worst error exceeds
    ``MAX_WORST_ERROR``, naming that case."""
    label, measured, predicted = max(fit.steps, key=lambda s: abs(s[2] / s[1] - 1))
    error = predicted / measured - 1
    if abs(error) > MAX_WORST_ERROR and not force:
        raise ConfigError(f"fit: worst error {error:+.1%} ({label}: measured "
                          f"{measured * 1e3:.4g} ms, predicted {predicted * 1e3:.4g} ms) "
                          f"exceeds {MAX_WORST_ERROR:.0%}; accepted: a fit within "
                          f"{MAX_WORST_ERROR:.0%} (check the measurements, or --force)")


def fit_constants(base: Gpu, cases: list[Case], source: str = "",
                  constants: tuple[str, ...] | None = None) -> Fit:
    """Fit ``base``'s overhead and efficiencies to ``cases`` (see the module docstring);
    ``constants`` restricts the fit to those names."""
    from scipy.optimize import least_squares

    names = _parameters(cases)
    if constants is not None:
        known = _known(cases)
        unknown = sorted(set(constants) - set(known))
        if unknown:
            raise ConfigError(f"constants: {', '.join(unknown)} not determined by these "
                              "cases; accepted: " + ", ".join(known))
        names = [known[c] for c in constants]
    spec = base.spec
    start = np.array([_to_free(n, _current(spec, n)) for n in names])

    def residuals(free: np.ndarray) -> np.ndarray:
        gpu = _with(spec, names, np.array([_from_free(n, f) for n, f in zip(names, free,
                                                                             strict=True)]))
        return np.array([math.log(predicted / measured) for case in cases
                         for _, measured, predicted in case.targets(gpu)])

    result = least_squares(residuals, start, method="trf", x_scale="jac")
    values = np.array([_from_free(n, f) for n, f in zip(names, result.x, strict=True)])
    gpu = _with(spec, names, values)
    labels = tuple(".".join(n) for n in names)
    note = (f"fitted by dlsched compute calibrate to {len(cases)} measured steps"
            + (f" ({source})" if source else ""))
    sources = dict(spec.sources) | dict.fromkeys(labels, note)
    gpu = Gpu(gpu.spec.model_copy(update={"sources": sources}))
    steps = tuple(target for case in cases for target in case.targets(gpu))
    return Fit(gpu, labels, steps)


def _current(spec: GpuSpec, name: tuple[str, ...]) -> float:
    if name[0] == "efficiency":
        return float(getattr(spec.efficiency[name[1]], name[2]))
    value = getattr(spec, name[0])
    return 0.5 if value is None else float(value)


def gpu_document(gpu: Gpu) -> dict[str, Any]:
    """The GPU as a document ``get_gpu`` reads back (units: FLOP/s, B/s, s)."""
    data = gpu.spec.model_dump(exclude_none=True)
    data["efficiency"] = {kind: {k: _digits(v) for k, v in table.items()}
                          for kind, table in data["efficiency"].items()}
    for name in ("memory_efficiency", "transpose_efficiency", *OVERHEADS):
        data[name] = _digits(data[name])
    return data


def _digits(value: float) -> float:
    """``value`` to 4 significant digits (a tiny fitted fraction stays above 0)."""
    return float(f"{value:.4g}")
