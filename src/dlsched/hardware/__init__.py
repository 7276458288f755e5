"""What the cluster is: multi-dimensional network topologies and their presets."""

from dlsched.hardware.topology import (
    DEFAULT_ALGORITHM,
    DimAlgorithm,
    Dimension,
    DimKind,
    Topology,
)
from dlsched.hardware.topology_config import (
    load_topology,
    preset_description,
    preset_names,
    topology_from_data,
)

__all__ = [
    "DEFAULT_ALGORITHM",
    "DimAlgorithm",
    "DimKind",
    "Dimension",
    "Topology",
    "load_topology",
    "preset_description",
    "preset_names",
    "topology_from_data",
]
