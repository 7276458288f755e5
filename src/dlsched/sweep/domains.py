"""What a sweep can vary: each domain's scenario schema (``collectives.scenario``,
``dataparallel.scenario``, ``pipeline.scenario``, ``training.scenario``, ``job.scenario``: the
options of its command), one evaluator and one metric list per domain.

Every domain maps a flat dict of parameters (plain numbers and names, SI units: bytes,
seconds) to a flat dict of metrics. The evaluators are module-level functions, so they travel
to worker processes (process pool, Dask, Ray) by reference; expensive inputs (topologies,
models) are cached per worker process.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from dlsched.collectives.scenario import CollectiveScenario
from dlsched.dataparallel.scenario import DataParallelScenario
from dlsched.errors import ConfigError
from dlsched.job.scenario import PlanScenario
from dlsched.pipeline.scenario import PipelineScenario
from dlsched.training.scenario import TrainingScenario


def run_collective_scenario(params: dict[str, Any]) -> dict[str, Any]:
    """Plan, simulate and score one collective; times in seconds, bytes per NPU."""
    scenario = CollectiveScenario.model_construct(**params)
    result = scenario.run()
    row = result.row(scenario.chunks, scenario.concurrency) | {"events": result.events}
    return {key: row[key] for key in COLLECTIVE_METRICS}


def run_dataparallel_scenario(params: dict[str, Any]) -> dict[str, Any]:
    """Schedule one data-parallel iteration's all-reduces; times in seconds."""
    row = DataParallelScenario.model_construct(**params).run().row()
    return {key: row[key] for key in DATAPARALLEL_METRICS}


def run_pipeline_scenario(params: dict[str, Any]) -> dict[str, Any]:
    """Plan, simulate and bound one pipeline; seconds, bytes, fractions."""
    row = PipelineScenario.model_construct(**params).run().row()
    return {key: row[key] for key in PIPELINE_METRICS}


def run_training_scenario(params: dict[str, Any]) -> dict[str, Any]:
    """Simulate the iterations and report the last one; seconds and fractions."""
    row = TrainingScenario.model_construct(**params).run().row()
    return {key: row[key] for key in TRAINING_METRICS}


def run_plan_scenario(params: dict[str, Any]) -> dict[str, Any]:
    """Plan one training job (evaluate a given layout or search): the plan's degrees, seconds
    per iteration, FLOP rates, GiB per GPU, exposed seconds and the best baseline's time."""
    row, = PlanScenario.model_construct(**params).run().rows
    return {key: row.get(key) for key in PLAN_METRICS}


COLLECTIVE_METRICS = ("time_s", "ideal_s", "bound_s", "utilization", "time_over_bound",
                      "bytes_per_npu", "events", "plan_chunks", "plan_concurrency")
TRAINING_METRICS = ("iteration_s", "compute_s", "exposed_comm_s", "comm_fraction")
DATAPARALLEL_METRICS = ("time_s", "bound_s", "time_over_bound", "backward_s", "forward_s",
                        "messages", "comm_busy_s")
PIPELINE_METRICS = ("iteration_s", "bound_s", "instance_bound_s", "time_over_bound", "bubble",
                    "peak_memory_bytes", "stages", "gpus_used", "tp", "planning_s")

PLAN_METRICS = ("iteration_s", "tflops_per_gpu", "mfu", "hfu", "memory_gib", "tp", "cp", "ep",
                "pp", "dp", "chunks", "microbatch_size", "zero", "exposed_tp_s",
                "exposed_ep_a2a_s", "exposed_cp_s", "exposed_pp_s", "exposed_dp_s",
                "exposed_zero3_s", "bound_s", "best_baseline_iteration_s",
                "speedup_vs_best_baseline")


@dataclass(frozen=True)
class Domain:
    """A sweepable domain: its parameter schema, evaluator (params -> metrics), the metrics it
    produces, which parameter names the policy and which metric is the time to compare."""

    name: str
    params: type[BaseModel]
    evaluate: Callable[[dict[str, Any]], dict[str, Any]]
    metrics: tuple[str, ...]
    policy_param: str
    time_metric: str

    @property
    def param_names(self) -> tuple[str, ...]:
        """Every parameter of the domain, in schema order."""
        return tuple(self.params.model_fields)

    def column_types(self) -> dict[str, str]:
        """The SQL type of each parameter's store column, from its schema type: INTEGER (int,
        bool), REAL (float), TEXT (str), NUMERIC otherwise; None allowed in each."""
        return {name: sql_type(field.annotation)
                for name, field in self.params.model_fields.items()}


def sql_type(annotation: Any) -> str:
    """INTEGER, REAL, TEXT or NUMERIC for a schema field's type (``X | None`` as ``X``)."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    kinds = {typing.get_args(a)[0] if typing.get_origin(a) is typing.Annotated else a
             for a in (typing.get_args(annotation) if union else (annotation,))
             if a is not type(None)}
    if kinds and kinds <= {int, bool}:
        return "INTEGER"
    if kinds == {float}:
        return "REAL"
    return "TEXT" if kinds == {str} else "NUMERIC"


DOMAINS: dict[str, Domain] = {
    "collective": Domain("collective", CollectiveScenario, run_collective_scenario,
                         COLLECTIVE_METRICS, "policy", "time_s"),
    "dataparallel": Domain("dataparallel", DataParallelScenario, run_dataparallel_scenario,
                           DATAPARALLEL_METRICS, "policy", "time_s"),
    "pipeline": Domain("pipeline", PipelineScenario, run_pipeline_scenario, PIPELINE_METRICS,
                       "planner", "iteration_s"),
    "training": Domain("training", TrainingScenario, run_training_scenario, TRAINING_METRICS,
                       "policy", "iteration_s"),
    "plan": Domain("plan", PlanScenario, run_plan_scenario, PLAN_METRICS, "collective_policy",
                   "iteration_s"),
}


def get_domain(name: str) -> Domain:
    """The domain called ``name``; ConfigError naming the accepted domains otherwise."""
    if name not in DOMAINS:
        raise ConfigError(f"domain: unknown {name!r}; accepted: " + ", ".join(DOMAINS))
    return DOMAINS[name]
