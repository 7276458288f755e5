"""Megatron-Core's EP All-to-All overlap (``--overlap-moe-expert-parallel-comm
--delay-wgrad-compute``, ``moe_a2a_overlap``): one microbatch's forward and another's backward
run as one merged step, the dispatch and combine All-to-Alls of each on a communication stream
beside the other's compute.

What overlaps what, from Megatron-Core (NVIDIA/Megatron-LM d98e8a6,
``megatron/core/models/common/model_chunk_schedule_plan.py``,
``TransformerLayerSchedulePlan.run`` and ``TransformerModelChunkSchedulePlan.run``;
``megatron/core/pipeline_parallel/utils.py``, ``ScheduleNode``): a layer is split into nodes,

* forward: ``pre_dispatch`` (attention, pre-MLP norm, shared experts, router, permutation;
  compute stream), ``dispatch`` (All-to-All; communication stream), ``mlp`` (the experts;
  compute), ``combine`` (All-to-All, then the unpermutation and residual add; communication
  stream);
* backward: ``combine``, ``mlp`` (data gradients), the experts' weight gradients
  (``backward_dw``, delayed by ``--delay-wgrad-compute``), ``dispatch``, ``pre_dispatch`` (data
  gradients), its weight gradients (``backward_dw``);

and a forward layer ``i`` of a chunk runs merged with backward layer ``n_b - 1 - i`` of the
other chunk in the issue order ``combine_b, pre_dispatch_f, mlp_b, dispatch_f, mlp_b_dw,
dispatch_b, mlp_f, combine_f, pre_dispatch_b, pre_dispatch_b_dw`` (the last layer's
``pre_dispatch_b_dw`` after the chunk's layers); the layers a chunk has beyond the other's
run alone the same way. Each stream runs its nodes in issue order; a node waits for the previous
node of its own microbatch (one CUDA event per chunk plan, waited at a node's start and
recorded at its end), but the delayed weight gradients record nothing, so a backward's
``dispatch`` waits only for its ``mlp`` data gradients and runs beside their weight
gradients, and the next layer's ``combine_b`` beside ``pre_dispatch_b_dw``. The chunk's
embedding (forward) and loss (backward) run first on the compute stream, its head (forward) and
embedding (backward) last (``TransformerModelChunkSchedulePlan.run``'s phases 0 and 6).

``merged_seconds`` walks those two streams (an exact longest path of that graph);
``pair_table`` gives, per pipeline rank, the merged step of every forward stage with every
backward stage it holds, and each stage's forward or backward alone (the warm-up forwards and
the cool-down backwards: ``job.evaluation.unit_walk.merged_layout``), as the stages' seconds
less what the walk hides. A lone forward hides nothing (its nodes wait for each other); a lone
backward still runs its dispatch beside the delayed weight gradients. The communication's SM
use slows the compute beside it (``merged_seconds``' ``comm_share``, the first-order rule of
``job.communication.tp_overlap``: the compute that ran beside the hidden communication takes
``S / (S - c)`` as long on ``S - c`` of the GPU's ``S`` SMs) by the SMs the dispatcher's
kernels hold (``COMM_SMS``): HybridEP's 32 as Megatron-Bridge's performance scripts set them,
DeepEP's 20, NCCL's all-to-all (Megatron-Core's ``alltoall`` dispatcher) one SM per P2P
channel, 32 inside a node and 16 across nodes (``comm_sms``). Megatron-Core's conditions
(``TransformerConfig.__post_init__``): expert parallelism, no full recomputation nor the ``moe``
module recomputed, virtual pipeline stages when PP > 1 (``check_a2a_overlap``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dlsched.errors import ConfigError
from dlsched.job.compute.module_recompute import modules_of

COMM_SMS: dict[str, int] = {"hybridep": 32, "deepep": 20, "alltoall": 32}
"""SMs each dispatcher's communication kernels hold while they run: HybridEP 32
(NVIDIA-NeMo/Megatron-Bridge ``scripts/performance/utils/overrides.py`` at df0289c and 21d102f5e,
``src/megatron/bridge/perf_recipes/_common.py`` at 4ab94dfad: ``moe_hybridep_num_sms = 32`` for
every HybridEP workload, the tables' runs); DeepEP 20 (Megatron-Core
``TransformerConfig.moe_deepep_num_sms``: "historical default 20"); NCCL's all-to-all (the
``alltoall`` dispatcher: ``torch.distributed.all_to_all_single``, grouped ``ncclSend`` /
``ncclRecv``) 32: NCCL runs send/receive work as one CTA per P2P channel and stripes each peer's
transfer over ``p2pnChannelsPerPeer`` of the ``p2pnChannels`` channels, using them all when every
peer has work (NVIDIA/nccl 5067397 ``src/enqueue.cc`` ``scheduleP2pTasksToPlan``,
``src/graph/paths.cc`` ``ncclTopoComputeP2pChannels``: ``p2pnChannels`` the collective channel
count rounded up to a power of two, at most 64); on 8-GPU H100 nodes NCCL's init logs read "24
coll channels, 16 nvls channels, 32 p2p channels, 32 p2p channels per peer" (AWS p5.48xlarge,
aws-samples' NCCL tests; the same line in public DGX H100 logs), and "NCCL CTAs won't share an
SM with compute kernels" (S. Jeaugey, NVIDIA/nccl issue #689). The B200 and GB200 nodes' count
is assumed the same 32 (no log of theirs read). An EP group across nodes gets fewer:
``comm_sms``."""

NCCL_ACROSS_NODES_SMS = 16
"""NCCL's P2P channels (one SM each) in a communicator spanning more than one node: the same
AWS NCCL tests on two p5.48xlarge nodes log "16 coll channels, 16 nvls channels, 16 p2p channels,
2 p2p channels per peer" (``ncclTopoComputeP2pChannels`` with ``nNodes > 1``)."""


