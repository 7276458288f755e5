"""Validated device-graph files: three forms, each a pydantic schema.

* servers: ``servers: [{count, gpu: {flops, memory, overhead}, link: {bandwidth, latency}}]``
  (``overhead``: optional seconds per compute action, see ``Device``) and
  ``inter: {bandwidth, latency}`` between servers;
* matrix: ``devices: [{name, flops, memory, server}]``, ``bandwidth: [[...]]`` and optional
  ``latency: [[...]]`` (strings with units or plain B/s and s);
* topology: ``topology: <preset or file>``, ``count``, ``gpu: {flops, memory}``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from dlsched.config import PresetFile, validate
from dlsched.errors import ConfigError
from dlsched.hardware.device_graph import (
    Device,
    DeviceGraph,
    graph_from_topology,
    server_graph,
)
from dlsched.hardware.topology_config import load_topology
from dlsched.validation import (
    BANDWIDTH,
    LATENCY,
    MAX_DEVICES,
    Bandwidth,
    ByteSize,
    DeviceCount,
    FlopRate,
    Limit,
    Seconds,
)


class DeviceKind(BaseModel):
    """A GPU kind of the pipeline domain's device graph: sustained ``flops`` ("125 TFLOP/s"),
    one rate for all of a stage's work (the INFOCOM planner's model), not the job planner's
    per-kernel GPU model (``hardware.gpu.GpuSpec``, presets/gpus.yaml); ``memory`` ("80 GiB"), the
    runtime's ``overhead`` per compute action ("1.2 ms"; default 0), its
    ``transfer_overhead`` per activation or gradient sent to or received from another GPU
    ("0.3 ms"; default 0) and optionally ``peak``, the datasheet's dense FLOP/s of the
    training precision ("312 TFLOP/s"; for MFU)."""

    model_config = ConfigDict(extra="forbid")
    flops: FlopRate
    memory: ByteSize
    overhead: Seconds = 0.0
    transfer_overhead: Seconds = 0.0
    peak: FlopRate | None = None

    @model_validator(mode="after")
    def _positive(self) -> DeviceKind:
        if self.memory <= 0:
            raise ValueError("memory must be > 0")
        return self


class LinkSpec(BaseModel):
    """A link kind: ``bandwidth`` ("300 GB/s", "100 Gb/s") and ``latency`` ("5 us")."""

    model_config = ConfigDict(extra="forbid")
    bandwidth: Bandwidth
    latency: Seconds = 0.0


class ServerSpec(BaseModel):
    """``count`` GPUs of one kind joined by one link kind."""

    model_config = ConfigDict(extra="forbid")
    count: DeviceCount
    gpu: DeviceKind
    link: LinkSpec


class ServersForm(BaseModel):
    """Servers of GPUs and the link between servers."""

    model_config = ConfigDict(extra="forbid")
    name: str = "devices"
    description: str = ""
    servers: list[ServerSpec] = Field(max_length=MAX_DEVICES)
    inter: LinkSpec | None = None

    def build(self) -> DeviceGraph:
        """The device graph."""
        if len(self.servers) > 1 and self.inter is None:
            raise ConfigError(f"{self.name}: inter: needed when there are several servers")
        inter = self.inter or LinkSpec(bandwidth=1.0)
        specs = [(s.count, s.gpu.flops, s.gpu.memory, s.link.bandwidth, s.link.latency)
                 for s in self.servers]
        graph = server_graph(self.name, specs, inter.bandwidth, inter.latency,
                             [s.gpu.peak for s in self.servers])
        return graph.with_overheads(
            [s.gpu.overhead for s in self.servers for _ in range(s.count)],
            [s.gpu.transfer_overhead for s in self.servers for _ in range(s.count)])


class DeviceSpec(DeviceKind):
    """One GPU of the matrix form."""

    name: str
    server: int = 0


class MatrixForm(BaseModel):
    """Explicit GPUs with a full bandwidth matrix (and optional latency matrix)."""

    model_config = ConfigDict(extra="forbid")
    name: str = "devices"
    description: str = ""
    devices: list[DeviceSpec] = Field(max_length=MAX_DEVICES)
    bandwidth: list[list[Any]]
    latency: list[list[Any]] | None = None

    def build(self) -> DeviceGraph:
        """The device graph (diagonal entries are ignored)."""
        n = len(self.devices)
        bandwidth = _matrix(self.bandwidth, n, "bandwidth", BANDWIDTH)
        latency = (np.zeros((n, n)) if self.latency is None
                   else _matrix(self.latency, n, "latency", LATENCY))
        devices = tuple(Device(d.name, d.flops, d.memory, d.server, d.overhead, d.peak,
                               d.transfer_overhead) for d in self.devices)
        return DeviceGraph(self.name, devices, bandwidth, latency)


class TopologyForm(BaseModel):
    """The first ``count`` NPUs of a Themis-issue topology (preset name or file)."""

    model_config = ConfigDict(extra="forbid")
    name: str = ""
    description: str = ""
    topology: str
    count: int | None = None
    gpu: DeviceKind

    def build(self) -> DeviceGraph:
        """The device graph."""
        graph = graph_from_topology(load_topology(self.topology), self.count, self.gpu.flops,
                                    self.gpu.memory, self.gpu.peak)
        graph = graph.with_overheads([self.gpu.overhead] * graph.num_devices,
                                     [self.gpu.transfer_overhead] * graph.num_devices)
        if not self.name:
            return graph
        return DeviceGraph(self.name, graph.devices, graph.bandwidth, graph.latency)


def _matrix(rows: list[list[Any]], n: int, field: str, limit: Limit) -> np.ndarray:
    if len(rows) != n or any(len(row) != n for row in rows):
        raise ConfigError(f"{field}: expected {n} rows of {n} entries (one per GPU)")
    values = [[0.0 if i == j else limit.parse(v, f"{field}[{i}][{j}]")
               for j, v in enumerate(row)] for i, row in enumerate(rows)]
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


PRESETS = PresetFile("devices.yaml", "devices", devices_from_data)
"""The bundled device-graph presets."""
device_preset_names = PRESETS.names
device_preset_description = PRESETS.description
load_devices = PRESETS.load
