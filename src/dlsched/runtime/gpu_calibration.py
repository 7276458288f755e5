"""What ``dlsched compute calibrate`` and ``dlsched compute measure`` run: a GPU's constants
fitted to measured training steps (a measurements file, ``models.calibration``) or to kernels
timed on this machine with torch (``models.measure``), and the GPU file of the fit.

Importing this module does not import torch; ``measure_gpu`` does, on its first kernel."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlsched.errors import ConfigError
from dlsched.hardware.gpu import KEY, LOW_PRECISIONS, Gpu, get_gpu, preset_for
from dlsched.models.calibration import (
    check_cases,
    check_fit,
    fit_constants,
    gpu_document,
    load_measurements,
)
from dlsched.models.measure import Kernel, fit_grid, grid, rows
from dlsched.models.measure_torch import device_name, measure_grid

DEVICES = ("cuda", "cpu")
"""Where ``measure`` times kernels: the GPU to calibrate, or torch's CPU build (the mechanics,
for tests)."""


@dataclass(frozen=True)
class FittedGpu:
    """A fitted ``gpu``, the constants ``fitted``, its GPU file ``document`` and a row per
    measured quantity (``case``, ``measured_s``, ``predicted_s``, ``error`` = predicted /
    measured - 1)."""

    gpu: Gpu
    fitted: list[str]
    document: dict[str, Any]
    rows: list[dict[str, Any]]

    @property
    def worst_error(self) -> float:
        """The largest |error| over the rows."""
        return max(abs(row["error"]) for row in self.rows)


def calibrate_gpu(measurements: Path | None, force: bool) -> FittedGpu:
    """Fit the GPU of ``measurements`` (None: the bundled H100 steps) to its measured steps.
    Refused (ConfigError): a step faster than the GPU's peak allows, and unless ``force``,
    fewer cases than constants fitted + 2 or a worst error above 25%."""
    data = load_measurements(measurements)
    check_cases(data, force)
    fit = fit_constants(data.gpu, data.cases, data.source, data.constants)
    check_fit(fit, force)
    return FittedGpu(fit.gpu, list(fit.fitted), gpu_document(fit.gpu),
                     [{"case": label, "measured_s": measured, "predicted_s": predicted,
                       "error": predicted / measured - 1} for label, measured, predicted
                      in fit.steps])


@dataclass(frozen=True)
class KernelGrid:
    """What ``measure_gpu`` times: the ``kernels`` on ``device`` (named ``name``), fitted on
    the preset ``base`` (its peaks, SMs and bandwidth kept)."""

    device: str
    name: str
    base: str
    kernels: list[Kernel]


def kernel_grid(device: str, base: str | None, tiny: bool) -> KernelGrid:
    """The kernels to time on ``device`` (``DEVICES``) at the zoo's shapes (``tiny``: a few
    small ones of every class) in each precision the ``base`` preset has (default: the one of
    the CUDA device's name; h100 on cpu), but fp16 (bf16's rate), FP8 and FP4 (Transformer
    Engine, not torch), and on cpu fp32 and bf16 only."""
    if device not in DEVICES:
        raise ConfigError(f"--device: {device!r}; accepted: " + ", ".join(DEVICES))
    name = device_name(device)
    chosen = base or ("h100" if device == "cpu" else preset_for(name))
    if chosen is None:
        raise ConfigError(f"--base: no bundled preset for {name!r}; accepted: --base with a "
                          "preset (presets/gpus.yaml: v100, a100, h100, h800, h200, b200, "
                          "gb200, mi300x, ...) or a GPU file of this GPU's peaks")
    precisions = tuple(p for p in get_gpu(chosen).precisions() if p != "fp16"
                       and KEY[p] not in LOW_PRECISIONS
                       and (device == "cuda" or p in ("fp32", "bf16")))
    return KernelGrid(device, name, chosen, grid(precisions, tiny))


def measure_gpu(kernels: KernelGrid, file_name: str,
                progress: Callable[[Iterable[Kernel], int], Iterator[Kernel]] | None = None
                ) -> FittedGpu:
    """Time ``kernels`` on their device (``progress(items, total)`` may wrap the loop) and fit
    the base preset's constants kernel class by kernel class; the GPU file is named
    ``file_name``."""
    timed = measure_grid(kernels.kernels, kernels.device, progress)
    fitted, names = fit_grid(get_gpu(kernels.base), timed,
                             f"{kernels.name}, {len(kernels.kernels)} kernels")
    document = gpu_document(fitted) | {
        "name": file_name,
        "description": f"{kernels.name}, measured by dlsched compute measure "
                       f"(base {kernels.base})"}
    return FittedGpu(fitted, names, document, rows(fitted, timed))
