"""The ledger's validated envelope as a plan sees it: the held-out residual of every priced,
scored ledger metric with the features of the run it measures, and the same features of a plan.

The job layer sits below the ledger (docs/architecture.md), so it cannot price the ledger
itself: ``python -m dlsched.ledger.residuals`` writes the table (``job/data/ledger_residuals.yaml``)
from the predictions ``dlsched validate`` makes, and tests/job/test_intervals.py fails when the
table differs from what the ledger gives at the current commit (regenerate it whenever a change
moves a ledger prediction). ``bundled_residuals`` reads it once per process.

A residual is ``predicted / published - 1`` of the run's iteration time (family ``time``: a
published rate's error ``e`` becomes its time's, ``1 / (1 + e) - 1``; ``dlsched.ledger.score``
counts one time metric per row) or of its peak memory per GPU (family ``memory``); the run's
published MFU is the predicted one scaled by ``predicted / published`` time (dlsched's model-FLOP
count, the one ``plan`` reports).

Features (``features``): the GPU preset, the 16-bit format, the pipeline schedule (``none``
without a pipeline: PP 1), the recomputation, the ZeRO stage, the microbatch size, and whether
TP, CP and EP are used (> 1); and two scales, the model's parameters and the pipeline's
stages.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING

import yaml

from dlsched.errors import ConfigError

if TYPE_CHECKING:
    from dlsched.job.evaluation.evaluate import Job
    from dlsched.job.execution import Execution

TABLE = "job/data/ledger_residuals.yaml"
FEATURES = ("gpu", "precision", "schedule", "recompute", "zero", "microbatch", "tp", "cp", "ep")
"""The categorical features, in the order notes name them (schedule ``none``: no pipeline, so
PP > 1 is the schedule's other values, not a feature of its own that would count twice)."""
FAMILIES = ("time", "memory")
_DIMENSIONS = {"tp": "TP", "cp": "CP", "ep": "EP"}
_NAMES = {"gpu": "GPU {}", "precision": "{} precision", "schedule": "schedule {}",
          "recompute": "recomputation {}", "zero": "ZeRO stage {}", "microbatch": "microbatch {}"}


@dataclass(frozen=True)
class Features:
    """What a run exercises: categorical ``values`` (``FEATURES`` order), its model's
    ``parameters`` and its pipeline ``stages``."""

    values: tuple[str | int | bool, ...]
    parameters: float
    stages: int

    def get(self, name: str) -> str | int | bool:
        """The value of the categorical feature ``name``."""
        return self.values[FEATURES.index(name)]


def label(name: str, value: str | int | bool) -> str:
    """A categorical feature's value as a note names it (``ZeRO stage 3``, ``CP > 1``)."""
    if name in _DIMENSIONS:
        return f"{_DIMENSIONS[name]} {'> 1' if value else '= 1'}"
    if name == "schedule" and value == "none":
        return "no pipeline (PP = 1)"
    return _NAMES[name].format(value)


def features(job: Job, layout: Execution) -> Features:
    """The features of ``layout`` running ``job`` (module docstring); its precision the GEMMs'
    format: ``fp4`` for the ``nvfp4`` recipe (``job.compute.nvfp4``: FP4 tensor cores, not an
    FP8 run's, so neither bounds or calibrates the other)."""
    schedule = layout.schedule if layout.pp > 1 else "none"
    gpu = job.cluster.gpu.name
    precision = "fp4" if layout.run.fp8_recipe == "nvfp4" else layout.run.precision
    return Features((gpu, precision, schedule, layout.recompute, layout.zero,
                     layout.microbatch_size, layout.tp > 1, layout.cp > 1, layout.ep > 1),
                    float(job.spec.parameters()), layout.pp)


@dataclass(frozen=True)
class Residual:
    """One priced, scored ledger metric: its row ``id``, ``family`` (``time`` or ``memory``),
    ``error`` (predicted / published - 1 of the iteration time or the peak memory), the
    published MFU of a time residual (None for memory) and the run's ``features``."""

    id: str
    family: str
    error: float
    mfu_published: float | None
    features: Features

    def record(self) -> dict[str, object]:
        """The residual as the table stores it."""
        values = dict(zip(FEATURES, self.features.values, strict=True))
        return {"id": self.id, "family": self.family, "error": self.error,
                "mfu_published": self.mfu_published, "parameters": self.features.parameters,
                "stages": self.features.stages, "features": values}


def _residual(entry: object, where: str) -> Residual:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected a mapping")
    try:
        values = entry["features"]
        error, family = float(entry["error"]), str(entry["family"])
        mfu = entry["mfu_published"]
        parsed = Residual(str(entry["id"]), family, error, None if mfu is None else float(mfu),
                          Features(tuple(values[name] for name in FEATURES),
                                   float(entry["parameters"]), int(entry["stages"])))
    except (KeyError, TypeError, ValueError) as bad:
        raise ConfigError(f"{where}: {bad!r}; accepted: id, family, error, mfu_published, "
                          f"parameters, stages, features ({', '.join(FEATURES)})") from bad
    if family not in FAMILIES or not math.isfinite(error):
        raise ConfigError(f"{where}: family {family!r}, error {error!r}; accepted: a family "
                          f"of {', '.join(FAMILIES)} and a finite error")
    return parsed


def parse_residuals(text: str, where: str = TABLE) -> tuple[Residual, ...]:
    """The residuals of a table's YAML ``text``; ConfigError naming the entry that breaks it."""
    raw = yaml.safe_load(text)
    if not isinstance(raw, dict) or not isinstance(raw.get("residuals"), list):
        raise ConfigError(f"{where}: expected a mapping with a list 'residuals'")
    return tuple(_residual(entry, f"{where}: residuals[{index}]")
                 for index, entry in enumerate(raw["residuals"]))


def dump_residuals(residuals: Sequence[Residual], header: str) -> str:
    """The table's YAML text: ``header`` (comment lines) and the residuals in order."""
    body = yaml.safe_dump({"residuals": [r.record() for r in residuals]}, sort_keys=False)
    return header + body


@lru_cache(maxsize=1)
def bundled_residuals() -> tuple[Residual, ...]:
    """The bundled table's residuals (read once per process)."""
    return parse_residuals(resources.files("dlsched").joinpath(TABLE).read_text())
