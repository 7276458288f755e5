"""How the job is parallelised and run (the job planner's third input): one ``Execution``.

Its layout fields (``LAYOUT_FIELDS``) are the degrees and the schedule: tensor (``tp``),
context (``cp``: each sequence split over ``cp`` GPUs, by ``cp_algorithm`` ring attention or
the all-to-all of DeepSpeed-Ulysses: ``job.context_parallel``), pipeline (``pp``) and data
(``dp``) parallel degrees, the expert-parallel degree ``ep`` of the MoE layers (experts sharded
over ``ep`` GPUs carved out of the ``cp x dp`` ranks, as Megatron-Core carves them), and
``expert_tp``, the tensor-parallel degree of each expert (None: the layout's TP, Megatron-Core's
default ``--expert-tensor-parallel-size``; another value is MoE parallel folding, Liu et al.
2025, "MoE Parallel Folding": the MoE layers laid out as expert TP x EP x expert DP over the
same ``tp x cp x dp`` ranks the attention lays out as TP x CP x DP), model ``chunks`` per
pipeline rank (virtual stages of the interleaved schedule; 1 otherwise), ``microbatch_size``
sequences, ``global_batch`` sequences per iteration, the pipeline ``schedule``, activation
``recompute``ation (none, selective: the attention core, full: every layer from its input,
selective-op: TorchTitan's per-op policy, every other matmul kept, ``job.op_checkpoint``;
``modules:a,b``: Megatron-Core's ``--recompute-modules``, ``job.compute.module_recompute``;
``block:N``: the first N layers of each model chunk in full, ``job.compute.block_recompute``),
Megatron-LM's ``sequence_parallel`` (norms and dropout split over the TP group, all-reduces
become reduce-scatter + all-gather) and the ``zero`` stage of Rajbhandari et al. (SC 2020): 1
shards the optimizer state over DP, 2 the gradients too, 3 the weights too (FSDP's full
sharding), and the ``pipeline_split`` of the layers over the virtual stages (Megatron-Core's
even split or its accounting of the embedding and the loss as layers: ``job.pipeline_split``).

A layout field that is None is not fixed: the search chooses it (``Execution.searching``
builds one with every layout field None but those given; ``expert_tp`` None is searched there
and means "the TP degree" in a complete execution). A *complete* execution (``missing()``
empty) is what the evaluator prices; the positional order and defaults make
``Execution(tp, pp, dp, microbatch_size, global_batch)`` a complete 1F1B execution.

It also carries how the layout is run: ``run``, the run settings (``job.run_settings.RunSettings``:
precision, collectives, overlaps, kernels, gradient handling; fixed for a job, never searched).
The settings are one field holding one ``RunSettings`` rather than 18 flat fields, because the
search builds many executions under one set of settings (it carries them from the execution it
searches from, ``choice.run``) and the settings' checks between themselves run once, where the
``RunSettings`` is made. Its written form is flat: an execution file (``load_execution``) or
``flat()`` names every layout field and every run setting at the top level
(``from_flat``: ``precision: fp8`` beside ``tp: 8``), so a user's ``--execution my-run.yaml``
reads as one list of fields, each of which ``dlsched plan``'s option of the same name overrides.

Ranks are laid out in ``RANK_ORDER`` and every communication group is built here
(``group_ranks``, ``group``) from it, so no other module composes a stride and a size.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict
from pydantic.dataclasses import dataclass

from dlsched.errors import ConfigError, check_choice
from dlsched.job.compute.block_recompute import block_layers
from dlsched.job.compute.module_recompute import check_recompute_modules, modules_of
from dlsched.job.evaluation.pipeline_split import check_split, rank_layers, stage_layers
from dlsched.job.evaluation.unit_walk import UNIT_SCHEDULES, check_unit_schedule, held_stages
from dlsched.job.run_choices import FSDP2_SHARDINGS, config_errors
from dlsched.job.run_settings import RUN_FIELDS, RunSettings

if TYPE_CHECKING:
    from dlsched.hardware import Topology
    from dlsched.job.cluster import System

SCHEDULES = ("1f1b", "interleaved", "gpipe", "zb-h1")
RECOMPUTE = ("none", "selective", "full", "selective-op")
ZERO_STAGES = (0, 1, 2, 3)
CP_ALGORITHMS = ("ring", "all-to-all", "all-gather")
SEARCHED_CP_ALGORITHMS = ("ring", "all-to-all")  # all-gather (PyTorch's) priced when given
CP_LABEL_SUFFIX = {"all-to-all": "-a2a", "all-gather": "-ag"}
"""What ``Execution.label`` writes after ``CP<n>`` for each algorithm but ring."""

RANK_ORDER = ("tp", "cp", "ep", "dp", "pp")
"""Ranks laid out innermost first as Megatron-Core lays them out (``--order`` default
``tp-cp-ep-dp-pp``, ``megatron/core/parallel_state.py``): the dense layers' ranks with EP of
size 1 (TP ranks ``1`` apart, CP ``tp`` apart, DP ``tp x cp`` apart, PP ``tp x cp x dp``
apart), the MoE layers' ranks with TP the expert TP, CP of size 1 and DP the expert DP
(Megatron-Core's expert rank generator: the same order over the same ranks of a stage)."""

GROUPS: dict[str, tuple[bool, tuple[str, ...]]] = {
    "tp": (False, ("tp",)),
    "cp": (False, ("cp",)),
    "dp_cp": (False, ("cp", "dp")),
    "pp": (False, ("pp",)),
    "expert_tp": (True, ("tp",)),
    "ep": (True, ("ep",)),
    "expert_dp": (True, ("dp",)),
}
"""Each communication group: (of the MoE layers' ranks?, the ``RANK_ORDER`` dimensions it
spans, consecutive). ``dp_cp`` is the dense layers' data-parallel group with context
parallelism (``get_data_parallel_group(with_context_parallel=True)``: gradients and ZeRO
shards); ``expert_dp`` the experts' (their gradients)."""

_POSITIVE = ("tp", "pp", "dp", "microbatch_size", "global_batch", "chunks", "cp", "ep",
             "expert_tp")


def check_recompute(value: str) -> None:
    """ConfigError naming ``recompute`` unless ``value`` is one of ``RECOMPUTE``, a
    Megatron-Core module list (``modules:...``, ``job.compute.module_recompute``) or its block
    recomputation of N layers per chunk (``block:N``, ``job.compute.block_recompute``)."""
    if modules_of(value):
        check_recompute_modules(value)
    elif block_layers(value) is None:
        check_choice("recompute", value, (*RECOMPUTE, "modules:<list>", "block:<N>"))


@config_errors
@dataclass(frozen=True, config=ConfigDict(extra="forbid", strict=True))
class Execution:
    """How the job is parallelised and run (module docstring): microbatches per pipeline
    replica are ``global_batch / (microbatch_size x dp)``; ``run`` the run settings."""

    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    microbatch_size: int | None = None
    global_batch: int | None = None
    chunks: int | None = 1
    schedule: str | None = "1f1b"
    recompute: str | None = "none"
    sequence_parallel: bool | None = False
    zero: int | None = 0
    cp: int | None = 1
    ep: int | None = 1
    cp_algorithm: str | None = "ring"
    expert_tp: int | None = None
    pipeline_split: str | None = "even"
    run: RunSettings = field(default_factory=RunSettings)

    def __post_init__(self) -> None:
        for name in _POSITIVE:
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"must be >= 1 (got {value})", name)
        if self.recompute is not None:
            check_recompute(self.recompute)
        for name, accepted in (("schedule", SCHEDULES + UNIT_SCHEDULES), ("zero", ZERO_STAGES),
                               ("cp_algorithm", CP_ALGORITHMS)):
            if getattr(self, name) is not None:
                check_choice(name, getattr(self, name), accepted)
        if self.pipeline_split is not None:
            check_split(self.pipeline_split)
        if not self.missing():
            self._check_complete()

    def _check_complete(self) -> None:
        """The rules between the fields of a complete execution (expert TP equal to TP kept
        as None, sequence parallelism off without TP)."""
        if self.expert_tp == self.tp:
            object.__setattr__(self, "expert_tp", None)
        if self.tp == 1 and self.sequence_parallel:
            object.__setattr__(self, "sequence_parallel", False)
        if self.global_batch % (self.microbatch_size * self.dp):
            raise ConfigError(f"{self.global_batch} is not a multiple of microbatch size x DP = "
                              f"{self.microbatch_size * self.dp}", "global_batch")
        if self.schedule in UNIT_SCHEDULES:  # two stages per rank (job.unit_walk)
            check_unit_schedule(self.schedule, self.pp, self.num_microbatches, self.chunks)
        elif (self.schedule == "interleaved") != (self.chunks > 1):
            raise ConfigError("more than one chunk per rank needs --schedule interleaved, and "
                              f"interleaved needs chunks > 1 (got schedule {self.schedule}, "
                              f"chunks {self.chunks})", "chunks")
        if self.expert_tp is None and (self.cp * self.dp) % self.ep:
            raise ConfigError(f"{self.ep} must divide CP x DP = {self.cp * self.dp} "
                              "(expert-parallel ranks are carved out of the context- and "
                              "data-parallel ones)", "ep")
        if (self.tp * self.cp * self.dp) % (self.etp * self.ep):
            raise ConfigError(f"expert TP x EP = {self.etp * self.ep} must divide "
                              f"TP x CP x DP = {self.tp * self.cp * self.dp} (the MoE layers "
                              "fold their groups into the ranks of one pipeline stage)",
                              "expert_tp")

    @classmethod
    def searching(cls, **fixed: Any) -> Execution:
        """An execution whose layout fields are all searched but those in ``fixed``."""
        return cls(**{**dict.fromkeys(LAYOUT_FIELDS), **fixed})

    @classmethod
    def from_flat(cls, data: Mapping[str, Any], searched: bool = False) -> Execution:
        """The execution a flat mapping names (module docstring): its layout fields as they
        are, its run settings (``RUN_FIELDS``) as ``run``; with ``searched`` the layout fields
        it leaves out are searched (``searching``), else at their defaults."""
        layout = {name: value for name, value in data.items() if name not in RUN_FIELDS}
        run = RunSettings(**{name: data[name] for name in RUN_FIELDS if name in data})
        return cls.searching(**layout, run=run) if searched else cls(**layout, run=run)

    def flat(self) -> dict[str, object]:
        """Every layout field and run setting by name (``from_flat``'s form)."""
        return {**self.row(), **{name: getattr(self.run, name) for name in RUN_FIELDS}}

    def with_run(self, **changes: object) -> Execution:
        """This execution with the run settings ``changes`` (``RunSettings``' fields)."""
        return replace(self, run=replace(self.run, **changes))

    def missing(self) -> tuple[str, ...]:
        """The layout fields not fixed (searched); ``expert_tp`` None means TP and is never
        missing."""
        return tuple(name for name in LAYOUT_FIELDS
                     if name != "expert_tp" and getattr(self, name) is None)

    def fixed(self) -> dict[str, object]:
        """The layout fields fixed, by name."""
        return {name: getattr(self, name) for name in LAYOUT_FIELDS
                if getattr(self, name) is not None}

    def admits(self, other: Execution) -> bool:
        """Whether the complete ``other`` keeps every layout field fixed here."""
        return all(getattr(other, "etp" if name == "expert_tp" else name) == value
                   for name, value in self.fixed().items())

    @property
    def gpus(self) -> int:
        """GPUs the layout uses: TP x CP x PP x DP."""
        return self.tp * self.cp * self.pp * self.dp

    @property
    def etp(self) -> int:
        """Tensor-parallel degree of each expert: ``expert_tp``, the TP degree when None."""
        return self.tp if self.expert_tp is None else self.expert_tp

    @property
    def expert_dp(self) -> int:
        """Ranks of the expert-data-parallel group: ``tp x cp x dp / (expert TP x EP)``."""
        return self.tp * self.cp * self.dp // (self.etp * self.ep)

    @property
    def num_microbatches(self) -> int:
        """Microbatches per pipeline replica per iteration."""
        return self.global_batch // (self.microbatch_size * self.dp)

    @property
    def virtual_stages(self) -> int:
        """Pipeline stages counting every chunk: pp x chunks."""
        return self.pp * self.chunks

    def fsdp2(self, sharding: str, pipelined: bool) -> bool:
        """Whether PyTorch's FSDP2 runs this layout's ZeRO 3 (``sharding`` one of
        ``FSDP2_SHARDINGS``, ZeRO 3 over more than one CP x DP rank) in the regime ``pipelined``
        names: under a pipeline schedule (``pp`` > 1: no reshard, gradients synced on the last
        microbatch only, FP32 unsharded gradients accumulated over the microbatches;
        ``job.memory.torch_runtime``, ``job.communication.fsdp2_costs``) or without one
        (``pp`` 1: gathers and reduce-scatters per block and microbatch). ``sharding`` is an
        argument, not read off ``run``: the memory model prices its own ``Runtime``
        (``job.run_choices``) beside the layout, the time model ``run.sharding``."""
        return (sharding in FSDP2_SHARDINGS and self.zero == 3 and self.cp * self.dp > 1
                and (self.pp > 1) == pipelined)

    def group_ranks(self, name: str) -> tuple[int, int]:
        """(stride, size) of the communication group ``name`` (``GROUPS``): its ranks are
        ``stride`` apart in ``RANK_ORDER``."""
        expert, dims = GROUPS[name]
        sizes = ({"tp": self.etp, "cp": 1, "ep": self.ep, "dp": self.expert_dp, "pp": self.pp}
                 if expert else
                 {"tp": self.tp, "cp": self.cp, "ep": 1, "dp": self.dp, "pp": self.pp})
        first = RANK_ORDER.index(dims[0])
        return (math.prod(sizes[d] for d in RANK_ORDER[:first]),
                math.prod(sizes[d] for d in dims))

    def group(self, name: str, cluster: System) -> Topology | None:
        """The network the group ``name`` spans on ``cluster`` (None for a group of one;
        ``System.group_topology``)."""
        return cluster.group_topology(*self.group_ranks(name))

    def stage_layers(self, layers: int, mtp: int = 0) -> tuple[range, ...]:
        """The layer indices of each of the ``virtual_stages`` for a model of ``layers``
        (and ``mtp`` MTP modules beside the loss: ``job.pipeline_split``); ConfigError when
        the split is impossible."""
        return stage_layers(layers, self.pp, self.chunks, self.pipeline_split, mtp)

    def rank_layers(self, layers: int, rank: int, mtp: int = 0) -> int:
        """Layers pipeline rank ``rank`` holds over its chunks (``unit_walk.held_stages``:
        two stages of ``pp`` for DualPipe)."""
        if self.schedule in UNIT_SCHEDULES:
            spans = self.stage_layers(layers, mtp)
            return sum(len(spans[s]) for s in held_stages(self.schedule, self.pp, self.chunks,
                                                          rank))
        return rank_layers(layers, self.pp, self.chunks, self.pipeline_split, rank, mtp)

    def label(self) -> str:
        """``TP8 PP16 DP8 v1 mb1 1f1b selective sp zero1``-like short name (``CP2``/``EP8``
        after TP when used, ``-a2a``/``-ag`` after CP for all-to-all/all-gather, the pipeline
        split after ``zero`` unless even)."""
        sp = " sp" if self.sequence_parallel else ""
        cp = f" CP{self.cp}" if self.cp > 1 else ""
        if self.cp > 1 and self.cp_algorithm != "ring":
            cp += CP_LABEL_SUFFIX[self.cp_algorithm]
        ep = f" EP{self.ep}" if self.ep > 1 else ""
        ep += f" ETP{self.expert_tp}" if self.expert_tp is not None else ""
        split = "" if self.pipeline_split == "even" else f" {self.pipeline_split}"
        return (f"TP{self.tp}{cp}{ep} PP{self.pp} DP{self.dp} v{self.chunks} "
                f"mb{self.microbatch_size} {self.schedule} {self.recompute}{sp} zero{self.zero}"
                f"{split}")

    def row(self) -> dict[str, object]:
        """The layout fields as a flat record."""
        return {name: getattr(self, name) for name in LAYOUT_FIELDS}


