"""Server types the job planner scales to a cluster: GPUs per node (or per NVLink domain), their
compute preset, the intra-node dimension and the scale-out NIC, with the source of each figure.

The presets live in ``presets/nodes.yaml`` (``dgx-a100``, ``dgx-h100``, ``grand-teton-h100``,
``dgx-h200``, ``dgx-h800``, ``dgx-b200``, ``gb200-nvl72``, ``mi300x-8``). Bandwidths are one
GPU's per direction (bytes/s), latencies one transfer step's (seconds). ``job.cluster`` turns a
preset and a GPU count into a ``Topology``: the intra-node dimension of ``kind`` (``Switch``
for NVSwitch and NVLink Switch domains, ``FullyConnected`` for AMD's Infinity Fabric mesh),
then one switch dimension over the nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from dlsched.config import bundled_presets, validate
from dlsched.validation import Bandwidth, Seconds


class _Link(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bandwidth: Bandwidth
    latency: Seconds


class _Intra(_Link):
    kind: Literal["Switch", "FullyConnected"] = "Switch"


class _NodeSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    gpus: int = Field(ge=1, le=1024)
    gpu: str
    intra: _Intra
    nic: _Link
    source: str


@dataclass(frozen=True)
class NodePreset:
    """A server type: ``gpus`` per node, the compute preset ``gpu``, the intra-node link per
    GPU per direction ``nvlink`` (B/s, s) over a dimension of ``kind``, the NIC per GPU
    ``nic`` (B/s, s), and where the numbers come from."""

    name: str
    gpus: int
    gpu: str
    nvlink: tuple[float, float]
    nic: tuple[float, float]
    source: str
    kind: str = "Switch"


@cache
def node_presets() -> dict[str, NodePreset]:
    """The bundled node presets by name (``presets/nodes.yaml``)."""
    presets = {}
    for name, document in bundled_presets("nodes.yaml").items():
        spec = validate(_NodeSpec, document, f"node preset {name}")
        presets[name] = NodePreset(name, spec.gpus, spec.gpu,
                                   (float(spec.intra.bandwidth), float(spec.intra.latency)),
                                   (float(spec.nic.bandwidth), float(spec.nic.latency)),
                                   spec.source, spec.intra.kind)
    return presets
