"""Topology files (YAML/JSON with human units) and the bundled presets."""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from dlsched.config import load_document, validate
from dlsched.errors import ConfigError
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


@cache
def _preset_documents() -> dict[str, Any]:
    text = resources.files("dlsched").joinpath("presets/topologies.yaml").read_text()
    return yaml.safe_load(text)


def preset_names() -> list[str]:
    """Names of the bundled topology presets."""
    return list(_preset_documents())


def preset_description(name: str) -> str:
    """The one-line description of a preset."""
    return str(_preset_documents()[name].get("description", ""))


def load_topology(name_or_path: str | Path) -> Topology:
    """A preset by name, or a topology file (YAML/JSON) by path."""
    presets = _preset_documents()
    key = str(name_or_path)
    if key in presets:
        data = {k: v for k, v in presets[key].items() if k != "description"}
        return topology_from_data({"name": key, **data}, f"preset {key}")
    if Path(key).suffix.lower() in {".yaml", ".yml", ".json"}:
        return topology_from_data(load_document(key), key)
    raise ConfigError(f"topology: {key!r} is neither a preset nor a .yaml/.json file; presets: "
                      + ", ".join(presets))
