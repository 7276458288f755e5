"""Tensor parallelism (Megatron-LM) as a pipeline-planning dimension.

A tensor-parallel (TP) degree ``t`` splits every transformer block over a group of ``t`` GPUs
of one server (Shoeybi et al. 2019; with sequence parallelism, Korthikanti et al. 2022, which
Megatron-LM pairs with TP): each GPU holds 1/t of the parameters, computes 1/t of the FLOP and
keeps 1/t of the activations (without sequence parallelism some of them stay whole on every
GPU: ``TensorLayout.replicated``), and per microbatch the group exchanges activations of
``p s b h`` bytes (the same volume with or without sequence parallelism): per transformer layer
two all-gather + reduce-scatter pairs in the forward and two in the backward (each pair moves
what one ring all-reduce moves), half a pair around the embedding (reduce-scatter after it,
all-gather of its gradient) and around the output head (all-gather before it, reduce-scatter
of its input gradient). These exchanges block the GPUs, so they count as compute time of the
block's action.

The planner then sees a smaller problem whose "devices" are the TP groups: ``t`` consecutive
GPUs of a server (Megatron's rank order, TP innermost), with the per-GPU FLOP/s and memory of
its members; two groups talk over the link between their first GPUs (member ``i`` sends its
1/t of the sequence-split boundary tensor to member ``i``, all pairs at once, which moves
1/t of the bytes on each of ``t`` identical links); a replicated stage's gradient all-reduce
runs as ``t`` parallel rings of 1/t of the parameters (one per member). The blocking
exchanges are added to each block's FLOP as seconds x the GPU's FLOP/s (``Chain.
with_tensor_parallel``), which is exact because a degree is offered only when every GPU has
the same FLOP/s and every group the same ring.

A degree ``t > 1`` is valid when the chain has a tensor layout (the zoo's transformers), ``t``
divides the attention heads and every server's GPU count, and the groups are identical.
Not modelled: GEMM efficiency at the smaller per-GPU shapes (the roofline FLOP/s is kept),
layer-norm and position-embedding parameters replicated rather than split (< 0.1% of GPT-3's
parameters), contention between TP traffic and pipeline transfers inside a server.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from dlsched.collectives.nccl import NcclNode, nccl_choice
from dlsched.errors import ConfigError
from dlsched.hardware.device_graph import DeviceGraph
from dlsched.sim.collective_cost import ring_allreduce_time

_SAME = 1e-9


@dataclass(frozen=True)
class TensorLayout:
    """How a chain splits under tensor parallelism: per block the all-reduce equivalents per
    microbatch of its forward and backward (``messages[i] = (forward, backward)``), each of
    ``message_bytes`` bytes (``p s b h``), the attention heads (a TP degree divides them) and
    per block the (stash, selective stash, input) bytes every GPU of a group keeps whole
    (``replicated``, ``pipeline.memory_model``; empty: everything is split, as with sequence
    parallelism)."""

    messages: tuple[tuple[float, float], ...]
    message_bytes: float
    heads: int
    replicated: tuple[tuple[float, float, float], ...] = ()


def transformer_layout(is_layer: list[bool], seq: int, batch: int, hidden: int, heads: int,
                       element_bytes: int,
                       replicated: tuple[tuple[float, float, float], ...] = ()) -> TensorLayout:
    """The Megatron layout of a transformer chain (see the module docstring): (2, 2)
    all-reduce equivalents per layer, (0.5, 0.5) for the first (embedding) and last (head)
    block, none for other blocks; ``replicated`` as in ``TensorLayout``."""
    n = len(is_layer)
    messages = tuple((2.0, 2.0) if layer else (0.5, 0.5) if i in (0, n - 1) else (0.0, 0.0)
                     for i, layer in enumerate(is_layer))
    return TensorLayout(messages, float(element_bytes * seq * batch * hidden), heads,
                        replicated)


def ring_allreduce_s(graph: DeviceGraph, devices: tuple[int, ...], num_bytes: float) -> float:
    """Seconds of a ring all-reduce of ``num_bytes`` over ``devices`` in listed order, alone
    on the network: ``2 (r - 1)`` steps, each the slowest ring link's latency + (bytes / r) /
    bandwidth; 0 for one device."""
    r = len(devices)
    return ring_allreduce_time(r, num_bytes, lambda piece: max(
        graph.transfer_time(devices[i], devices[(i + 1) % r], piece) for i in range(r)))


def tp_allreduce_s(graph: DeviceGraph, devices: tuple[int, ...], num_bytes: float,
                   nccl: NcclNode | None = None) -> float:
    """Seconds of one TP all-reduce of ``num_bytes`` over ``devices``: as NCCL's tuner prices it
    (``collectives.nccl``, the model the job evaluator prices collectives with) when the graph's
    servers are NVIDIA nodes NCCL runs on (``nccl``) and the group sits in one server; a ring
    on the graph's links (``ring_allreduce_s``) otherwise."""
    servers = {graph.devices[d].server for d in devices}
    if nccl is None or len(servers) > 1:
        return ring_allreduce_s(graph, devices, num_bytes)
    return nccl_choice(nccl, "all-reduce", num_bytes, len(devices), 1).seconds


