"""ASTRA-sim system JSON -> ``AstraSystem``: the settings that matter to dlsched's collectives.

Keys read (ASTRA-sim 2.x JSON; the 1.0 Themis branch's scheduling keys too), and what they
become in dlsched:

| ASTRA-sim key | values | dlsched |
|---|---|---|
| ``preferred-dataset-splits`` | int | chunks per collective |
| ``active-chunks-per-dimension`` | int | concurrency (chunks a dimension runs at once) |
| ``scheduling-policy`` | LIFO, FIFO | order among concurrent collectives |
| ``inter-dimension-scheduling`` | baseline, themis (offlineGreedy), dlsched | policy |
| ``intra-dimension-scheduling`` | FIFO, smallestFirst (SCF) | intra (fifo, scf) |
| ``all-reduce-implementation`` etc. | per-dimension ring, direct, halvingDoubling | algorithm |
| ``collective-optimization`` | baseline, localBWAware | recorded (see ``notes``) |
| ``endpoint-delay`` | ns | recorded; charged per step with ``--astra-compat`` |
| ``local-mem-bw`` | GB/s (1e9) | recorded; reduction pass with ``--astra-compat`` |

Implementations are a JSON list (2.x) or one string joined by ``_`` (1.0, ``ring_direct``).
Keys ASTRA-sim reads for its memory and compute models (``boost-mode``,
``roofline-enabled``, ``peak-perf``, ...) are accepted and listed in ``ignored_keys``; any other
key is an error naming it. Absent keys take dlsched's defaults (64 chunks, 1 per dimension,
LIFO, baseline, FIFO, each dimension's default algorithm).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dlsched.collectives.astra_compat import AstraCompat, compat_notes
from dlsched.collectives.plan import CollectiveOp, IntraPolicy
from dlsched.errors import ConfigError
from dlsched.hardware.topology import DimAlgorithm, Dimension, Topology
from dlsched.interop.source import file_error, json_key_line, read_text
from dlsched.validation import MAX_CHUNKS, MAX_CONCURRENCY

IGNORED_KEYS = frozenset({
    "boost-mode", "roofline-enabled", "peak-perf", "local-reduction-delay",
    "model-shared-bus", "L", "o", "g", "G", "seprate-log", "trace-enabled",
    "replay-only", "track-local-mem", "local-mem-trace-filename",
})
INTER = {"baseline": "baseline", "ascending": "baseline", "themis": "themis",
         "offlineGreedy": "themis", "dlsched": "dlsched"}
# ASTRA-sim values dlsched does not implement: an error naming them, never a substitute.
NOT_IMPLEMENTED = {
    "offlineGreedyFlex": "Themis with variable chunk sizes",
    "roundRobin": "round-robin dimension rotation", "onlineGreedy": "online greedy",
    "RG": "RG intra-dimension order", "lessRemainingPhaseFirst": "LRPF intra order",
    "oneRing": "one ring over all NPUs", "oneDirect": "one direct over all NPUs",
    "oneHalvingDoubling": "one halving-doubling over all NPUs",
    "doubleBinaryTree": "double binary tree",
}
INTRA = {"FIFO": IntraPolicy.FIFO, "smallestFirst": IntraPolicy.SCF, "SCF": IntraPolicy.SCF}
IMPLEMENTATIONS = {"ring": DimAlgorithm.RING, "direct": DimAlgorithm.DIRECT,
                   "halvingDoubling": DimAlgorithm.HALVING_DOUBLING}
IMPLEMENTATION_KEYS = {
    CollectiveOp.ALL_REDUCE: "all-reduce-implementation",
    CollectiveOp.REDUCE_SCATTER: "reduce-scatter-implementation",
    CollectiveOp.ALL_GATHER: "all-gather-implementation",
    CollectiveOp.ALL_TO_ALL: "all-to-all-implementation",
}


def _one_of(value: str, accepted: dict[str, Any]) -> str:
    if value in NOT_IMPLEMENTED:
        raise ValueError(f"{value!r} ({NOT_IMPLEMENTED[value]}) is not implemented in dlsched; "
                         f"accepted: {', '.join(accepted)}")
    if value not in accepted:
        raise ValueError(f"unknown value {value!r}; accepted: {', '.join(accepted)}")
    return value


def _implementations(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    items = value.split("_") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not items:
        raise ValueError("expected a non-empty list of per-dimension implementations")
    result = []
    for item in items:
        name = re.sub(r"(?<=^direct)\d+$", "", str(item))
        result.append(_one_of(name, IMPLEMENTATIONS))
    return tuple(result)


class AstraSystem(BaseModel):
    """The collective settings of an ASTRA-sim system file (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True,
                              allow_inf_nan=False)
    scheduling_policy: str = Field("LIFO", alias="scheduling-policy")
    endpoint_delay_ns: float = Field(0.0, alias="endpoint-delay", ge=0, le=1e12)
    local_mem_bw_gbs: float | None = Field(None, alias="local-mem-bw", gt=0, le=1e9)
    active_chunks_per_dimension: int = Field(1, alias="active-chunks-per-dimension", ge=1,
                                             le=MAX_CONCURRENCY)
    preferred_dataset_splits: int = Field(64, alias="preferred-dataset-splits", ge=1,
                                          le=MAX_CHUNKS)
    all_reduce_implementation: tuple[str, ...] | None = Field(
        None, alias="all-reduce-implementation")
    reduce_scatter_implementation: tuple[str, ...] | None = Field(
        None, alias="reduce-scatter-implementation")
    all_gather_implementation: tuple[str, ...] | None = Field(
        None, alias="all-gather-implementation")
    all_to_all_implementation: tuple[str, ...] | None = Field(
        None, alias="all-to-all-implementation")
    collective_optimization: str = Field("localBWAware", alias="collective-optimization")
    intra_dimension_scheduling: str = Field("FIFO", alias="intra-dimension-scheduling")
    inter_dimension_scheduling: str = Field("baseline", alias="inter-dimension-scheduling")
    ignored_keys: tuple[str, ...] = ()

    _scheduling = field_validator("scheduling_policy")(
        lambda v: _one_of(v, {"LIFO": 0, "FIFO": 0}))
    _optimization = field_validator("collective_optimization")(
        lambda v: _one_of(v, {"baseline": 0, "localBWAware": 0}))
    _intra = field_validator("intra_dimension_scheduling")(lambda v: _one_of(v, INTRA))
    _inter = field_validator("inter_dimension_scheduling")(lambda v: _one_of(v, INTER))
    _impl = field_validator("all_reduce_implementation", "reduce_scatter_implementation",
                            "all_gather_implementation", "all_to_all_implementation",
                            mode="before")(_implementations)

    @property
    def policy(self) -> str:
        """dlsched collective policy: ``baseline``, ``themis`` or ``dlsched``."""
        return INTER[self.inter_dimension_scheduling]

    @property
    def intra(self) -> IntraPolicy:
        """Intra-dimension order: FIFO or SCF (ASTRA-sim's smallestFirst)."""
        return INTRA[self.intra_dimension_scheduling]

    @property
    def chunks(self) -> int:
        """Chunks per collective (preferred-dataset-splits)."""
        return self.preferred_dataset_splits

    @property
    def concurrency(self) -> int:
        """Chunks one dimension runs at once (active-chunks-per-dimension)."""
        return self.active_chunks_per_dimension

    @property
    def lifo(self) -> bool:
        """True when the most recently issued collective is served first among concurrent ones."""
        return self.scheduling_policy == "LIFO"

    def algorithms(self, op: CollectiveOp) -> tuple[DimAlgorithm, ...] | None:
        """Per-dimension algorithm for ``op`` (None: each dimension's default)."""
        names = getattr(self, IMPLEMENTATION_KEYS[op].replace("-", "_"))
        return None if names is None else tuple(IMPLEMENTATIONS[n] for n in names)

    def apply(self, topology: Topology, op: CollectiveOp) -> Topology:
        """``topology`` with the per-dimension algorithms this system gives ``op``; a list of one
        implementation applies to every dimension. ConfigError if the counts differ."""
        algorithms = self.algorithms(op)
        if algorithms is None:
            return topology
        if len(algorithms) == 1:
            algorithms = algorithms * len(topology.dims)
        if len(algorithms) != len(topology.dims):
            raise ConfigError(f"{IMPLEMENTATION_KEYS[op]}: {len(algorithms)} implementations "
                              f"for a network with {len(topology.dims)} dimensions")
        try:
            dims = tuple(Dimension(d.kind, d.size, d.bandwidth, d.latency, a)
                         for d, a in zip(topology.dims, algorithms, strict=True))
        except ValueError as error:
            raise ConfigError(f"{IMPLEMENTATION_KEYS[op]}: {error}") from None
        return Topology(topology.name, dims)

    def compat(self) -> AstraCompat:
        """ASTRA-sim 2.x's behaviours with this file's ``local-mem-bw`` (GB/s, GB = 1e9 B, as
        ASTRA reads it) and ``endpoint-delay`` (ns)."""
        return AstraCompat(None if self.local_mem_bw_gbs is None else self.local_mem_bw_gbs * 1e9,
                           self.endpoint_delay_ns * 1e-9)

    def notes(self) -> list[str]:
        """Settings dlsched reads but does not model, each as one sentence for the user."""
        result = []
        if self.collective_optimization == "baseline":
            result.append("collective-optimization 'baseline' (full-size All-Reduce on every "
                          "dimension) is not modelled: dlsched runs the hierarchical "
                          "RS/AG form (ASTRA-sim's localBWAware)")
        if self.endpoint_delay_ns:
            result.append(f"endpoint-delay {self.endpoint_delay_ns:g} ns is not modelled "
                          "(--astra-compat charges it as each phase starts and after each of "
                          "its steps)")
        if self.local_mem_bw_gbs is not None:
            result.append(f"local-mem-bw {self.local_mem_bw_gbs:g} GB/s is not modelled "
                          "(--astra-compat charges each reduction 3 x bytes / local-mem-bw)")
        if self.ignored_keys:
            result.append("ignored (memory/compute settings): " + ", ".join(self.ignored_keys))
        return result


