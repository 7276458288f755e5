"""ASTRA-sim 2.x network YAML (analytical backend) <-> dlsched ``Topology``.

An ASTRA-sim network file lists one entry per dimension, dimension 1 first::

    topology: [Ring, FullyConnected, Switch]
    npus_count: [4, 8, 8]
    bandwidth: [250.0, 175.0, 50.0]   # GB/s, GB = 2**30 bytes
    latency: [20.0, 700.0, 850.0]     # ns per hop

Mapping (decisions written down in docs/interop.md):

* ``bandwidth`` is read as the aggregate bandwidth of one NPU on that dimension (dlsched's and
  the Themis paper's convention), converted with GB = 2**30 bytes: ``x GB/s -> x * 2**30 B/s``.
* ``latency`` is ASTRA-sim's per-hop link latency; dlsched charges latency per algorithm step.
  A step is one hop on a Ring (neighbour) or FullyConnected link and two hops through a Switch
  (NPU -> switch -> NPU, as ASTRA-sim's analytical backend counts it), so the step latency is
  ``hops x latency x 1e-9`` seconds.
* Each dimension runs the default algorithm of its kind (ring, direct, halving-doubling); a
  system file (``astra_system``) may override it per dimension.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from dlsched.errors import ConfigError
from dlsched.hardware.topology import Dimension, DimKind, Topology
from dlsched.interop.source import file_error, read_text, yaml_mapping_lines
from dlsched.validation import BANDWIDTH, LATENCY, MAX_DIMS, NPUS, NPUS_PER_DIM

GIB = 2**30
NS = 1e-9
KEYS = ("topology", "npus_count", "bandwidth", "latency")
HOPS_PER_STEP = {DimKind.RING: 1, DimKind.FULLY_CONNECTED: 1, DimKind.SWITCH: 2}


def _number(value: Any, path: Path, line: int, field: str, minimum: float,
            strict: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise file_error(path, line, field, f"expected a number (got {value!r})")
    value = float(value)
    if not math.isfinite(value) or value < minimum or (strict and value == minimum):
        bound = ">" if strict else ">="
        raise file_error(path, line, field, f"must be a finite number {bound} {minimum:g} "
                         f"(got {value!r})")
    return value


def _kind(value: Any, path: Path, line: int, field: str) -> DimKind:
    try:
        return DimKind(value)
    except ValueError:
        accepted = ", ".join(k.value for k in DimKind)
        raise file_error(path, line, field, f"unknown topology {value!r}; accepted: "
                         f"{accepted}") from None


def _size(value: Any, path: Path, line: int, field: str) -> int:
    try:
        return NPUS_PER_DIM.check(value)
    except ConfigError as error:
        raise file_error(path, line, field, str(error)) from None


def parse_astra_network(text: str, path: str | Path = "<network>",
                        name: str | None = None) -> Topology:
    """The Topology described by the text of an ASTRA-sim network YAML; ConfigError naming the
    file, line and field on bad input. ``name`` defaults to the file's stem."""
    path = Path(path)
    lines = yaml_mapping_lines(text, path)
    data = yaml.safe_load(text)
    for key in data:
        if key not in KEYS:
            raise file_error(path, lines[str(key)][0], str(key),
                             f"unknown key; accepted: {', '.join(KEYS)}")
    lists: dict[str, list[Any]] = {}
    for key in KEYS:
        if key not in data:
            raise file_error(path, None, key, "missing (needs a list with one value per "
                             "dimension)")
        value = data[key]
        lists[key] = value if isinstance(value, list) else [value]
        if not lists[key]:
            raise file_error(path, lines[key][0], key, "needs at least one dimension")
    counts = {key: len(values) for key, values in lists.items()}
    if counts["topology"] > MAX_DIMS:
        raise file_error(path, lines["topology"][0], "topology", f"{counts['topology']} "
                         f"dimensions; accepted: at most {MAX_DIMS}")
    if len(set(counts.values())) != 1:
        raise file_error(path, lines["npus_count"][0], "npus_count", "topology, npus_count, "
                         f"bandwidth and latency need one entry per dimension (got {counts})")
    dims = []
    for index in range(counts["topology"]):
        def where(key: str, i: int = index) -> tuple[int, str]:
            key_lines = lines[key]
            return key_lines[min(i + 1, len(key_lines) - 1)], f"{key}[{i}]"
        kind = _kind(lists["topology"][index], path, *where("topology"))
        size = _size(lists["npus_count"][index], path, *where("npus_count"))
        bandwidth = _number(lists["bandwidth"][index], path, *where("bandwidth"), 0.0, True)
        latency = _number(lists["latency"][index], path, *where("latency"), 0.0, False)
        try:
            dims.append(Dimension(kind, size, BANDWIDTH.check(bandwidth * GIB),
                                  LATENCY.check(HOPS_PER_STEP[kind] * latency * NS)))
        except ValueError as error:
            raise file_error(path, where("npus_count")[0], f"dimension {index + 1}",
                             str(error)) from None
    topology = Topology(name or path.stem, tuple(dims))
    try:
        NPUS.check(topology.num_npus)
    except ConfigError as error:
        raise file_error(path, lines["npus_count"][0], "npus_count", str(error)) from None
    return topology


def read_astra_network(path: str | Path) -> Topology:
    """Read an ASTRA-sim network YAML file into a Topology (see the module docstring)."""
    return parse_astra_network(read_text(path, "astra-network"), path)


def format_astra_network(topology: Topology) -> str:
    """The ASTRA-sim network YAML text for ``topology`` (inverse of ``parse_astra_network``;
    per-dimension algorithms belong to the system file and are not written here)."""
    def row(values: list[str]) -> str:
        return "[" + ", ".join(values) + "]"
    dims = topology.dims
    return "\n".join([
        f"# {topology.name}: written by dlsched",
        "topology: " + row([d.kind.value for d in dims]),
        "npus_count: " + row([str(d.size) for d in dims]),
        "bandwidth: " + row([repr(d.bandwidth / GIB) for d in dims]) + "  # GB/s, GB = 2^30 B",
        "latency: " + row([repr(d.latency / NS / HOPS_PER_STEP[d.kind]) for d in dims])
        + "  # ns per hop",
        "",
    ])


def write_astra_network(topology: Topology, path: str | Path) -> None:
    """Write ``topology`` as an ASTRA-sim network YAML file."""
    Path(path).write_text(format_astra_network(topology), encoding="utf-8")