def tensor_groups(graph: DeviceGraph, t: int) -> list[tuple[int, ...]]:
    """The TP groups of degree ``t``: consecutive GPUs of each server, ``t`` at a time.
    ConfigError when a server's GPU count is not a multiple of ``t``."""
    servers = graph.server_gpus()
    bad = sorted(s for s, gpus in servers.items() if len(gpus) % t)
    if bad:
        raise ConfigError(f"tensor_parallel: {t} does not divide the GPU count of server(s) "
                          f"{bad}; a TP group must stay inside one server")
    return [tuple(gpus[k:k + t]) for gpus in servers.values() for k in range(0, len(gpus), t)]


def check_degree(graph: DeviceGraph, layout: TensorLayout | None, t: int) -> list[tuple[int, ...]]:
    """The groups of a valid TP degree ``t`` (see the module docstring); ConfigError saying
    why otherwise."""
    if t < 1:
        raise ConfigError(f"tensor_parallel: {t} must be >= 1")
    if t == 1:
        return [(k,) for k in range(graph.num_devices)]
    if layout is None:
        raise ConfigError(f"tensor_parallel: {t} needs a model with a tensor layout (the zoo's "
                          "transformers); this model accepts 1 only")
    if layout.heads % t:
        raise ConfigError(f"tensor_parallel: {t} does not divide the {layout.heads} attention "
                          "heads")
    groups = tensor_groups(graph, t)
    first = graph.devices[0]
    if any((d.flops, d.memory, d.overhead) != (first.flops, first.memory, first.overhead)
           for d in graph.devices):
        raise ConfigError(f"tensor_parallel: {t} needs identical GPUs (FLOP/s, memory, "
                          "overhead); this graph accepts 1 only")
    rings = [ring_allreduce_s(graph, group, layout.message_bytes) for group in groups]
    if max(rings) > min(rings) * (1 + _SAME):
        raise ConfigError(f"tensor_parallel: {t} needs identical links inside every TP group; "
                          "this graph accepts 1 only")
    return groups


def valid_degrees(graph: DeviceGraph, layout: TensorLayout | None) -> tuple[int, ...]:
    """Every valid TP degree, ascending (1 always)."""
    degrees = []
    for t in range(1, graph.num_devices + 1):
        try:
            check_degree(graph, layout, t)
        except ConfigError:
            continue
        degrees.append(t)
    return tuple(degrees)


def group_graph(graph: DeviceGraph, groups: list[tuple[int, ...]]) -> DeviceGraph:
    """The graph whose devices are ``groups`` (see the module docstring): a group has its
    first member's FLOP/s, memory, server and overhead, and talks to another group over the
    link between their first members."""
    if all(len(group) == 1 for group in groups):
        return graph
    devices = tuple(replace(graph.devices[g[0]],
                            name=f"{graph.devices[g[0]].name}..{graph.devices[g[-1]].name}")
                    for g in groups)
    index = np.array([group[0] for group in groups])
    t = len(groups[0])
    return DeviceGraph(f"{graph.name}/tp{t}", devices, graph.bandwidth[np.ix_(index, index)],
                       graph.latency[np.ix_(index, index)])