def astra_notes(system: AstraSystem | None, topology: Topology, ops: Iterable[CollectiveOp],
                policies: Iterable[str]) -> list[str]:
    """What a run of ``ops`` under ``policies`` on ``topology`` tells a user running without
    ``--astra-compat``: the system file's unmodelled settings (``AstraSystem.notes``), then
    each ASTRA-sim behaviour that would change it (``compat_notes``), once each, sorted."""
    memory = None if system is None else system.compat().local_mem_bw
    names = tuple(policies)
    return (system.notes() if system is not None else []) + sorted({
        note for op in ops for name in names
        for note in compat_notes(topology, op, name, memory)})


def parse_astra_system(text: str, path: str | Path = "<system>") -> AstraSystem:
    """The AstraSystem of an ASTRA-sim system JSON text; ConfigError naming file, line, field."""
    path = Path(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise file_error(path, error.lineno, "<document>", f"not valid JSON: {error.msg}") \
            from None
    if not isinstance(data, dict):
        raise file_error(path, 1, "<document>", "expected a JSON object of settings")
    ignored = tuple(k for k in data if k in IGNORED_KEYS)
    kept = {k: v for k, v in data.items() if k not in IGNORED_KEYS}
    try:
        return AstraSystem.model_validate(kept | {"ignored_keys": ignored})
    except ValidationError as error:
        def line_of(item: Any) -> int:
            key_line = json_key_line(text, str(item["loc"][0])) if item["loc"] else None
            return key_line or 0
        item = min(error.errors(), key=line_of)
        key = str(item["loc"][0]) if item["loc"] else "<document>"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            known = sorted({f.alias for f in AstraSystem.model_fields.values() if f.alias})
            message = f"unknown key; accepted: {', '.join(known)} (ignored: " \
                      f"{', '.join(sorted(IGNORED_KEYS))})"
        elif not isinstance(item.get("input"), dict):
            message += f" (got {item.get('input')!r})"
        raise file_error(path, json_key_line(text, key), key, message) from None


def read_astra_system(path: str | Path) -> AstraSystem:
    """Read an ASTRA-sim system JSON file."""
    return parse_astra_system(read_text(path, "astra-system"), path)


def format_astra_system(system: AstraSystem) -> str:
    """The system JSON text of ``system`` (inverse of ``parse_astra_system``)."""
    data = system.model_dump(by_alias=True, exclude={"ignored_keys"}, exclude_none=True)
    return json.dumps(data, indent=4) + "\n"


def write_astra_system(system: AstraSystem, path: str | Path) -> None:
    """Write ``system`` as an ASTRA-sim system JSON file."""
    Path(path).write_text(format_astra_system(system), encoding="utf-8")