LAYOUT_FIELDS = tuple(f.name for f in fields(Execution) if f.name != "run")
"""The layout fields, in ``Execution``'s positional order (None: searched); ``run`` (the run
settings, never searched) follows them."""
FLAT_FIELDS = LAYOUT_FIELDS + RUN_FIELDS
"""Every field of an execution's flat form (``Execution.flat``, an execution file)."""


def execution_file_fields(path: str) -> dict[str, object]:
    """The fields an execution file states (``load_execution``'s checks): its layout fields
    and its run settings by name (how ``dlsched plan`` lets an option override each)."""
    from dlsched.config import load_document

    loaded = load_execution(path)
    stated = set(map(str, load_document(path)))
    return {**loaded.fixed(), **{name: getattr(loaded.run, name) for name in RUN_FIELDS
                                 if name in stated}}


def load_execution(path: str) -> Execution:
    """An execution file (.yaml/.yml/.json): a flat mapping of any layout fields
    (``LAYOUT_FIELDS``), those left out searched, and any run settings (``RUN_FIELDS``),
    those left out at their defaults (``Execution.from_flat``); ConfigError naming the file
    and the field."""
    from dlsched.config import FILE_SUFFIXES, load_document

    if not path.lower().endswith(FILE_SUFFIXES) or not Path(path).is_file():
        raise ConfigError(f"no such execution file {path!r} (.yaml/.yml/.json)", "execution")
    data = load_document(path)
    accepted = ", ".join(FLAT_FIELDS)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a mapping of layout fields and run settings; "
                          f"accepted: {accepted}", "execution")
    unknown = sorted(set(map(str, data)) - set(FLAT_FIELDS))
    if unknown:
        raise ConfigError(f"{path}: {unknown[0]}: not a layout field or run setting; "
                          f"accepted: {accepted}", "execution")
    try:
        return Execution.from_flat(data, searched=True)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}", "execution") from None
