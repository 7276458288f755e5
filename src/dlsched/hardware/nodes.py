"""Server types the job planner scales to a cluster: GPUs per node (or per NVLink domain), their
compute preset, the intra-node dimension and the scale-out NIC, with the source of each figure.

The presets live in ``presets/nodes.yaml`` (``dgx-a100``, ``dgx-h100``, ``grand-teton-h100``,
``dgx-h200``, ``dgx-h800``, ``dgx-b200``, ``gb200-nvl72``, ``dgx-b300``, ``gb300-nvl72``,
``mi300x-8``). Bandwidths are one
GPU's per direction (bytes/s), latencies one transfer step's (seconds). ``job.cluster`` turns a
preset and a GPU count into a ``Topology``: the intra-node dimension of ``kind`` (``Switch``
for NVSwitch and NVLink Switch domains, ``FullyConnected`` for AMD's Infinity Fabric mesh),
then one switch dimension over the nodes.
"""

from __future__ import annotations

from functools import cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from dlsched.config import bundled_presets, validate
from dlsched.validation import Bandwidth, Seconds


class Link(BaseModel):
    """One GPU's link: ``bandwidth`` per direction (bytes/s), ``latency`` of one transfer step
    (seconds)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    bandwidth: Bandwidth
    latency: Seconds


class IntraLink(Link):
    """The intra-node link and the dimension it forms: ``Switch`` (NVSwitch, an NVLink Switch
    domain) or ``FullyConnected`` (AMD's Infinity Fabric mesh)."""

    kind: Literal["Switch", "FullyConnected"] = "Switch"


class Node(BaseModel):
    """A server type (one document of presets/nodes.yaml, or a system file's ``node``):
    ``gpus`` per node (or NVLink domain), the compute preset ``gpu`` its GPUs run by default,
    the intra-node link ``intra`` and the NIC per GPU ``nic``, and where the numbers come from
    (``source``). ``job.cluster.System`` scales one to a job's GPU count."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = "custom"
    gpus: int = Field(ge=1, le=1024)
    gpu: str
    intra: IntraLink
    nic: Link
    source: str

    @property
    def nvlink(self) -> tuple[float, float]:
        """The intra-node link per GPU per direction: (bytes/s, seconds)."""
        return float(self.intra.bandwidth), float(self.intra.latency)

    @property
    def kind(self) -> str:
        """The intra-node dimension's kind (``Switch`` or ``FullyConnected``)."""
        return self.intra.kind


# The old name of a node preset's type (the same class).
NodePreset = Node


@cache
def node_presets() -> dict[str, Node]:
    """The bundled node presets by name (``presets/nodes.yaml``)."""
    return {name: validate(Node, {**document, "name": name}, f"node preset {name}")
            for name, document in bundled_presets("nodes.yaml").items()}
