"""Topology files (YAML/JSON with human units) and the bundled presets."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from dlsched.config import PresetFile, validate
from dlsched.hardware.topology import DimAlgorithm, Dimension, DimKind, Topology
from dlsched.validation import Bandwidth, DimSize, Seconds


class DimensionSpec(BaseModel):
    """One dimension as written in a file: ``{kind, size, bandwidth: "200 GB/s", latency}``."""

    model_config = ConfigDict(extra="forbid")
    kind: DimKind
    size: DimSize
    bandwidth: Bandwidth
    latency: Seconds = 0.0
    algorithm: DimAlgorithm | None = None

    @model_validator(mode="after")
    def _check(self) -> DimensionSpec:
        self.build()
        return self

    def build(self) -> Dimension:
        """The validated Dimension."""
        return Dimension(self.kind, self.size, self.bandwidth, self.latency, self.algorithm)


class TopologySpec(BaseModel):
    """A topology file: ``name`` and a list ``dims`` (dimension 1 first)."""

    model_config = ConfigDict(extra="forbid")
    name: str = "custom"
    dims: list[DimensionSpec]

    @field_validator("dims")
    @classmethod
    def _check_dims(cls, dims: list[DimensionSpec]) -> list[DimensionSpec]:
        if not dims:
            raise ValueError("a topology needs at least one dimension")
        return dims

    def build(self) -> Topology:
        """The validated Topology."""
        return Topology(self.name, tuple(d.build() for d in self.dims))


def topology_from_data(data: Any, source: str = "topology") -> Topology:
    """Build a Topology from plain data (as loaded from YAML/JSON); ConfigError on bad input."""
    return validate(TopologySpec, data, source).build()


PRESETS = PresetFile("topologies.yaml", "topology", topology_from_data)
"""The bundled topology presets."""
preset_names = PRESETS.names
preset_description = PRESETS.description
load_topology = PRESETS.load
