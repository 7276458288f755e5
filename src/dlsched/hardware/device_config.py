"""Validated device-graph files: three forms, each a pydantic schema.

* servers: ``servers: [{count, gpu: {flops, memory}, link: {bandwidth, latency}}]`` and
  ``inter: {bandwidth, latency}`` between servers;
* matrix: ``devices: [{name, flops, memory, server}]``, ``bandwidth: [[...]]`` and optional
  ``latency: [[...]]`` (strings with units or plain B/s and s);
* topology: ``topology: <preset or file>``, ``count``, ``gpu: {flops, memory}``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from dlsched.config import validate
from dlsched.errors import ConfigError
from dlsched.hardware.device_graph import (
    Device,
    DeviceGraph,
    graph_from_topology,
    server_graph,
)
from dlsched.hardware.topology_config import load_topology
from dlsched.units import parse_bandwidth, parse_bytes, parse_flops, parse_time


class GpuSpec(BaseModel):
    """A GPU kind: sustained ``flops`` ("125 TFLOP/s") and ``memory`` ("80 GiB")."""

    model_config = ConfigDict(extra="forbid")
    flops: float
    memory: int
    _flops = field_validator("flops", mode="before")(lambda v: parse_flops(v))
    _memory = field_validator("memory", mode="before")(lambda v: parse_bytes(v))

    @model_validator(mode="after")
    def _positive(self) -> GpuSpec:
        if self.flops <= 0 or self.memory <= 0:
            raise ValueError("flops and memory must be > 0")
        return self


class LinkSpec(BaseModel):
    """A link kind: ``bandwidth`` ("300 GB/s", "100 Gb/s") and ``latency`` ("5 us")."""

    model_config = ConfigDict(extra="forbid")
    bandwidth: float
    latency: float = 0.0
    _bandwidth = field_validator("bandwidth", mode="before")(lambda v: parse_bandwidth(v))
    _latency = field_validator("latency", mode="before")(lambda v: parse_time(v))

    @model_validator(mode="after")
    def _positive(self) -> LinkSpec:
        if self.bandwidth <= 0 or self.latency < 0:
            raise ValueError("bandwidth must be > 0 and latency >= 0")
        return self


class ServerSpec(BaseModel):
    """``count`` GPUs of one kind joined by one link kind."""

    model_config = ConfigDict(extra="forbid")
    count: int
    gpu: GpuSpec
    link: LinkSpec

    @field_validator("count")
    @classmethod
    def _count(cls, value: int) -> int:
        if value < 1:
            raise ValueError("count must be >= 1")
        return value


class ServersForm(BaseModel):
    """Servers of GPUs and the link between servers."""

    model_config = ConfigDict(extra="forbid")
    name: str = "devices"
    description: str = ""
    servers: list[ServerSpec]
    inter: LinkSpec | None = None

    def build(self) -> DeviceGraph:
        """The device graph."""
        if len(self.servers) > 1 and self.inter is None:
            raise ConfigError(f"{self.name}: inter: needed when there are several servers")
        inter = self.inter or LinkSpec(bandwidth=1.0)
        specs = [(s.count, s.gpu.flops, s.gpu.memory, s.link.bandwidth, s.link.latency)
                 for s in self.servers]
        return server_graph(self.name, specs, inter.bandwidth, inter.latency)


class DeviceSpec(GpuSpec):
    """One GPU of the matrix form."""

    name: str
    server: int = 0


class MatrixForm(BaseModel):
    """Explicit GPUs with a full bandwidth matrix (and optional latency matrix)."""

    model_config = ConfigDict(extra="forbid")
    name: str = "devices"
    description: str = ""
    devices: list[DeviceSpec]
    bandwidth: list[list[Any]]
    latency: list[list[Any]] | None = None

    def build(self) -> DeviceGraph:
        """The device graph (diagonal entries are ignored)."""
        n = len(self.devices)
        bandwidth = _matrix(self.bandwidth, n, "bandwidth", parse_bandwidth)
        latency = (np.zeros((n, n)) if self.latency is None
                   else _matrix(self.latency, n, "latency", parse_time))
        devices = tuple(Device(d.name, d.flops, d.memory, d.server) for d in self.devices)
        return DeviceGraph(self.name, devices, bandwidth, latency)


class TopologyForm(BaseModel):
    """The first ``count`` NPUs of a Themis-issue topology (preset name or file)."""

    model_config = ConfigDict(extra="forbid")
    name: str = ""
    description: str = ""
    topology: str
    count: int | None = None
    gpu: GpuSpec

    def build(self) -> DeviceGraph:
        """The device graph."""
        graph = graph_from_topology(load_topology(self.topology), self.count, self.gpu.flops,
                                    self.gpu.memory)
        if not self.name:
            return graph
        return DeviceGraph(self.name, graph.devices, graph.bandwidth, graph.latency)


def _matrix(rows: list[list[Any]], n: int, field: str, parse: Any) -> np.ndarray:
    if len(rows) != n or any(len(row) != n for row in rows):
        raise ConfigError(f"{field}: expected {n} rows of {n} entries (one per GPU)")
    values = [[0.0 if i == j else parse(v) for j, v in enumerate(row)]
              for i, row in enumerate(rows)]
    return np.array(values, dtype=float)


_FORMS = {"servers": ServersForm, "devices": MatrixForm, "topology": TopologyForm}


def devices_from_data(data: Any, source: str = "devices") -> DeviceGraph:
    """Validate one device-graph document (any of the three forms) and build it."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping with one of the keys "
                          + ", ".join(_FORMS))
    forms = [key for key in _FORMS if key in data]
    if len(forms) != 1:
        raise ConfigError(f"{source}: give exactly one of the keys {', '.join(_FORMS)} "
                          f"(got {forms or sorted(data)})")
    return validate(_FORMS[forms[0]], data, source).build()
