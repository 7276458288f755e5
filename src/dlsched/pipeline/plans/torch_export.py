"""Plans as the per-rank action tables ``torch.distributed.pipelining`` runs.

``_PipelineScheduleRuntime._load_csv`` reads one CSV row per pipeline rank, one cell per
compute action written exactly like ours (``0F0``, ``1B3``, ``2I1``, ``2W1``); it infers which
rank holds each stage from the rows and inserts the sends and receives itself. Torch ranks are
the plan's used GPUs in index order (rank ``r`` runs on GPU ``rank_devices[r]``), so a GPU
hosting several stages (interleaved plans) becomes one rank with several ``PipelineStage``s,
and split backwards (I/W) stay as they are. The stage-to-rank mapping and the block range of
each stage (how the model is cut into stage modules) are written beside the table as JSON; the
two files load back into the same plan. torch runs one rank per stage, so a plan that
replicates a stage on several GPUs cannot be exported (a ConfigError says so). Torch-free.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from dlsched.config import load_document, validate
from dlsched.errors import ConfigError
from dlsched.pipeline.plans.actions import Action
from dlsched.pipeline.plans.plan import PipelinePlan, Stage, validate_plan
from dlsched.report import to_json, write_text


@dataclass(frozen=True)
class TorchSchedule:
    """A plan in torch's terms: ``rows[r]`` is rank ``r``'s compute actions, stage ``s`` holds
    blocks ``stage_blocks[s]`` (first, last+1) on rank ``stage_ranks[s]``, rank ``r`` is the
    plan's GPU ``rank_devices[r]`` out of ``num_devices``."""

    planner: str
    rows: tuple[tuple[Action, ...], ...]
    stage_blocks: tuple[tuple[int, int], ...]
    stage_ranks: tuple[int, ...]
    rank_devices: tuple[int, ...]
    num_devices: int
    num_microbatches: int

    @property
    def world_size(self) -> int:
        """Number of torch ranks."""
        return len(self.rows)

    def stages_of(self, rank: int) -> list[int]:
        """The stage indices rank ``rank`` holds, in order."""
        return [s for s, r in enumerate(self.stage_ranks) if r == rank]

    def csv_text(self) -> str:
        """The table ``_load_csv(path, format="compute_only")`` reads: a row per rank."""
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        for row in self.rows:
            writer.writerow([str(a) for a in row])
        return buffer.getvalue()


def to_torch(plan: PipelinePlan) -> TorchSchedule:
    """The torch form of ``plan``; ConfigError if a stage is replicated on several GPUs or
    the plan uses tensor parallelism."""
    if plan.tensor_parallel > 1:
        raise ConfigError(f"plan ({plan.planner}): tensor parallelism {plan.tensor_parallel}; "
                          "torch.distributed.pipelining runs each stage on one rank without "
                          "tensor parallelism (plan with --for-torch or --tensor-parallel 1)")
    for s, stage in enumerate(plan.stages):
        if len(stage.devices) != 1:
            raise ConfigError(
                f"plan ({plan.planner}): stage {s} is replicated on GPUs {list(stage.devices)}; "
                "torch.distributed.pipelining runs each stage on exactly one rank, so only "
                "plans with one GPU per stage can be exported (plan with another planner, "
                "e.g. gpipe, 1f1b, interleaved or zb-h1, or on fewer GPUs)")
    used = sorted({stage.devices[0] for stage in plan.stages})
    rank_of = {device: rank for rank, device in enumerate(used)}
    return TorchSchedule(plan.planner, tuple(plan.orders[d] for d in used),
                         tuple((st.first, st.last) for st in plan.stages),
                         tuple(rank_of[st.devices[0]] for st in plan.stages), tuple(used),
                         len(plan.orders), plan.num_microbatches)