def comm_sms(dispatcher: str, nodes: int) -> int:
    """SMs the EP group's communication kernels hold under ``dispatcher`` (``COMM_SMS``; 0 when
    none stated), the group on ``nodes`` nodes (NCCL's All-to-All: ``NCCL_ACROSS_NODES_SMS``
    when more than one)."""
    if nodes < 1:
        raise ValueError(f"nodes: must be >= 1 (got {nodes})")
    if dispatcher == "alltoall" and nodes > 1:
        return NCCL_ACROSS_NODES_SMS
    return COMM_SMS.get(dispatcher, 0)


@dataclass(frozen=True)
class LayerNodes:
    """One layer's node seconds per microbatch (module docstring): forward ``pre_dispatch``,
    ``dispatch``, ``mlp``, ``combine`` and its ``post`` kernels (the unpermutation and residual
    add); backward ``post_b`` and ``combine_b``, ``mlp_b`` (data gradients), ``mlp_w`` (delayed
    weight gradients), ``dispatch_b``, ``pre_b``, ``pre_w``. A dense layer is all
    ``pre_dispatch`` and ``pre_b``. The combine node's kernels run on the communication stream
    in Megatron-Core, but they are compute beside the other microbatch's: they take their time
    from the compute stream too (two kernels sharing the SMs take about their sum), so only the
    All-to-Alls hide."""

    pre_dispatch: float
    dispatch: float = 0.0
    mlp: float = 0.0
    combine: float = 0.0
    post: float = 0.0
    post_b: float = 0.0
    combine_b: float = 0.0
    mlp_b: float = 0.0
    mlp_w: float = 0.0
    dispatch_b: float = 0.0
    pre_b: float = 0.0
    pre_w: float = 0.0

    @property
    def forward(self) -> float:
        """The layer's forward seconds, its nodes one after another."""
        return self.pre_dispatch + self.dispatch + self.mlp + self.combine + self.post

    @property
    def backward(self) -> float:
        """The layer's backward seconds, its nodes one after another."""
        return (self.post_b + self.combine_b + self.mlp_b + self.mlp_w + self.dispatch_b
                + self.pre_b + self.pre_w)


