"""Plans saved as JSON (``dlsched pipeline plan --save plan.json``) and loaded back.

A plan file holds the plan itself (stages, per-GPU orders written ``2F0 ...``), what it was
planned for (model name, block names with their output activation and parameter bytes, device
names: TP groups when the plan's ``tensor_parallel`` is above 1, microbatch size) and the
simulator's predicted iteration time (seconds), so the runtime
can check a model against it and report measured beside predicted. Loading validates the plan
with ``validate_plan``; a bad file is refused with the field and the value named.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dlsched.config import load_document, validate
from dlsched.errors import ConfigError
from dlsched.pipeline.plans.actions import parse_orders
from dlsched.pipeline.plans.plan import PipelinePlan, Stage, validate_plan
from dlsched.pipeline.registry import PipelineResult
from dlsched.report import to_json, write_text
from dlsched.validation import DATA_SIZE, MAX_BATCH, MAX_LAYERS, MAX_MICROBATCHES, Duration

MAX_DATA_BYTES = DATA_SIZE.high

FORMAT = "dlsched-pipeline-plan"


class StageSpec(BaseModel):
    """Blocks ``first..last-1`` on GPUs ``devices`` (indices into ``device_names``);
    ``split``: the replicas split every microbatch instead of taking turns."""

    model_config = ConfigDict(extra="forbid")
    first: int = Field(ge=0)
    last: int = Field(ge=1)
    devices: list[int] = Field(min_length=1)
    split: bool = False


class BlockSpec(BaseModel):
    """A block's name, output activation bytes per microbatch and parameter bytes."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    name: str
    activation_bytes: float = Field(ge=0, le=MAX_DATA_BYTES)
    param_bytes: float = Field(ge=0, le=MAX_DATA_BYTES)


class PlanFile(BaseModel):
    """The JSON document of a saved plan."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    format: Literal["dlsched-pipeline-plan"] = FORMAT
    version: Literal[1] = 1
    planner: str
    model: str
    devices: str
    device_names: list[str] = Field(min_length=1)
    microbatch_size: int = Field(ge=1, le=MAX_BATCH)
    num_microbatches: int = Field(ge=1, le=MAX_MICROBATCHES)
    blocks: list[BlockSpec] = Field(min_length=1, max_length=MAX_LAYERS)
    stages: list[StageSpec] = Field(min_length=1)
    orders: list[str]
    recompute: Literal["none", "selective", "full"] = "none"
    tensor_parallel: int = Field(1, ge=1, le=64)
    ddp_buckets: bool = False
    predicted_iteration_s: Duration

    @field_validator("orders")
    @classmethod
    def _orders(cls, value: list[str]) -> list[str]:
        for k, line in enumerate(value):
            try:
                parse_orders(f"gpu: {line}")
            except ConfigError as error:
                raise ValueError(f"gpu{k}: {error}") from None
        return value


@dataclass(frozen=True)
class SavedPlan:
    """A loaded plan file: the validated ``plan`` and what it was planned for."""

    plan: PipelinePlan
    model: str
    devices: str
    device_names: tuple[str, ...]
    microbatch_size: int
    block_names: tuple[str, ...]
    activation_bytes: tuple[float, ...]
    param_bytes: tuple[float, ...]
    predicted_iteration_s: float

    @property
    def num_blocks(self) -> int:
        """Number of blocks the plan partitions."""
        return len(self.block_names)


def saved_from_result(result: PipelineResult, microbatch_size: int) -> SavedPlan:
    """The savable form of a scored plan (``run_planner``'s result): the model's blocks,
    and the devices the plan indexes (TP groups above degree 1)."""
    chain, graph = result.problem.chain, result.problem.for_plan(result.plan).graph
    return SavedPlan(result.plan, chain.name, graph.name, tuple(d.name for d in graph.devices),
                     microbatch_size, chain.block_names,
                     tuple(float(v) for v in chain.activation_bytes),
                     tuple(float(v) for v in chain.param_bytes), float(result.sim.iteration_s))


def plan_document(saved: SavedPlan) -> dict:
    """The JSON document of ``saved`` (see ``PlanFile``)."""
    plan = saved.plan
    return PlanFile(
        planner=plan.planner, model=saved.model, devices=saved.devices,
        device_names=list(saved.device_names), microbatch_size=saved.microbatch_size,
        num_microbatches=plan.num_microbatches,
        blocks=[BlockSpec(name=n, activation_bytes=a, param_bytes=p) for n, a, p in
                zip(saved.block_names, saved.activation_bytes, saved.param_bytes, strict=True)],
        stages=[StageSpec(first=s.first, last=s.last, devices=list(s.devices), split=s.split)
                for s in plan.stages],
        orders=[" ".join(map(str, order)) for order in plan.orders],
        recompute=plan.recompute, tensor_parallel=plan.tensor_parallel,
        ddp_buckets=plan.ddp_buckets,
        predicted_iteration_s=saved.predicted_iteration_s).model_dump()


def save_plan(saved: SavedPlan, path: str | Path) -> Path:
    """Write ``saved`` as JSON to ``path``."""
    return write_text(path, to_json(plan_document(saved)) + "\n")


def load_plan(path: str | Path) -> SavedPlan:
    """Read and validate a plan file; ConfigError names the bad field or plan rule."""
    return saved_from_document(validate(PlanFile, load_document(path), f"plan file {path}"))


def saved_from_document(document: PlanFile) -> SavedPlan:
    """The SavedPlan of a validated document (the plan is checked with ``validate_plan``)."""
    orders = tuple(parse_orders(f"gpu: {line}")[0] for line in document.orders)
    plan = PipelinePlan(document.planner,
                        tuple(Stage(s.first, s.last, tuple(s.devices), s.split)
                              for s in document.stages),
                        orders, document.num_microbatches, recompute=document.recompute,
                        tensor_parallel=document.tensor_parallel,
                        ddp_buckets=document.ddp_buckets)
    validate_plan(plan, len(document.blocks), len(document.device_names))
    blocks = document.blocks
    return SavedPlan(plan, document.model, document.devices, tuple(document.device_names),
                     document.microbatch_size, tuple(b.name for b in blocks),
                     tuple(b.activation_bytes for b in blocks),
                     tuple(b.param_bytes for b in blocks), document.predicted_iteration_s)
