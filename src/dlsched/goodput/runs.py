"""Published whole-run figures for time to train (``data/runs.yaml``), priced by the goodput
model at its defaults, with errors.

A run names its GPUs (and, where a figure needs its checkpoint, the parameters and the layout
that shards them); each figure is a goodput (effective training time ratio), an interruption
count over the run's ``days``, or a job MTBF in hours. Predictions: interruptions = days / the
job's MTBF (failures arrive at its rate over the whole wall time, ``goodput.failures``); the
goodput at the optimal checkpoint interval with the checkpoint of mixed-precision Adam state
(2 B of 16-bit weights and 12 B of FP32 master weights and moments per parameter,
``goodput.checkpoints``) on the run's storage, and the default restart. Errors: goodput in
points (predicted minus published), counts and hours relative (predicted / published - 1).
"""

from __future__ import annotations

from importlib import resources
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from dlsched.errors import ConfigError
from dlsched.goodput.checkpoints import checkpoint_plan, load_storage
from dlsched.goodput.failures import expected_outcome, job_mtbf
from dlsched.goodput.time_to_train import RESTART_S, Settings

DAY_S = 86400.0
WEIGHT_BYTES = 2  # 16-bit weights
OPTIMIZER_BYTES = 12  # FP32 master weights and Adam's two moments

Metric = Literal["goodput", "interruptions", "unexpected_interruptions", "job_mtbf_h"]


class Figure(BaseModel):
    """One published figure: its metric, value, kind (``value`` or ``at_least``), whether it
    is approximate and whether the default failure rate comes from it (then its error is zero
    by construction and checks nothing)."""

    model_config = ConfigDict(extra="forbid")
    metric: Metric
    value: Annotated[float, Field(gt=0)]
    kind: Literal["value", "at_least"] = "value"
    approximate: bool = False
    defines_default: bool = False


class Run(BaseModel):
    """A published run (module docstring)."""

    model_config = ConfigDict(extra="forbid")
    name: str
    citation: str
    gpu: str
    gpus: Annotated[int, Field(ge=1)]
    gpus_per_node: Annotated[int, Field(ge=1)] = 8
    days: Annotated[float, Field(gt=0)]
    parameters: Annotated[float, Field(gt=0)] | None = None
    tp: Annotated[int, Field(ge=1)] = 1
    pp: Annotated[int, Field(ge=1)] = 1
    dp: Annotated[int, Field(ge=1)] = 1
    zero: Annotated[int, Field(ge=0, le=3)] = 0
    storage: str = "tectonic"
    figures: list[Figure]


def load_runs() -> list[Run]:
    """The bundled runs."""
    text = resources.files("dlsched.goodput").joinpath("data/runs.yaml").read_text()
    return [Run(**item) for item in yaml.safe_load(text)["runs"]]


def _goodput(run: Run, settings: Settings) -> float:
    if run.parameters is None:
        raise ConfigError(f"runs.yaml: {run.name}: a goodput figure needs parameters")
    per_gpu = run.parameters / (run.tp * run.pp)
    weights = WEIGHT_BYTES * per_gpu / (run.dp if run.zero >= 3 else 1)
    optimizer = OPTIMIZER_BYTES * per_gpu / (run.dp if run.zero >= 1 else 1)
    ckpt = checkpoint_plan(weights, optimizer, run.zero, run.dp, run.gpus, run.gpus_per_node,
                           load_storage(run.storage), settings.checkpoint, run.gpu)
    mtbf = job_mtbf(run.gpus, settings.mtbf_gpu_hours)
    out = expected_outcome(run.days * DAY_S, ckpt.blocking_s, settings.restart_s + ckpt.load_s,
                           mtbf, durable_delay=ckpt.durable_s)
    return out.goodput


def predict(run: Run, metric: str, settings: Settings) -> float:
    """dlsched's figure for ``metric`` of ``run``."""
    mtbf = job_mtbf(run.gpus, settings.mtbf_gpu_hours)
    if metric == "goodput":
        return _goodput(run, settings)
    if metric == "job_mtbf_h":
        return mtbf / 3600.0
    return run.days * DAY_S / mtbf


def price_runs(settings: Settings | None = None) -> list[dict[str, object]]:
    """One row per published figure: run, metric, published, predicted, error (points for
    goodput, relative otherwise), kind, approximate, defines_default, citation."""
    settings = settings or Settings(restart_s=RESTART_S)
    rows: list[dict[str, object]] = []
    for run in load_runs():
        for figure in run.figures:
            value = predict(run, figure.metric, settings)
            error = (value - figure.value if figure.metric == "goodput"
                     else value / figure.value - 1.0)
            rows.append({"run": run.name, "metric": figure.metric, "gpus": run.gpus,
                         "published": figure.value, "predicted": value, "error": error,
                         "kind": figure.kind, "approximate": figure.approximate,
                         "defines_default": figure.defines_default,
                         "citation": run.citation})
    return rows
