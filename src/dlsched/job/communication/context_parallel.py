"""Context parallelism (``--cp``): each sequence split over the ``cp`` GPUs of a CP group.

Every GPU of the group holds ``s / cp`` tokens of each sequence: Megatron-Core's load-balanced
split cuts the sequence into ``2 cp`` chunks and gives GPU ``r`` chunks ``r`` and ``2 cp - 1 -
r`` (``get_batch_on_this_cp_rank``; Transformer Engine's ``get_seq_chunk_ids_for_reordering``),
so each GPU's share of the causal attention is the same. Megatron requires ``s`` to be a
multiple of ``2 cp`` (``megatron/training/arguments.py``). Everything token-wise in a layer (the
QKV, projection and FFN GEMMs, norms, dropout, residuals; the embedding and the head) runs on
``s / cp`` tokens; the attention core's queries are the GPU's ``s / cp`` tokens and its keys the
whole sequence, ``(s / cp) x s`` products per head (``core_shape``; the causal mask is not
discounted, as without CP: the job's attention is Megatron's unfused products, which compute
the masked half too). Two algorithms (Megatron-Core's ``--cp-comm-type``):

* ``ring`` (``p2p``: Transformer Engine's ``AttnFuncWithCPAndKVP2P``, ring attention): the
  forward runs ``cp`` steps, each the attention of the local queries against one GPU's K/V
  block, while the block in hand is sent on to the next GPU of the ring and the next received
  (``cp - 1`` transfers of the K and V block, ``2 b (s / cp) kv d / t`` elements, ``kv`` the
  KV heads of grouped-query attention); a step waits for the transfer it overlaps, so each
  exposes ``max(0, transfer - block attention)`` with the block's attention ``1 / cp`` of the
  core. The backward runs ``cp`` steps too: the first sends the K/V block on, the middle
  ones K/V with the dK/dV accumulated so far, the last the dK/dV alone (back to the block's
  owner), each overlapped with one block's attention backward: ``4 (cp - 1)`` K/V-block units
  in all (16-bit, TE's non-FP8 buffers). A transfer is a point-to-point send on the slowest
  link the ring crosses (every GPU sends at once and a step waits for the slowest:
  ``latency + bytes / bandwidth`` of the group's slowest dimension).
* ``all-to-all`` (``a2a``: DeepSpeed-Ulysses, Jacobs et al. 2023; TE's
  ``AttnFuncWithCPAndQKVOA2A``): an All-to-All turns the sequence-sharded Q, K, V
  (``b (s / cp) (h + 2 kv d) / t`` elements per GPU) into head-sharded ones (the whole sequence,
  ``1 / (t cp)`` of the heads), the core runs at ``(s, s)`` on ``heads / cp`` heads per TP rank,
  and a second All-to-All turns its output (``b (s / cp) h / t``) back; the backward
  all-to-alls the output gradient and then the Q/K/V gradients, the same bytes. They block
  the attention (nothing to overlap them with) and are priced by the collectives layer on the
  CP group's links under the job's collective policy (``job.collective_costs.curve``). Needs
  heads and KV heads divisible by ``t x cp``.

Recomputation reruns the forward's CP communication in the backward: ``full`` reruns the
layer, ``selective`` the attention core, inside which both algorithms communicate.

Memory (``buffer_bytes``): the stash keeps what the layer kept without CP at ``s / cp`` tokens
(the ring saves one K/V block, the all-to-all head-sharded Q/K/V: the same bytes), so the
transient buffers are what CP adds: the ring's received K/V blocks (TE keeps the ``cp - 1`` of
the forward until its end; the backward's two send/receive buffers hold K, V, dK, dV: four
blocks), the all-to-all's send copy and receive buffer of Q, K, V (two Q/K/V-sized buffers).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from dlsched.errors import ConfigError
from dlsched.hardware import Topology
from dlsched.hardware.topology import Dimension
from dlsched.job.communication.allgather_cp import (
    DKV_FP32,
    allgather_buffer,
    allgather_bytes,
    allgather_exposed,
    exchanged_block,
)
from dlsched.job.communication.collective_costs import curve
from dlsched.job.compute.module_recompute import reruns_core
from dlsched.job.execution import Execution
from dlsched.job.model_spec import Model

ELEMENT_BYTES = 2  # 16-bit Q/K/V and their gradients (layer_costs.ACTIVATION_BYTES)
# K, V, dK, dV blocks sent per backward step: 2 at the first and last step, 4 between
BACKWARD_UNITS_END, BACKWARD_UNITS_MIDDLE = 2, 4
RING_BACKWARD_BUFFERS = 4  # two send/receive buffers of (K/V, dK/dV) in TE's backward
A2A_BUFFERS = 2  # the All-to-All's reordered send copy and its receive buffer


@dataclass(frozen=True)
class CPCost:
    """Seconds per layer per microbatch on one GPU that the CP communication adds to the
    forward and to the backward (recomputation's rerun included), and the bytes one GPU sends
    per layer in the forward and the backward."""

    forward_s: float
    backward_s: float
    forward_bytes: float
    backward_bytes: float


def check_cp_sequence(seq: int, cp: int) -> None:
    """ConfigError naming the field ``cp`` unless CP ``cp`` splits a sequence of ``seq`` tokens into
    ``2 cp`` equal chunks (Megatron's load-balanced split)."""
    if cp > 1 and seq % (2 * cp):
        half = seq // 2 if seq % 2 == 0 else 1  # an odd sequence: CP 1 only
        accepted = [c for c in range(1, min(half, 64) + 1) if half % c == 0]
        raise ConfigError(f"{cp} needs the sequence ({seq} tokens, --seq) to be a "
                          f"multiple of 2 x CP = {2 * cp} (Megatron's load-balanced split); "
                          f"accepted: a CP with 2 x CP dividing {seq} "
                          f"({', '.join(map(str, accepted))}{', ...' if half > 64 else ''})",
                          "cp")


def check_cp(spec: Model, layout: Execution) -> None:
    """ConfigError naming the field ``cp`` unless ``layout``'s CP can split ``spec``."""
    cp = layout.cp
    if cp == 1:
        return
    check_cp_sequence(spec.seq, cp)
    if layout.cp_algorithm == "all-to-all":
        split = layout.tp * cp
        if spec.heads % split or spec.kv_heads % split:
            raise ConfigError(f"the all-to-all (Ulysses) algorithm shards the "
                              f"{spec.heads} heads and {spec.kv_heads} KV heads over TP x CP = "
                              f"{split}, which must divide both; accepted: --cp-algorithm ring "
                              "or a CP that does", "cp")


def local_tokens(spec: Model, cp: int) -> int:
    """Tokens of each sequence on one GPU of the CP group."""
    return spec.seq // cp


def core_shape(spec: Model, cp: int, algorithm: str) -> tuple[int, int, int] | None:
    """(queries, keys, heads) of one GPU's attention core per sequence before TP (None without
    CP): the ring's local queries against every key, the all-to-all's whole sequence on
    ``heads / cp`` heads."""
    if cp == 1:
        return None
    if algorithm in ("ring", "all-gather"):
        return local_tokens(spec, cp), spec.seq, spec.heads
    return spec.seq, spec.seq, spec.heads // cp


def kv_block_bytes(spec: Model, layout: Execution) -> float:
    """Bytes of one GPU's K and V block: ``b (s / cp) kv (d + d_v) / t`` 16-bit elements
    (``2 b (s / cp) kv d / t`` when values are as wide as keys; MLA's ring passes its
    up-projected keys of ``head_dim`` and values of ``v_head_dim`` per head, not the latent:
    ``job.compute.mla``)."""
    return (layout.microbatch_size * local_tokens(spec, layout.cp) * spec.kv_heads
            * (spec.head_dim + spec.v_head_dim) / layout.tp * ELEMENT_BYTES)


def qkv_bytes(spec: Model, layout: Execution) -> float:
    """Bytes of one GPU's Q, K and V: ``b (s / cp) (h + 2 kv d) / t`` 16-bit elements."""
    return (layout.microbatch_size * local_tokens(spec, layout.cp) * spec.qkv_width
            / layout.tp * ELEMENT_BYTES)


def output_bytes(spec: Model, layout: Execution) -> float:
    """Bytes of one GPU's attention output: ``b (s / cp) h / t`` 16-bit elements (as much as
    each TP rank sends of a ``b (s / cp) h`` activation between pipeline stages)."""
    return (layout.microbatch_size * local_tokens(spec, layout.cp) * spec.hidden / layout.tp
            * ELEMENT_BYTES)


def ring_link(group: Topology) -> Dimension:
    """The slowest link the ring crosses (the lowest-bandwidth dimension of its group)."""
    return min(group.dims, key=lambda dim: (dim.bandwidth, -dim.latency))


def send_seconds(link: Dimension, num_bytes: float) -> float:
    """One point-to-point transfer of ``num_bytes`` on ``link``: latency + bytes / bandwidth."""
    return link.latency + num_bytes / link.bandwidth


def ring_steps(cp: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """K/V-block units sent per overlapped step: forward (``cp - 1`` steps of K and V) and
    backward (``cp`` steps: K/V, then K/V with dK/dV, then dK/dV)."""
    forward = (2,) * (cp - 1)
    backward = (BACKWARD_UNITS_END, *(BACKWARD_UNITS_MIDDLE,) * (cp - 2), BACKWARD_UNITS_END)
    return forward, backward


def ring_exposed(block: float, cp: int, link: Dimension, block_forward: float,
                 block_backward: float) -> tuple[float, float]:
    """Exposed seconds of the ring's forward and backward passes for K/V blocks of ``block``
    bytes (``block / 2`` per unit: K or V) with ``block_forward`` / ``block_backward`` seconds
    of one block's attention to hide each transfer behind."""
    forward, backward = ring_steps(cp)
    unit = block / 2
    return (sum(max(0.0, send_seconds(link, n * unit) - block_forward) for n in forward),
            sum(max(0.0, send_seconds(link, n * unit) - block_backward) for n in backward))


@lru_cache(maxsize=4096)
def cp_cost(spec: Model, layout: Execution, group: Topology | None, policy: str,
            core_forward: float, core_backward: float) -> CPCost:
    """The CP communication of one layer per microbatch (module docstring) on the CP group
    ``group`` with the attention core taking ``core_forward`` / ``core_backward`` seconds on
    one GPU; zero without CP. All-gather CP's merge, work on the GPU's memory rather than its
    links, is the layer's (``job.layer_costs``, ``job.allgather_cp.allgather_merge_seconds``)."""
    if layout.cp == 1 or group is None:
        return CPCost(0.0, 0.0, 0.0, 0.0)
    cp = layout.cp
    if layout.cp_algorithm == "ring":
        block = kv_block_bytes(spec, layout)
        forward, backward = ring_exposed(block, cp, ring_link(group), core_forward / cp,
                                         core_backward / cp)
        steps_f, steps_b = ring_steps(cp)
        sent_f, sent_b = sum(steps_f) * block / 2, sum(steps_b) * block / 2
    elif layout.cp_algorithm == "all-gather":  # PyTorch's (job.allgather_cp)
        block = exchanged_block(kv_block_bytes(spec, layout), spec.heads, spec.kv_heads)
        forward, backward = allgather_exposed(block, cp, group, policy,
                                              send_seconds(ring_link(group), DKV_FP32 * block),
                                              core_forward, core_backward, layout.run.compile)
        sent_f, sent_b = allgather_bytes(block, cp)
    else:
        a2a = curve(group, "all-to-all", policy)
        qkv, out = qkv_bytes(spec, layout), output_bytes(spec, layout)
        forward = backward = a2a.seconds(qkv) + a2a.seconds(out)
        sent_f = sent_b = qkv + out
    again = reruns_core(layout.recompute)  # the rerun sends its bytes, hidden or not
    return CPCost(forward, backward + (forward if again else 0.0), sent_f,
                  sent_b + (sent_f if again else 0.0))


def buffer_bytes(spec: Model, layout: Execution) -> float:
    """Transient bytes of one layer's CP communication buffers (module docstring)."""
    if layout.cp == 1:
        return 0.0
    if layout.cp_algorithm == "ring":
        return kv_block_bytes(spec, layout) * max(layout.cp - 1, RING_BACKWARD_BUFFERS)
    if layout.cp_algorithm == "all-gather":
        return allgather_buffer(exchanged_block(kv_block_bytes(spec, layout), spec.heads,
                                                spec.kv_heads), layout.cp)
    return A2A_BUFFERS * qkv_bytes(spec, layout)
