"""ASTRA-sim 1.0 text workloads as dlsched training workloads.

Each layer keeps its compute times and update delay; each phase's collective spans the
dimensions ASTRA-sim 1.0 gives it for the workload's parallelism (``interop.comm_dimensions``).
Blocking follows ASTRA-sim's training loop: a forward collective is awaited by the next layer's
forward, an input-gradient collective by the previous layer's backward, a weight-gradient
collective by the layer's update, which precedes its next forward. HYBRID_TRANSFORMER* layers are
model parallel over the first ``model_parallel_NPU_group`` NPUs (a group may split a dimension,
e.g. 128 of 16x64 = 16 x 8-of-64) and data parallel over the rest; their ``checkpoints`` /
``checkpoint_initiates`` become ``Workload.recompute``. In HYBRID_DLRM workloads the
first layer's forward All-to-All is awaited by the first top-MLP layer (after
``DLRM_LAST_BOTTOM_LAYER``), overlapping the bottom MLP, and its input-gradient All-to-All is
issued by that top layer's backward and awaited by the first layer's backward. One difference
to ASTRA-sim: the update runs on the NPU's compute stream here, where ASTRA-sim only delays.
"""

from __future__ import annotations

from dlsched.errors import ConfigError
from dlsched.hardware.topology import Topology
from dlsched.interop import AstraComm, AstraParallelism, AstraWorkload, comm_dimensions
from dlsched.training.workload import Comm, Workload, WorkloadLayer

_DLRM = (AstraParallelism.HYBRID_DLRM, AstraParallelism.HYBRID_DLRM_ENHANCED)
_TRANSFORMER = (AstraParallelism.HYBRID_TRANSFORMER,
                AstraParallelism.HYBRID_TRANSFORMER_FWD_IN_BCKWD)


def _comm(astra: AstraWorkload, index: int, phase: str, comm: AstraComm,
          topology: Topology, **links: str) -> Comm | None:
    op = comm.op.collective
    if op is None or comm.num_bytes <= 0:
        return None
    if astra.layer_parallelism(index) in _TRANSFORMER:
        # Model parallel over the first model_parallel_NPU_group NPUs (whole leading
        # dimensions, then part of the next: training.groups), data parallel over the rest.
        if astra.model_parallel_npus is None:
            raise ConfigError(f"model_parallel_NPU_group: needed by "
                              f"{astra.layer_parallelism(index).value}")
        return Comm(op, comm.num_bytes, "dp" if phase == "weight_grad" else "mp", **links)
    sizes = tuple(d.size for d in topology.dims)
    mask = comm_dimensions(astra.layer_parallelism(index), phase, sizes,
                           astra.model_parallel_npus)
    dims = tuple(d for d, used in enumerate(mask) if used)
    return Comm(op, comm.num_bytes, dims=dims, **links) if dims else None


def workload_from_astra(astra: AstraWorkload, topology: Topology,
                        name: str = "astra-workload") -> Workload:
    """The training workload of an ASTRA-sim 1.0 workload on ``topology`` (seconds, bytes)."""
    names = [layer.name for layer in astra.layers]
    top = astra.dlrm_last_bottom_layer
    dlrm = astra.parallelism in _DLRM and top is not None and top + 1 < len(names)
    layers = []
    for index, layer in enumerate(astra.layers):
        forward_links, backward_links = {}, {}
        if dlrm and index == 0:
            forward_links = {"consumer": names[top + 1]}
            backward_links = {"issuer": names[top + 1], "consumer": names[0]}
        layers.append(WorkloadLayer(
            layer.name, layer.forward_compute_s, layer.input_grad_compute_s,
            layer.weight_grad_compute_s, layer.update_s,
            forward_comm=_comm(astra, index, "forward", layer.forward_comm, topology,
                               **forward_links),
            input_grad_comm=_comm(astra, index, "input_grad", layer.input_grad_comm, topology,
                                  **backward_links),
            weight_grad_comm=_comm(astra, index, "weight_grad", layer.weight_grad_comm,
                                   topology)))
    model_parallel = astra.model_parallel_npus or 1
    if model_parallel > topology.num_npus:
        raise ConfigError(f"model_parallel_NPU_group: {model_parallel} exceeds the "
                          f"{topology.num_npus} NPUs of {topology.name}")
    recompute = astra.recompute_ranges()
    notes = f", recomputing {sum(i - c for c, i in recompute)} forwards" if recompute else ""
    return Workload(name, tuple(layers), model_parallel,
                    f"ASTRA-sim 1.0 {astra.parallelism.value} workload, {len(layers)} "
                    f"layers{notes}", recompute)
