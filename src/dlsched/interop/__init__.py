"""Interoperability with other tools' input formats (one module per format)."""

from dlsched.interop.astra_network import (
    format_astra_network,
    parse_astra_network,
    read_astra_network,
    write_astra_network,
)
from dlsched.interop.astra_system import (
    AstraSystem,
    astra_notes,
    format_astra_system,
    parse_astra_system,
    read_astra_system,
    write_astra_system,
)
from dlsched.interop.astra_workload import (
    AstraComm,
    AstraCommOp,
    AstraLayer,
    AstraParallelism,
    AstraWorkload,
    comm_dimensions,
    format_astra_workload,
    parse_astra_workload,
    read_astra_workload,
    write_astra_workload,
)

__all__ = [
    "AstraComm",
    "AstraCommOp",
    "AstraLayer",
    "AstraParallelism",
    "AstraSystem",
    "AstraWorkload",
    "astra_notes",
    "comm_dimensions",
    "format_astra_network",
    "format_astra_system",
    "format_astra_workload",
    "parse_astra_network",
    "parse_astra_system",
    "parse_astra_workload",
    "read_astra_network",
    "read_astra_system",
    "read_astra_workload",
    "write_astra_network",
    "write_astra_system",
    "write_astra_workload",
]