class _Streams:
    """The compute and communication streams' free times and each chunk plan's event."""

    def __init__(self) -> None:
        self.free = {"comp": 0.0, "comm": 0.0}
        self.event = {"f": 0.0, "b": 0.0}

    def node(self, stream: str, plan: str, seconds: float) -> None:
        """A node: after its stream's previous node and its plan's event; records the event."""
        start = max(self.free[stream], self.event[plan])
        self.free[stream] = self.event[plan] = start + seconds

    def shared(self, plan: str, seconds: float) -> None:
        """Kernels of a communication-stream node (the combine's): after its plan's event,
        recording it, and taking their time from the compute stream too (sharing the SMs)."""
        self.event[plan] += seconds
        self.free["comp"] += seconds

    def weight_gradients(self, seconds: float) -> None:
        """A delayed weight-gradient node: after the compute stream's previous node, no event."""
        self.free["comp"] += seconds


def _layer(streams: _Streams, f: LayerNodes | None, b: LayerNodes | None,
           last_backward: bool) -> None:
    """One ``TransformerLayerSchedulePlan.run`` (module docstring's issue order)."""
    if b is not None:
        streams.shared("b", b.post_b)
        streams.node("comm", "b", b.combine_b)
    if f is not None:
        streams.node("comp", "f", f.pre_dispatch)
    if b is not None:
        streams.node("comp", "b", b.mlp_b)
    if f is not None:
        streams.node("comm", "f", f.dispatch)
    if b is not None:
        streams.weight_gradients(b.mlp_w)
        streams.node("comm", "b", b.dispatch_b)
    if f is not None:
        streams.node("comp", "f", f.mlp)
        streams.node("comm", "f", f.combine)
        streams.shared("f", f.post)
    if b is not None:
        streams.node("comp", "b", b.pre_b)
        if not last_backward:
            streams.weight_gradients(b.pre_w)


def merged_seconds(forward: Sequence[LayerNodes], backward: Sequence[LayerNodes],
                   forward_ends: tuple[float, float] = (0.0, 0.0),
                   backward_ends: tuple[float, float] = (0.0, 0.0),
                   comm_share: float = 0.0) -> float:
    """Seconds of one merged step: the forward of a chunk of ``forward`` layers and the
    backward of a chunk of ``backward`` layers (in forward order; either may be empty),
    ``forward_ends`` its (embedding, head) forward seconds, ``backward_ends`` the backward's
    (loss and head, embedding) seconds, on the two streams (module docstring); the compute
    beside the hidden communication slowed by the ``comm_share`` of the SMs that takes (at
    most the nodes one after another)."""
    streams = _Streams()
    streams.node("comp", "f", forward_ends[0])
    streams.node("comp", "b", backward_ends[0])
    n_f, n_b = len(forward), len(backward)
    both = min(n_f, n_b)
    for i in range(both):  # forward layer i with backward layer n_b - 1 - i
        _layer(streams, forward[i], backward[n_b - 1 - i], i == n_b - 1)
    for i in range(both, n_b):  # the backward's extra layers, then the forward's, alone
        _layer(streams, None, backward[n_b - 1 - i], i == n_b - 1)
    for i in range(both, n_f):
        _layer(streams, forward[i], None, False)
    if n_b:
        streams.weight_gradients(backward[0].pre_w)
    streams.node("comp", "f", forward_ends[1])
    streams.node("comp", "b", backward_ends[1])
    walked = max(streams.free.values())
    serial = (sum(n.forward for n in forward) + sum(n.backward for n in backward)
              + sum(forward_ends) + sum(backward_ends))
    return min(serial, walked + (serial - walked) * comm_share / (1 - comm_share))


