"""PyTorch's all-gather context parallelism (``--cp-algorithm all-gather``: TorchTitan's
default ``context_parallel_rotate_method = "allgather"``).

``torch.distributed.tensor.experimental.context_parallel`` runs the attention of each GPU's
``s / cp`` queries (TorchTitan's head-tail load balancing gives every GPU the same causal share,
as Megatron-Core's split does) block by block against the ``cp`` K/V shards
(``_templated_ring_attention``), the K/V shards exchanged by a rotater. The all-gather rotater
gathers every GPU's K and V block in one all-gather issued before the first (local) block's
attention and waited for before the second: the forward exposes what the all-gather of the
``cp`` blocks (``cp x 2 b (s / cp) kv d / t`` 16-bit elements) takes beyond one block's
attention. The backward (``_templated_ring_attention_backward``) gathers the K/V blocks again
the same way and passes the dK/dV accumulated for each block around the ring (its dK/dV rotater
is the point-to-point one): ``cp - 1`` transfers of a dK/dV block each beside one block's
attention backward, and the last one back to the block's owner after the last block, exposed.
The all-gathers are priced by the collectives layer on the CP group's links under the job's
collective policy, the ring transfers on its slowest link (``context_parallel.send_seconds``).
Recomputation reruns the forward's all-gather (as the other algorithms' communication).
Memory: the gathered K/V of all ``cp`` blocks is held while a layer's attention runs.
"""

from __future__ import annotations

from dlsched.hardware import Topology
from dlsched.job.communication.collective_costs import curve


def allgather_exposed(block: float, cp: int, group: Topology, policy: str, dkv: float,
                      core_forward: float, core_backward: float) -> tuple[float, float]:
    """Exposed seconds of all-gather CP's forward and backward for K/V blocks of ``block``
    bytes on a CP group of ``cp`` GPUs, ``dkv`` seconds per dK/dV block sent to the next GPU
    of the ring, the attention core taking ``core_forward`` / ``core_backward`` seconds
    (module docstring)."""
    gather = curve(group, "all-gather", policy).seconds(cp * block)
    forward = max(0.0, gather - core_forward / cp)
    backward = (max(0.0, gather - core_backward / cp)
                + (cp - 1) * max(0.0, dkv - core_backward / cp) + dkv)
    return forward, backward


def allgather_bytes(block: float, cp: int) -> tuple[float, float]:
    """Bytes one GPU sends per layer in the forward and the backward: its block to each of
    the ``cp - 1`` others (each all-gather), and ``cp`` dK/dV blocks."""
    return (cp - 1) * block, (cp - 1) * block + cp * block


def allgather_buffer(block: float, cp: int) -> float:
    """Transient bytes: the gathered K/V of the ``cp`` blocks."""
    return cp * block
