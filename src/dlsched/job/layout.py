"""How the job is parallelised (the job planner's second input).

A ``Layout`` is one complete configuration: tensor (``tp``), pipeline (``pp``) and data
(``dp``) parallel degrees, model ``chunks`` per pipeline rank (virtual stages of the
interleaved schedule; 1 otherwise), ``microbatch_size`` sequences, ``global_batch`` sequences
per iteration, the pipeline ``schedule``, activation ``recompute``ation (none, selective:
the attention core, full: every layer from its input), Megatron-LM's ``sequence_parallel``
(norms and dropout split over the TP group, all-reduces become reduce-scatter + all-gather)
and the ``zero`` stage of Rajbhandari et al. (SC 2020): 1 shards the optimizer state over DP,
2 the gradients too, 3 the weights too (FSDP's full sharding).

``LayoutChoice`` is what the user fixed: each field a value, or None to search.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from dlsched.errors import ConfigError

SCHEDULES = ("1f1b", "interleaved", "gpipe", "zb-h1")
RECOMPUTE = ("none", "selective", "full")
ZERO_STAGES = (0, 1, 2, 3)


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

    def __post_init__(self) -> None:
        for field in ("tp", "pp", "dp", "microbatch_size", "global_batch", "chunks"):
            if getattr(self, field) < 1:
                raise ConfigError(f"--{field.replace('_', '-')}: must be >= 1 (got "
                                  f"{getattr(self, field)})")
        _choice("schedule", self.schedule, SCHEDULES)
        _choice("recompute", self.recompute, RECOMPUTE)
        _choice("zero", self.zero, ZERO_STAGES)
        if self.global_batch % (self.microbatch_size * self.dp):
            raise ConfigError(f"--global-batch: {self.global_batch} is not a multiple of "
                              f"microbatch size x DP = {self.microbatch_size * self.dp}")
        if (self.schedule == "interleaved") != (self.chunks > 1):
            raise ConfigError("--chunks: more than one chunk per rank needs --schedule "
                              f"interleaved, and interleaved needs chunks > 1 (got schedule "
                              f"{self.schedule}, chunks {self.chunks})")
        if self.sequence_parallel and self.tp == 1:
            object.__setattr__(self, "sequence_parallel", False)

    @property
    def gpus(self) -> int:
        """GPUs the layout uses."""
        return self.tp * self.pp * self.dp

    @property
    def num_microbatches(self) -> int:
        """Microbatches per pipeline replica per iteration."""
        return self.global_batch // (self.microbatch_size * self.dp)

    @property
    def virtual_stages(self) -> int:
        """Pipeline stages counting every chunk: pp x chunks."""
        return self.pp * self.chunks

    def label(self) -> str:
        """``TP8 PP16 DP8 x1 mb1 1f1b sel sp z1``-like short name."""
        sp = " sp" if self.sequence_parallel else ""
        return (f"TP{self.tp} PP{self.pp} DP{self.dp} v{self.chunks} mb{self.microbatch_size} "
                f"{self.schedule} {self.recompute}{sp} zero{self.zero}")

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

    def __post_init__(self) -> None:
        if self.global_batch < 1:
            raise ConfigError(f"--global-batch: must be >= 1 (got {self.global_batch})")
        for field in ("tp", "pp", "dp", "chunks", "microbatch_size"):
            value = getattr(self, field)
            if value is not None and value < 1:
                raise ConfigError(f"--{field.replace('_', '-')}: must be >= 1 (got {value})")
        if self.schedule is not None:
            _choice("schedule", self.schedule, SCHEDULES)
        if self.recompute is not None:
            _choice("recompute", self.recompute, RECOMPUTE)
        if self.zero is not None:
            _choice("zero", self.zero, ZERO_STAGES)

    def fixed(self) -> dict[str, object]:
        """The fields given, by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}

    def admits(self, layout: Layout) -> bool:
        """Whether ``layout`` keeps every fixed field."""
        return all(getattr(layout, name) == value for name, value in self.fixed().items())


def _choice(field: str, value: object, accepted: tuple) -> None:
    if value not in accepted:
        raise ConfigError(f"--{field}: {value!r} is not accepted; accepted: "
                          + ", ".join(map(str, accepted)))
