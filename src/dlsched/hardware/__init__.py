"""What the cluster is: multi-dimensional network topologies and their presets."""

from dlsched.hardware.device_config import (
    device_preset_description,
    device_preset_names,
    load_devices,
)
from dlsched.hardware.device_graph import (
    Device,
    DeviceGraph,
    cluster_graph,
    graph_from_topology,
    server_graph,
)
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
    "Device",
    "DeviceGraph",
    "DimAlgorithm",
    "DimKind",
    "Dimension",
    "Topology",
    "cluster_graph",
    "device_preset_description",
    "device_preset_names",
    "graph_from_topology",
    "load_devices",
    "load_topology",
    "preset_description",
    "preset_names",
    "server_graph",
    "topology_from_data",
]