def check_a2a_overlap(schedule: str, pp: int, ep: int, recompute: str) -> None:
    """ConfigError naming the setting when Megatron-Core refuses the EP overlap for the layout
    (``TransformerConfig.__post_init__``, module docstring)."""
    if ep == 1:
        raise ConfigError("needs expert parallelism (EP > 1), as Megatron-Core's "
                          "overlap_moe_expert_parallel_comm asserts", "moe_a2a_overlap")
    if schedule not in ("1f1b", "interleaved") or (pp > 1 and schedule != "interleaved"):
        raise ConfigError(f"runs on 1F1B without a pipeline or on interleaved "
                          f"1F1B (Megatron-Core asks virtual pipeline stages when PP > 1); got "
                          f"schedule {schedule} with PP {pp}", "moe_a2a_overlap")
    if recompute == "full" or "moe" in modules_of(recompute):
        raise ConfigError(f"Megatron-Core disables full recomputation and the "
                          f"moe module's with it (got recompute {recompute}); accepted: none, "
                          "selective, modules without moe", "moe_a2a_overlap")


def pair_table(pp: int, chunks: int, forward: Sequence[float], backward: Sequence[float],
               nodes: Sequence[Sequence[LayerNodes]],
               ends: Sequence[tuple[tuple[float, float], tuple[float, float]]],
               comm_share: float = 0.0) -> tuple[tuple[float, ...], ...]:
    """``PipelineTimes.pair_seconds`` of a replica of ``pp x chunks`` virtual stages (stage
    ``s`` on rank ``s % pp``): entry ``[f][b]`` the merged step of stage ``f``'s forward and
    stage ``b``'s backward on one rank, ``[f][S]`` and ``[S][b]`` (``S`` the stage count) the
    forward or the backward alone; each the stages' seconds (``forward``, ``backward``: the
    evaluator's, with everything they hold) less what ``merged_seconds`` hides of their
    ``nodes`` (per stage, its layers' nodes) and ``ends`` (per stage, the forward's and the
    backward's embedding and head seconds), ``comm_share`` the SMs' share the communication
    takes (``merged_seconds``)."""
    stages = pp * chunks
    table = [[0.0] * (stages + 1) for _ in range(stages + 1)]
    serial = [(sum(n.forward for n in nodes[s]) + sum(ends[s][0]),
               sum(n.backward for n in nodes[s]) + sum(ends[s][1])) for s in range(stages)]
    for s in range(stages):
        table[s][stages] = forward[s] - (serial[s][0] - merged_seconds(
            nodes[s], (), ends[s][0], comm_share=comm_share))
        table[stages][s] = backward[s] - (serial[s][1] - merged_seconds(
            (), nodes[s], backward_ends=ends[s][1], comm_share=comm_share))
    for f in range(stages):
        for b in range(f % pp, stages, pp):
            hidden = serial[f][0] + serial[b][1] - merged_seconds(nodes[f], nodes[b], ends[f][0],
                                                                  ends[b][1], comm_share)
            table[f][b] = forward[f] + backward[b] - hidden
    return tuple(tuple(row) for row in table)


def stage_nodes(moe_layer: Sequence[bool], spans: Sequence[range], moe: Sequence[float],
                dense: tuple[float, float]) -> list[list[LayerNodes]]:
    """Each virtual stage's layers as nodes: an MoE layer's (``moe``: ``MoELayerCosts.nodes``,
    ``job.compute.moe_costs``), a dense layer's ``dense`` (forward, backward) seconds all on
    the compute stream; ``moe_layer[i]`` whether layer ``i`` is an MoE layer."""
    sparse, plain = LayerNodes(*moe), LayerNodes(dense[0], pre_b=dense[1])
    return [[sparse if moe_layer[i] else plain for i in span] for span in spans]
