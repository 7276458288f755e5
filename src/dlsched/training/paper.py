"""The Themis paper's own end-to-end method (Rashidi et al., ISCA 2022, Sections 5.1 and 6.2).

What differs from dlsched's default (``overlap``) model, each from the paper or its public
artifact (github.com/jared-ni/astrasim-archgym-public, ``themis/inputs``):

* **Compute: a FLOP-only A100 roofline.** Every op takes FLOP / 624e12 s, no memory term:
  one FLOP per multiply-accumulate at the A100's 312 TFLOP/s dense FP16 rate. The artifact's
  per-layer times equal that (its ResNet-50 file has 0.38 ms of batch-32 forward compute;
  FLOP / 624e12 gives 0.42 ms, a 2 x FLOP/MAC roofline at 312e12 0.84 ms and dlsched's
  memory-aware roofline 1.77 ms). Optimizer updates cost nothing (no FLOPs are counted).
* **Gradients fused at the end of back-propagation.** Every weight-gradient collective (and a
  ZeRO update All-Gather) of the same op and group is one collective issued after the last
  backward compute and awaited by the next iteration's first forward, fully exposed ("exposed
  communication occurs at the end of back-propagation"). The first layer computes no input
  gradient (nothing consumes it; ASTRA-sim 1.0's data-parallel loop skips it too).
* **DLRM is the HOTI'20 model** (the paper's reference [54], Naumov et al., "Deep Learning
  Training in Facebook Data Centers"), described from the per-layer numbers the artifact
  publishes for it (``large_DLRM_fused``): a 100,663,296-byte embedding All-to-All forward and
  backward, overlapping the bottom MLP, and a fused 1,329,694,368-byte MLP-gradient
  All-Reduce; compute per layer as published there (ns).
* **All-to-All is ``direct`` on every dimension** (the artifact's system files).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from dlsched.collectives.plan import CollectiveOp
from dlsched.errors import ConfigError
from dlsched.hardware.topology import DimAlgorithm, Dimension, Topology
from dlsched.training.workload import Comm, Workload, WorkloadLayer
from dlsched.training.workloads import get_workload

# FLOP/s: 312e12 MAC/s (A100 dense FP16) counted as one FLOP per MAC of a 2-FLOP-per-MAC count.
PAPER_FLOPS_PER_S = 624e12
NS = 1e-9
FUSED_PHASES = ("weight_grad", "update")


@dataclass(frozen=True)
class FlopOnlyCompute:
    """A FLOP-only roofline: an op takes FLOP / ``flops_per_s`` seconds whatever memory it
    moves (the Themis artifact's compute model; default 624e12 FLOP/s, see the module)."""

    flops_per_s: float = PAPER_FLOPS_PER_S

    def op_time(self, flops: float, num_bytes: float) -> float:
        """Seconds of an op of ``flops`` FLOP (``num_bytes`` of memory traffic is ignored)."""
        return flops / self.flops_per_s


def fuse_gradients(workload: Workload) -> Workload:
    """``workload`` with its weight-gradient and update collectives fused: per phase, one
    collective of the summed bytes owned by the first layer (issued after its weight gradient,
    the last backward compute, or after its update) and the first layer's input gradient
    removed. ConfigError if a phase mixes collective ops or groups."""
    fused: dict[str, Comm] = {}
    for phase in FUSED_PHASES:
        comms = [c for layer in workload.layers if (c := getattr(layer, f"{phase}_comm"))]
        if not comms:
            continue
        kinds = {(c.op, c.group, c.dims) for c in comms}
        if len(kinds) > 1:
            raise ConfigError(f"{workload.name}: {phase} collectives differ in op or group "
                              f"({sorted(str(k) for k in kinds)}); they cannot be fused")
        op, group, dims = kinds.pop()
        fused[phase] = Comm(op, sum(c.num_bytes for c in comms), group, dims=dims)
    layers = [replace(layer, weight_grad_comm=None, update_comm=None)
              for layer in workload.layers]
    layers[0] = replace(layers[0], input_grad_s=0.0, weight_grad_comm=fused.get("weight_grad"),
                        update_comm=fused.get("update"))
    return replace(workload, layers=tuple(layers),
                   description=workload.description + "; gradients fused at the end of "
                   "back-propagation")


# HOTI'20 DLRM as published in the Themis artifact (large_DLRM_fused): per layer, forward,
# input-gradient and weight-gradient compute (ns) and the update delay (ns).
_HOTI20_MLP_NS = 286330
_HOTI20_LAYERS = (
    ("embedding", 16777220, 300, 300, 98),
    ("bottom.0", 143170, 143170, 143170, 10),
    *((f"bottom.{i}", _HOTI20_MLP_NS, _HOTI20_MLP_NS, _HOTI20_MLP_NS, 10) for i in range(1, 6)),
    ("bottom.6", 17900, 17900, 17900, 10),
    ("top.0", 6889840, 6889840, 6889840, 10),
    *((f"top.{i}", _HOTI20_MLP_NS, _HOTI20_MLP_NS, _HOTI20_MLP_NS, 10) for i in range(1, 11)),
    ("top.11", 70, 70, 70, 10),
)
HOTI20_ALL_TO_ALL_BYTES = 100_663_296
HOTI20_MLP_GRADIENT_BYTES = 1_329_694_368


def hoti20_dlrm() -> Workload:
    """The HOTI'20 DLRM of the Themis evaluation: embedding All-to-All (model parallel)
    overlapping the bottom MLP, awaited by the first top layer; its backward All-to-All issued
    by that layer's input gradient; one fused MLP-gradient All-Reduce at the end of back-prop."""
    layers = [WorkloadLayer(name, fwd * NS, ig * NS, wg * NS, update * NS)
              for name, fwd, ig, wg, update in _HOTI20_LAYERS]
    layers[0] = replace(
        layers[0], input_grad_s=0.0,
        forward_comm=Comm(CollectiveOp.ALL_TO_ALL, HOTI20_ALL_TO_ALL_BYTES, consumer="top.0"),
        input_grad_comm=Comm(CollectiveOp.ALL_TO_ALL, HOTI20_ALL_TO_ALL_BYTES, issuer="top.0",
                             consumer="embedding"),
        weight_grad_comm=Comm(CollectiveOp.ALL_REDUCE, HOTI20_MLP_GRADIENT_BYTES))
    return Workload("dlrm", tuple(layers), 1,
                    "DLRM of HOTI'20 (Themis artifact numbers), 512 samples per NPU, embedding "
                    "All-to-All over the bottom MLP, fused MLP-gradient All-Reduce")


def paper_workload(name: str, num_npus: int) -> Workload:
    """One of the paper's four workloads by its own method (module docstring)."""
    if name == "dlrm":
        return hoti20_dlrm()
    return fuse_gradients(get_workload(name, num_npus, FlopOnlyCompute()))


def direct_all_to_all(topology: Topology) -> dict[CollectiveOp, Topology]:
    """The per-op networks of the paper's method: All-to-All runs ``direct`` on every
    dimension (other collectives keep ``topology``'s algorithms)."""
    dims = tuple(Dimension(d.kind, d.size, d.bandwidth, d.latency, DimAlgorithm.DIRECT)
                 for d in topology.dims)
    return {CollectiveOp.ALL_TO_ALL: Topology(topology.name, dims)}


PAPER_WORKLOADS: dict[str, Callable[[int], Workload]] = {
    name: (lambda n, name=name: paper_workload(name, n))
    for name in ("resnet152", "gnmt", "dlrm", "transformer-1t")
}
