"""Topology files (YAML/JSON with human units) and the bundled presets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from dlsched.config import bundled_presets, preset_or_file, validate
from dlsched.config import preset_description as config_preset_description
from dlsched.hardware.topology import DimAlgorithm, Dimension, DimKind, Topology
from dlsched.validation import Bandwidth, DimSize, Seconds

PRESETS = "topologies.yaml"
"""The bundled topology presets (``presets/topologies.yaml``)."""


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


def preset_names() -> list[str]:
    """Names of the bundled topology presets."""
    return list(bundled_presets(PRESETS))


def preset_description(name: str) -> str:
    """The one-line description of a preset."""
    return config_preset_description(PRESETS, name)


def load_topology(name_or_path: str | Path) -> Topology:
    """A preset by name, or a topology file (YAML/JSON) by path."""
    return preset_or_file(name_or_path, PRESETS, "topology", topology_from_data)