def to_plan(schedule: TorchSchedule) -> PipelinePlan:
    """The dlsched plan of a torch schedule, checked by ``validate_plan``."""
    ranks = len(schedule.rows)
    bad = [r for r in schedule.stage_ranks if not 0 <= r < ranks]
    if bad or len(schedule.rank_devices) != ranks:
        raise ConfigError(f"mapping: stage ranks {list(schedule.stage_ranks)} and rank devices "
                          f"{list(schedule.rank_devices)} must name ranks 0..{ranks - 1}")
    orders: list[tuple[Action, ...]] = [() for _ in range(schedule.num_devices)]
    for rank, row in enumerate(schedule.rows):
        orders[schedule.rank_devices[rank]] = row
    stages = tuple(Stage(first, last, (schedule.rank_devices[rank],)) for (first, last), rank
                   in zip(schedule.stage_blocks, schedule.stage_ranks, strict=True))
    plan = PipelinePlan(schedule.planner, stages, tuple(orders), schedule.num_microbatches)
    validate_plan(plan, stages[-1].last, schedule.num_devices)
    return plan


class MappingStage(BaseModel):
    """One stage of the mapping file: its blocks and its torch rank."""

    model_config = ConfigDict(extra="forbid")
    first: int = Field(ge=0)
    last: int = Field(ge=1)
    rank: int = Field(ge=0)


class MappingFile(BaseModel):
    """The stage-to-rank mapping written beside the action table."""

    model_config = ConfigDict(extra="forbid")
    planner: str
    num_microbatches: int = Field(ge=1)
    num_devices: int = Field(ge=1)
    rank_devices: list[int] = Field(min_length=1)
    rank_device_names: list[str] = Field(min_length=1)
    stages: list[MappingStage] = Field(min_length=1)


def mapping_document(schedule: TorchSchedule, device_names: tuple[str, ...]) -> dict:
    """The mapping JSON document (stage blocks and ranks, rank to GPU)."""
    return MappingFile(
        planner=schedule.planner, num_microbatches=schedule.num_microbatches,
        num_devices=schedule.num_devices, rank_devices=list(schedule.rank_devices),
        rank_device_names=[device_names[d] for d in schedule.rank_devices],
        stages=[MappingStage(first=f, last=last, rank=r) for (f, last), r
                in zip(schedule.stage_blocks, schedule.stage_ranks, strict=True)]).model_dump()


def mapping_path_for(csv_path: Path) -> Path:
    """Default mapping file beside an action table: ``order.csv`` -> ``order.stages.json``."""
    return csv_path.with_suffix(".stages.json")


def write_torch_export(schedule: TorchSchedule, device_names: tuple[str, ...],
                       csv_path: str | Path, mapping_path: str | Path | None = None) -> Path:
    """Write the action table to ``csv_path`` and the mapping (default ``<stem>.stages.json``);
    returns the mapping path."""
    csv_path = Path(csv_path)
    mapping = Path(mapping_path) if mapping_path is not None else mapping_path_for(csv_path)
    write_text(csv_path, schedule.csv_text())
    write_text(mapping, to_json(mapping_document(schedule, device_names)) + "\n")
    return mapping


def read_torch_export(csv_path: str | Path,
                      mapping_path: str | Path | None = None) -> TorchSchedule:
    """Load an action table and its mapping back; the result is checked as a dlsched plan."""
    csv_path = Path(csv_path)
    mapping_file = Path(mapping_path) if mapping_path is not None else mapping_path_for(csv_path)
    mapping = validate(MappingFile, load_document(mapping_file), f"mapping {mapping_file}")
    if not csv_path.is_file():
        raise ConfigError(f"torch-csv: file {str(csv_path)!r} does not exist")
    with csv_path.open(newline="") as handle:
        rows = tuple(tuple(Action.parse(cell) for cell in row if cell.strip())
                     for row in csv.reader(handle))
    if len(rows) != len(mapping.rank_devices):
        raise ConfigError(f"torch-csv: {csv_path} has {len(rows)} rows but the mapping has "
                          f"{len(mapping.rank_devices)} ranks")
    schedule = TorchSchedule(mapping.planner, rows,
                             tuple((s.first, s.last) for s in mapping.stages),
                             tuple(s.rank for s in mapping.stages), tuple(mapping.rank_devices),
                             mapping.num_devices, mapping.num_microbatches)
    to_plan(schedule)
    return schedule
