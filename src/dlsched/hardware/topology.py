"""Multi-dimensional networks: each dimension has a kind, a size, a bandwidth and a step latency.

Units: ``bandwidth`` is the aggregate bandwidth of one NPU on that dimension (links x link
bandwidth) in bytes/s; ``latency`` is the fixed cost of one algorithm step in seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from dlsched.errors import ConfigError
from dlsched.validation import BANDWIDTH, LATENCY, MAX_DIMS, NPUS, NPUS_PER_DIM


class DimKind(StrEnum):
    """Physical shape of one network dimension."""

    RING = "Ring"
    FULLY_CONNECTED = "FullyConnected"
    SWITCH = "Switch"


class DimAlgorithm(StrEnum):
    """Collective algorithm run inside one dimension (Themis paper, Table 1)."""

    RING = "ring"
    DIRECT = "direct"
    HALVING_DOUBLING = "halving-doubling"


DEFAULT_ALGORITHM: dict[DimKind, DimAlgorithm] = {
    DimKind.RING: DimAlgorithm.RING,
    DimKind.FULLY_CONNECTED: DimAlgorithm.DIRECT,
    DimKind.SWITCH: DimAlgorithm.HALVING_DOUBLING,
}

_SHORT_KIND = {DimKind.RING: "Ring", DimKind.FULLY_CONNECTED: "FC", DimKind.SWITCH: "SW"}


def _choices(enum: type[StrEnum]) -> str:
    return ", ".join(repr(member.value) for member in enum)


@dataclass(frozen=True)
class Dimension:
    """One network dimension; invalid values raise ConfigError naming the field."""

    kind: DimKind
    size: int
    bandwidth: float
    latency: float = 0.0
    algorithm: DimAlgorithm | None = None

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "kind", DimKind(self.kind))
        except ValueError:
            raise ConfigError(f"kind: unknown dimension kind {self.kind!r}; accepted: "
                              f"{_choices(DimKind)}") from None
        algorithm = DEFAULT_ALGORITHM[self.kind] if self.algorithm is None else self.algorithm
        try:
            object.__setattr__(self, "algorithm", DimAlgorithm(algorithm))
        except ValueError:
            raise ConfigError(f"algorithm: unknown algorithm {algorithm!r}; accepted: "
                              f"{_choices(DimAlgorithm)}") from None
        NPUS_PER_DIM.check(self.size, "size")
        if self.algorithm is DimAlgorithm.HALVING_DOUBLING and self.size & (self.size - 1):
            raise ConfigError(f"size: halving-doubling needs a power-of-two size (got "
                              f"{self.size}); use algorithm 'ring' or 'direct', or a size such "
                              "as 8 or 16")
        BANDWIDTH.check(self.bandwidth, "bandwidth")
        LATENCY.check(self.latency, "latency")

    @property
    def short_name(self) -> str:
        """Kind abbreviation used in topology names: Ring, FC or SW."""
        return _SHORT_KIND[self.kind]


@dataclass(frozen=True)
class Topology:
    """A multi-dimensional network: NPU count is the product of the dimension sizes."""

    name: str
    dims: tuple[Dimension, ...]

    def __post_init__(self) -> None:
        if not self.dims:
            raise ConfigError("dims: a topology needs at least one dimension")
        object.__setattr__(self, "dims", tuple(self.dims))
        if len(self.dims) > MAX_DIMS:
            raise ConfigError(f"dims: {len(self.dims)} dimensions; accepted: at most {MAX_DIMS}")
        NPUS.check(self.num_npus, "dims (product of the sizes)")

    @property
    def num_npus(self) -> int:
        """Total NPUs (product of dimension sizes)."""
        return math.prod(d.size for d in self.dims)

    @property
    def total_bandwidth(self) -> float:
        """Sum of the per-NPU dimension bandwidths, bytes/s."""
        return sum(d.bandwidth for d in self.dims)

    @property
    def shape(self) -> str:
        """Sizes joined by 'x', e.g. '4x8x4x8'."""
        return "x".join(str(d.size) for d in self.dims)

    def with_latency_scale(self, factor: float) -> Topology:
        """The same topology with every step latency multiplied by ``factor`` (0 removes it)."""
        dims = tuple(Dimension(d.kind, d.size, d.bandwidth, d.latency * factor, d.algorithm)
                     for d in self.dims)
        suffix = "" if factor == 1 else ("@0lat" if factor == 0 else f"@lat*{factor:g}")
        return Topology(self.name + suffix, dims)
