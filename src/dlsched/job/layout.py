"""How the job is parallelised (the job planner's second input).

A ``Layout`` is one complete configuration: tensor (``tp``), context (``cp``: each sequence
split over ``cp`` GPUs, by ``cp_algorithm`` ring attention or the all-to-all of DeepSpeed-
Ulysses: ``job.context_parallel``), pipeline (``pp``) and data (``dp``) parallel degrees, the
expert-parallel degree ``ep`` of the MoE layers (experts sharded over ``ep`` GPUs carved out of
the ``cp x dp`` ranks, as Megatron-Core carves them), and ``expert_tp``, the tensor-parallel
degree of each expert (None: the layout's TP, Megatron-Core's default
``--expert-tensor-parallel-size``; another value is MoE parallel folding, Liu et al. 2025,
"MoE Parallel Folding": the MoE layers laid out as expert TP x EP x expert DP over the same
``tp x cp x dp`` ranks the attention lays out as TP x CP x DP), model ``chunks`` per pipeline rank
(virtual stages of the interleaved schedule; 1 otherwise), ``microbatch_size`` sequences,
``global_batch`` sequences per iteration, the pipeline ``schedule``, activation
``recompute``ation (none, selective: the attention core, full: every layer from its input,
selective-op: TorchTitan's per-op policy, every other matmul kept, ``job.op_checkpoint``),
Megatron-LM's ``sequence_parallel`` (norms and dropout split over the TP group, all-reduces
become reduce-scatter + all-gather) and the ``zero`` stage of Rajbhandari et al. (SC 2020): 1
shards the optimizer state over DP, 2 the gradients too, 3 the weights too (FSDP's full
sharding), and the ``pipeline_split`` of the layers over the virtual stages (Megatron-Core's
even split or its accounting of the embedding and the loss as layers: ``job.pipeline_split``).

``LayoutChoice`` is what the user fixed: each field a value, or None to search.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from dlsched.errors import ConfigError, check_choice
from dlsched.job.evaluation.pipeline_split import check_split, rank_layers, stage_layers
from dlsched.job.evaluation.unit_walk import UNIT_SCHEDULES, check_unit_schedule, held_stages

SCHEDULES = ("1f1b", "interleaved", "gpipe", "zb-h1")
RECOMPUTE = ("none", "selective", "full", "selective-op")
ZERO_STAGES = (0, 1, 2, 3)
CP_ALGORITHMS = ("ring", "all-to-all")


@dataclass(frozen=True)
class Layout:
    """One configuration (see the module docstring); microbatches per pipeline replica are
    ``global_batch / (microbatch_size x dp)``."""

    tp: int
    pp: int
    dp: int
    microbatch_size: int
    global_batch: int
    chunks: int = 1
    schedule: str = "1f1b"
    recompute: str = "none"
    sequence_parallel: bool = False
    zero: int = 0
    cp: int = 1
    ep: int = 1
    cp_algorithm: str = "ring"
    expert_tp: int | None = None
    pipeline_split: str = "even"

    def __post_init__(self) -> None:
        if self.expert_tp == self.tp:
            object.__setattr__(self, "expert_tp", None)
        for field in ("tp", "pp", "dp", "microbatch_size", "global_batch", "chunks", "cp",
                      "ep", "expert_tp"):
            if getattr(self, field) is not None and getattr(self, field) < 1:
                raise ConfigError(f"--{field.replace('_', '-')}: must be >= 1 (got "
                                  f"{getattr(self, field)})")
        _choice("schedule", self.schedule, SCHEDULES + UNIT_SCHEDULES)
        _choice("recompute", self.recompute, RECOMPUTE)
        _choice("zero", self.zero, ZERO_STAGES)
        _choice("cp-algorithm", self.cp_algorithm, CP_ALGORITHMS)
        check_split(self.pipeline_split)
        if self.global_batch % (self.microbatch_size * self.dp):
            raise ConfigError(f"--global-batch: {self.global_batch} is not a multiple of "
                              f"microbatch size x DP = {self.microbatch_size * self.dp}")
        if self.schedule in UNIT_SCHEDULES:  # two stages per rank (job.unit_walk)
            check_unit_schedule(self.schedule, self.pp, self.num_microbatches, self.chunks)
        elif (self.schedule == "interleaved") != (self.chunks > 1):
            raise ConfigError("--chunks: more than one chunk per rank needs --schedule "
                              f"interleaved, and interleaved needs chunks > 1 (got schedule "
                              f"{self.schedule}, chunks {self.chunks})")
        if self.expert_tp is None and (self.cp * self.dp) % self.ep:
            raise ConfigError(f"--ep: {self.ep} must divide CP x DP = {self.cp * self.dp} "
                              "(expert-parallel ranks are carved out of the context- and "
                              "data-parallel ones)")
        if (self.tp * self.cp * self.dp) % (self.etp * self.ep):
            raise ConfigError(f"--expert-tp: expert TP x EP = {self.etp * self.ep} must divide "
                              f"TP x CP x DP = {self.tp * self.cp * self.dp} (the MoE layers "
                              "fold their groups into the ranks of one pipeline stage)")
        if self.sequence_parallel and self.tp == 1:
            object.__setattr__(self, "sequence_parallel", False)

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

    def stage_layers(self, layers: int) -> tuple[range, ...]:
        """The layer indices of each of the ``virtual_stages`` for a model of ``layers``
        (``job.pipeline_split``); ConfigError when the split is impossible."""
        return stage_layers(layers, self.pp, self.chunks, self.pipeline_split)

    def rank_layers(self, layers: int, rank: int) -> int:
        """Layers pipeline rank ``rank`` holds over its chunks."""
        if self.schedule in UNIT_SCHEDULES:  # two stages of pp for DualPipe (unit_walk)
            spans = self.stage_layers(layers)
            return sum(len(spans[s]) for s in held_stages(self.schedule, self.pp, self.chunks,
                                                          rank))
        return rank_layers(layers, self.pp, self.chunks, self.pipeline_split, rank)

    def label(self) -> str:
        """``TP8 PP16 DP8 v1 mb1 1f1b selective sp zero1``-like short name (``CP2``/``EP8``
        after TP when used, the pipeline split after ``zero`` unless even)."""
        sp = " sp" if self.sequence_parallel else ""
        cp = f" CP{self.cp}" if self.cp > 1 else ""
        if self.cp > 1 and self.cp_algorithm != "ring":
            cp += "-a2a"
        ep = f" EP{self.ep}" if self.ep > 1 else ""
        ep += f" ETP{self.expert_tp}" if self.expert_tp is not None else ""
        split = "" if self.pipeline_split == "even" else f" {self.pipeline_split}"
        return (f"TP{self.tp}{cp}{ep} PP{self.pp} DP{self.dp} v{self.chunks} "
                f"mb{self.microbatch_size} {self.schedule} {self.recompute}{sp} zero{self.zero}"
                f"{split}")

    def row(self) -> dict[str, object]:
        """The fields as a flat record."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class LayoutChoice:
    """The layout fields the user fixed (None: searched); ``global_batch`` is always given."""

    global_batch: int
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    chunks: int | None = None
    microbatch_size: int | None = None
    schedule: str | None = None
    recompute: str | None = None
    sequence_parallel: bool | None = None
    zero: int | None = None
    cp: int | None = None
    ep: int | None = None
    cp_algorithm: str | None = None
    expert_tp: int | None = None
    pipeline_split: str | None = None

    def __post_init__(self) -> None:
        if self.global_batch < 1:
            raise ConfigError(f"--global-batch: must be >= 1 (got {self.global_batch})")
        for field in ("tp", "pp", "dp", "chunks", "microbatch_size", "cp", "ep", "expert_tp"):
            value = getattr(self, field)
            if value is not None and value < 1:
                raise ConfigError(f"--{field.replace('_', '-')}: must be >= 1 (got {value})")
        if self.schedule is not None:
            _choice("schedule", self.schedule, SCHEDULES + UNIT_SCHEDULES)
        if self.recompute is not None:
            _choice("recompute", self.recompute, RECOMPUTE)
        if self.zero is not None:
            _choice("zero", self.zero, ZERO_STAGES)
        if self.cp_algorithm is not None:
            _choice("cp-algorithm", self.cp_algorithm, CP_ALGORITHMS)
        if self.pipeline_split is not None:
            check_split(self.pipeline_split)

    def fixed(self) -> dict[str, object]:
        """The fields given, by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}

    def admits(self, layout: Layout) -> bool:
        """Whether ``layout`` keeps every fixed field."""
        return all(getattr(layout, "etp" if name == "expert_tp" else name) == value
                   for name, value in self.fixed().items())


def _choice(field: str, value: object, accepted: tuple) -> None:
    check_choice(f"--{field}", value, accepted)
