"""A training workload: per-layer compute times and the collectives each phase issues.

This is the ASTRA-sim 1.0 layer model made explicit. Every layer has a forward compute, an
input-gradient compute, a weight-gradient compute (seconds) and an optimizer-update time, and
may issue a collective after each (``Comm``): the forward's (model-parallel activations,
DLRM's embedding All-to-All), the input gradient's (model-parallel gradients), the weight
gradient's (data-parallel All-Reduce or ZeRO's Reduce-Scatter) and the update's (ZeRO's
parameter All-Gather). Who waits for a collective is data too (``Comm.consumer``), so
"the All-to-All overlaps the bottom MLP" is written down, not coded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from dlsched.collectives.plan import CollectiveOp
from dlsched.errors import ConfigError

GROUPS = ("all", "mp", "dp")


@dataclass(frozen=True)
class Comm:
    """A collective of ``num_bytes`` bytes per NPU over ``group``.

    ``group``: ``all`` (every NPU), ``mp`` (the model-parallel group: the first
    ``Workload.model_parallel`` NPUs over the first dimensions) or ``dp`` (the rest: one NPU of
    each model-parallel group). ``issuer``: the layer whose compute of the same phase produces
    the data (default: the layer that owns the Comm). ``consumer``: the layer whose compute
    waits for it (default: for a forward collective the next layer's forward, for an
    input-gradient collective the previous layer's backward, for a weight-gradient collective
    the owner's update, for an update collective the owner's next forward). ``dims``: explicit
    0-based network dimensions (whole) instead of ``group``, as ASTRA-sim workloads give them.
    """

    op: CollectiveOp
    num_bytes: int
    group: str = "all"
    issuer: str | None = None
    consumer: str | None = None
    dims: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "op", CollectiveOp(self.op))
        except ValueError:
            raise ConfigError(f"op: unknown collective {self.op!r}; accepted: "
                              + ", ".join(repr(o.value) for o in CollectiveOp)) from None
        if self.group not in GROUPS:
            raise ConfigError(f"group: unknown group {self.group!r}; accepted: "
                              + ", ".join(repr(g) for g in GROUPS))
        if isinstance(self.num_bytes, bool) or not isinstance(self.num_bytes, int) \
                or self.num_bytes < 1:
            raise ConfigError(f"num_bytes: must be an integer >= 1 (got {self.num_bytes!r})")


@dataclass(frozen=True)
class WorkloadLayer:
    """One layer: compute seconds per phase and the collective (or None) after each."""

    name: str
    forward_s: float
    input_grad_s: float
    weight_grad_s: float
    update_s: float = 0.0
    forward_comm: Comm | None = None
    input_grad_comm: Comm | None = None
    weight_grad_comm: Comm | None = None
    update_comm: Comm | None = None

    def __post_init__(self) -> None:
        for field in ("forward_s", "input_grad_s", "weight_grad_s", "update_s"):
            value = getattr(self, field)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ConfigError(f"layer {self.name!r}: {field} must be a finite number of "
                                  f"seconds >= 0 (got {value!r})")

    @property
    def compute_s(self) -> float:
        """Seconds of compute of the layer in one iteration (all phases and the update)."""
        return self.forward_s + self.input_grad_s + self.weight_grad_s + self.update_s

    def comms(self) -> dict[str, Comm]:
        """The layer's collectives by phase (``forward``, ``input_grad``, ``weight_grad``,
        ``update``)."""
        phases = {"forward": self.forward_comm, "input_grad": self.input_grad_comm,
                  "weight_grad": self.weight_grad_comm, "update": self.update_comm}
        return {phase: comm for phase, comm in phases.items() if comm is not None}


@dataclass(frozen=True)
class Workload:
    """Layers in forward order; ``model_parallel`` NPUs form one model-parallel group (1: pure
    data parallelism); ``description`` says what the numbers assume. ``recompute``: activation
    checkpointing as (checkpoint, initiator) layer indices: before the backward of the
    initiator, layers checkpoint .. initiator - 1 compute their forward again and reissue its
    collective (blocking), as ASTRA-sim 1.0's HYBRID_TRANSFORMER_FWD_IN_BCKWD does."""

    name: str
    layers: tuple[WorkloadLayer, ...]
    model_parallel: int = 1
    description: str = ""
    recompute: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        if not self.layers:
            raise ConfigError("layers: a workload needs at least one layer")
        names = [layer.name for layer in self.layers]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ConfigError(f"layers: duplicate layer names {duplicates}")
        if isinstance(self.model_parallel, bool) or not isinstance(self.model_parallel, int) \
                or self.model_parallel < 1:
            raise ConfigError(f"model_parallel: must be an integer >= 1 "
                              f"(got {self.model_parallel!r})")
        self._check_recompute()
        for layer in self.layers:
            for phase, comm in layer.comms().items():
                for field in ("issuer", "consumer"):
                    target = getattr(comm, field)
                    if target is not None and target not in names:
                        raise ConfigError(f"layer {layer.name!r} {phase} comm: {field} "
                                          f"{target!r} is not a layer of the workload")

    def _check_recompute(self) -> None:
        seen: set[int] = set()
        for checkpoint, initiator in self.recompute:
            if not 0 <= checkpoint <= initiator < len(self.layers):
                raise ConfigError(f"recompute: ({checkpoint}, {initiator}) needs 0 <= "
                                  f"checkpoint <= initiator < {len(self.layers)}")
            again = seen & set(range(checkpoint, initiator))
            if again:
                raise ConfigError(f"recompute: layers {sorted(again)} would be recomputed twice")
            seen |= set(range(checkpoint, initiator))
        initiators = [initiator for _, initiator in self.recompute]
        if len(set(initiators)) != len(initiators):
            raise ConfigError(f"recompute: an initiator appears twice ({initiators})")

    def recomputed(self, initiator: int) -> range:
        """Layers whose forward is recomputed before the backward of ``initiator``."""
        for checkpoint, layer in self.recompute:
            if layer == initiator:
                return range(checkpoint, initiator)
        return range(0)

    @property
    def compute_s(self) -> float:
        """Compute-only iteration time: the sum of every layer's phases and updates and of the
        recomputed forwards, seconds."""
        again = sum(self.layers[j].forward_s for checkpoint, initiator in self.recompute
                    for j in range(checkpoint, initiator))
        return sum(layer.compute_s for layer in self.layers) + again

    def with_compute_scale(self, factor: float) -> Workload:
        """The same workload with every compute and update time multiplied by ``factor``
        (>= 0; 0 leaves only the communication)."""
        if not (isinstance(factor, int | float) and math.isfinite(factor) and factor >= 0):
            raise ConfigError(f"compute scale: must be a finite number >= 0 (got {factor!r})")
        layers = tuple(replace(layer, forward_s=layer.forward_s * factor,
                               input_grad_s=layer.input_grad_s * factor,
                               weight_grad_s=layer.weight_grad_s * factor,
                               update_s=layer.update_s * factor) for layer in self.layers)
        return replace(self, layers=layers)

    def index(self, name: str) -> int:
        """Position of the layer called ``name``."""
        return [layer.name for layer in self.layers].index(name)
