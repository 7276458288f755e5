"""One pipeline replica's parts, each priced once (``ReplicaParts``): the per-block seconds
(``job.layer_costs``), ZeRO 3's exposed per-layer traffic, context parallelism's communication,
one MoE layer's costs, each virtual stage's gradient accumulation and the transfers between
pipeline ranks; the stages' seconds they make (``job.evaluation.evaluate`` walks them).
Every group's network is ``Execution.group``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar

from dlsched.hardware import Topology
from dlsched.job.communication.collective_costs import curve
from dlsched.job.communication.context_parallel import CPCost, cp_cost, output_bytes
from dlsched.job.communication.fsdp2_costs import (
    Unit,
    copy_seconds,
    root_parameters,
    stage_end,
    stage_start,
)
from dlsched.job.communication.moe_dispatch import node_split
from dlsched.job.communication.pipeline_p2p import with_p2p
from dlsched.job.compute.attention_window import layer_savings, stage_savings
from dlsched.job.compute.block_pricing import kernel_options
from dlsched.job.compute.block_recompute import block_layers, recomputed_layers
from dlsched.job.compute.embedding_grads import embedding_fill_bytes, tied_sum_bytes
from dlsched.job.compute.grad_accumulation import accumulation_bytes
from dlsched.job.compute.layer_costs import BlockCosts, block_costs, gpu_compute
from dlsched.job.compute.moe_costs import MoELayerCosts, moe_layer_costs
from dlsched.job.compute.mtp_costs import mtp_seconds
from dlsched.job.evaluation.a2a_overlap import (
    check_a2a_overlap,
    comm_sms,
    pair_table,
    stage_nodes,
)
from dlsched.job.evaluation.pipeline_time import PipelineTimes
from dlsched.job.evaluation.unit_walk import held_stages
from dlsched.job.execution import Execution
from dlsched.job.memory.parameters import stage_parameters
from dlsched.job.memory.sharded_units import layer_unit
from dlsched.job.memory.torch_runtime import PARAM_BYTES

if TYPE_CHECKING:
    from dlsched.job.evaluation.evaluate import Job

Record = TypeVar("Record", BlockCosts, CPCost, "MoELayerCosts | None")

def block_costs_of(job: Job, layout: Execution) -> BlockCosts:
    """One block's costs (``job.layer_costs``) under the layout's run settings."""
    tp_group, run = layout.group("tp", job.cluster), layout.run
    return block_costs(job.spec, layout.microbatch_size, job.cluster.gpu, run.precision,
                       layout.tp, layout.sequence_parallel, layout.recompute, tp_group,
                       run.collective_policy, layout.cp, layout.cp_algorithm, run.attention,
                       run.tp_comm_overlap,
                       kernel_options(run.fp8_recipe, run.compile, layout.num_microbatches,
                                      layout.cp * layout.dp if run.fp8_all_gather else 1,
                                      run.ops, run.grad_accumulation == "separate"),
                       run.async_tp, run.cross_entropy, run.transformer_impl)


def cp_group(job: Job, layout: Execution) -> Topology | None:
    """The network of the CP group: ``cp`` ranks ``tp`` apart (``Execution.group``)."""
    return layout.group("cp", job.cluster)


def _cp(job: Job, layout: Execution, costs: BlockCosts) -> CPCost:
    """Context parallelism's communication per layer per microbatch (``job.context_parallel``)."""
    return cp_cost(job.spec, layout, cp_group(job, layout), layout.run.collective_policy,
                   costs.core_f, costs.core_b)


def _zero3_exposed(job: Job, layout: Execution, costs: BlockCosts) -> tuple[float, float]:
    """Exposed seconds per layer per microbatch of ZeRO 3's traffic (forward, backward), with
    PyTorch's FSDP2 without PP its copies on the compute stream
    (``job.communication.fsdp2_costs.copy_seconds``). FSDP2 under a pipeline schedule moves
    nothing per microbatch (its once-per-iteration gathers and reduce-scatters are
    ``fsdp2_pipeline_ends``'); sharding ``zero`` (Megatron-FSDP's) gathers and reduce-scatters
    per layer per microbatch with or without PP. A layer's bytes are ``job.memory.
    sharded_units.layer_unit``'s: its TP share (norms whole), the float8 all-gather's linear
    weights in 1 byte and the rest 16-bit, every gradient in ``grad_bytes``."""
    if layout.zero != 3 or layout.cp * layout.dp == 1:
        return 0.0, 0.0
    if layout.fsdp2(layout.run.sharding, pipelined=True):
        return 0.0, 0.0
    group, run = layout.group("dp_cp", job.cluster), layout.run
    unit = layer_unit(job.spec, layout.tp, run.precision, run.sharding, run.fp8_all_gather,
                      run.grad_bytes)
    gather = curve(group, "all-gather", run.collective_policy).seconds(unit.gathered)
    scatter = curve(group, "reduce-scatter", run.collective_policy).seconds(unit.reduced)
    copy_f = copy_b = 0.0
    if layout.fsdp2(run.sharding, pipelined=False):
        copy_f, copy_b = copy_seconds(unit.gathered, unit.params, run.grad_bytes,
                                      gpu_compute(job.cluster.gpu, run.precision)
                                      .gpu.memory_rate)
    return (copy_f + max(0.0, gather - costs.layer_f),
            copy_b + max(0.0, gather + scatter - costs.layer_b))


def _send_s(job: Job, layout: Execution) -> float:
    """Seconds of one activation (or gradient) transfer between pipeline ranks: each GPU of
    the TP group sends its ``1/tp`` share (Megatron-LM's scatter-gather of SC21 Sec. 4.1) over
    the slowest link the pipeline group spans (under CP, of its ``s / cp`` tokens)."""
    if layout.pp == 1:
        return 0.0
    group = layout.group("pp", job.cluster)
    assert group is not None
    link = min(group.dims, key=lambda dim: dim.bandwidth)
    return link.latency + output_bytes(job.spec, layout) / link.bandwidth


def _receive_gather_s(job: Job, layout: Execution) -> float:
    """Seconds of the all-gather over the TP group that reassembles a transfer sent in ``1/tp``
    pieces (``_send_s``; with sequence parallelism the pieces are the ranks' own shards and
    stay apart): ``job.pipeline_p2p``."""
    if layout.pp == 1 or layout.tp == 1 or layout.sequence_parallel:
        return 0.0
    group = layout.group("tp", job.cluster)
    whole = output_bytes(job.spec, layout) * layout.tp  # the activation the pieces make up
    return curve(group, "all-gather", layout.run.collective_policy).seconds(whole)


def executed_times(job: Job, layout: Execution, times: PipelineTimes) -> PipelineTimes:
    """The stages' ``times`` as the replica runs them, its transfers blocking the ranks or
    beside their compute and their pieces gathered (``job.pipeline_p2p``)."""
    return with_p2p(times, layout.run.pipeline_p2p, _receive_gather_s(job, layout))


def _moe_costs(job: Job, layout: Execution) -> MoELayerCosts | None:
    """One MoE layer's costs (``job.moe_costs``), None for a dense model."""
    if not job.spec.experts:
        return None
    split = (node_split(job.cluster, *layout.group_ranks("ep"))
             if layout.run.moe_dispatcher in ("deepep", "hybridep") else None)
    return moe_layer_costs(job.spec, layout, job.cluster.gpu, layout.run.precision,
                           layout.group("tp", job.cluster), layout.group("ep", job.cluster),
                           layout.run.collective_policy, layout.run.attention,
                           layout.group("expert_tp", job.cluster), layout.run.tp_comm_overlap,
                           layout.run.moe_dispatcher, split,
                           kernel_options(layout.run.fp8_recipe, layout.run.compile,
                                          layout.num_microbatches, 1),
                           layout.run.transformer_impl, layout.run.cuda_graph)


@dataclass(frozen=True)
class ReplicaParts:
    """One replica's parts, each priced once: the stages' seconds (``times``), the block
    costs, ZeRO 3's exposed seconds per layer and microbatch (forward, backward), context
    parallelism's communication per layer, one MoE layer's costs (None for a dense model),
    each virtual stage's gradient accumulation per microbatch and the embedding's backward
    per microbatch with its zeroed weight gradients (``embedding_fill_s``), seconds."""

    times: PipelineTimes
    costs: BlockCosts
    zero3: tuple[float, float]
    cp: CPCost
    moe: MoELayerCosts | None
    accumulation: tuple[float, ...]
    embed_b: float


@dataclass(frozen=True)
class _LayerParts:
    """What one layer costs per microbatch under one recomputation setting: the block costs,
    ZeRO 3's exposed seconds (forward, backward), context parallelism's communication, an MoE
    layer's costs (None for a dense model) and each windowed kind's savings."""

    costs: BlockCosts
    zero3: tuple[float, float]
    cp: CPCost
    moe: MoELayerCosts | None
    saved: dict[str, tuple[float, float]]


def _layer_parts(job: Job, layout: Execution) -> _LayerParts:
    costs = block_costs_of(job, layout)
    run = layout.run
    saved = layer_savings(job.spec, layout.microbatch_size, job.cluster.gpu, run.precision,
                          layout.tp, layout.sequence_parallel, layout.recompute, layout.cp,
                          layout.cp_algorithm, run.attention)  # windowed layers' shorter cores
    return _LayerParts(costs, _zero3_exposed(job, layout, costs), _cp(job, layout, costs),
                       _moe_costs(job, layout), saved)


def _span_seconds(job: Job, parts: _LayerParts, span: range) -> tuple[float, float]:
    """Seconds the layers ``span`` take per microbatch (forward, backward): a dense layer's
    costs with ZeRO 3's and CP's exposed parts, an MoE layer's instead for the MoE layers,
    less the windowed layers' savings."""
    if not span:
        return 0.0, 0.0
    costs, (extra_f, extra_b), cp, moe = parts.costs, parts.zero3, parts.cp, parts.moe
    forward = len(span) * (costs.layer_f + extra_f + cp.forward_s)
    backward = len(span) * (costs.layer_b + extra_b + cp.backward_s)
    if moe:
        count = job.spec.moe_layers_in(span.start, span.stop)
        forward += count * (moe.layer_f - costs.layer_f - extra_f)
        backward += count * (moe.layer_b - costs.layer_b - extra_b)
    (saved_f, saved_b), = stage_savings(job.spec, (span,), parts.saved)
    return forward - saved_f, backward - saved_b


def _mixed(kept: Record, rerun: Record, share: float) -> Record:
    """A per-layer record (``BlockCosts``, ``CPCost``, ``MoELayerCosts``) whose numbers are
    the mean over the layers, ``share`` of them recomputed: what the iteration's breakdown
    multiplies by the layers (the stages' seconds are summed layer by layer instead)."""
    if share == 0 or kept is None:
        return kept
    values = {name: (1 - share) * value + share * getattr(rerun, name)
              for name, value in vars(kept).items()
              if isinstance(value, float) and not isinstance(value, bool)}
    return replace(kept, **values)


def replica_parts(job: Job, layout: Execution) -> ReplicaParts:
    """The replica's parts (``ReplicaParts``; the layers' times include context parallelism's
    exposed communication; an MoE layer of a stage costs ``job.moe_costs``' seconds instead of
    a dense layer's); under ``block:N`` each chunk's first N layers priced as under full
    recomputation and the rest without (``job.compute.block_recompute``; ``check_layout``
    refuses where that is not priced)."""
    partial = block_layers(layout.recompute) is not None
    base = _layer_parts(job, replace(layout, recompute="none") if partial else layout)
    rerun = _layer_parts(job, replace(layout, recompute="full")) if partial else base
    spans = layout.stage_layers(job.spec.layers, job.spec.mtp_layers)
    split = [recomputed_layers(layout.recompute, span) if partial else (range(0), span)
             for span in spans]
    forward, backward = [], []
    for again, kept in split:
        (rf, rb), (kf, kb) = _span_seconds(job, rerun, again), _span_seconds(job, base, kept)
        forward.append(rf + kf)
        backward.append(rb + kb)
    share = sum(len(again) for again, _ in split) / max(1, sum(len(span) for span in spans))
    costs = _mixed(base.costs, rerun.costs, share) if partial else base.costs
    extra_f, extra_b = (((1 - share) * base.zero3[0] + share * rerun.zero3[0],
                         (1 - share) * base.zero3[1] + share * rerun.zero3[1])
                        if partial else base.zero3)
    cp = _mixed(base.cp, rerun.cp, share) if partial else base.cp
    moe = _mixed(base.moe, rerun.moe, share) if partial else base.moe
    ends = base.costs  # the embedding and the head: no layer of a chunk, not recomputed
    embed_b = ends.embed_b + embedding_fill_s(job, layout)
    forward[0] += ends.embed_f
    backward[0] += embed_b
    forward[-1] += ends.head_f
    backward[-1] += ends.head_b
    mtp_f, mtp_b, mtp_moe = mtp_seconds(job.spec, layout, costs, moe, job.cluster.gpu,
                                        layout.run.precision)  # job.compute.mtp, beside the head
    forward[-1] += mtp_f
    backward[-1] += mtp_b
    accumulation = tuple(accumulation_seconds(job, layout))
    for stage, seconds in enumerate(accumulation):
        backward[stage] += seconds
    send = (_send_s(job, layout),) * (layout.virtual_stages - 1)
    # the EP all-to-alls inside each stage: what an overlapped F & B pair hides (unit_walk)
    sparse = [(job.spec.moe_layers_in(again.start, again.stop) if again else 0,
               job.spec.moe_layers_in(kept.start, kept.stop) if kept else 0)
              for again, kept in split] if moe else [(0, 0)] * len(spans)
    sparse[-1] = (sparse[-1][0], sparse[-1][1] + mtp_moe)
    comm = ((tuple(a * rerun.moe.a2a_forward_s + k * base.moe.a2a_forward_s
                   for a, k in sparse),
             tuple(a * rerun.moe.a2a_backward_s + k * base.moe.a2a_backward_s
                   for a, k in sparse)) if base.moe and rerun.moe else ((), ()))
    pairs = ()
    if layout.run.moe_a2a_overlap and moe:  # Megatron-Core's EP overlap (job.a2a_overlap)
        check_a2a_overlap(layout.schedule, layout.pp, layout.ep, layout.recompute)
        last = len(spans) - 1
        pairs = pair_table(layout.pp, layout.chunks, forward, backward, stage_nodes(
            [job.spec.is_moe_layer(i) for i in range(max(span.stop for span in spans))], spans,
            moe.nodes,
            (costs.layer_f + extra_f + cp.forward_s, costs.layer_b + extra_b + cp.backward_s)),
            [((ends.embed_f * (s == 0), ends.head_f * (s == last)),
              (ends.head_b * (s == last), embed_b * (s == 0))) for s in range(len(spans))],
            comm_sms(layout.run.moe_dispatcher,
                     node_split(job.cluster, *layout.group_ranks("ep")).nodes)
            / gpu_compute(job.cluster.gpu, layout.run.precision).gpu.spec.sms)
    times = PipelineTimes(layout.pp, layout.chunks, layout.num_microbatches, layout.schedule,
                          tuple(forward), tuple(backward), send, forward_comm=comm[0],
                          backward_comm=comm[1], pair_seconds=pairs)
    return ReplicaParts(times, costs, (extra_f, extra_b), cp, moe, accumulation, embed_b)


def embedding_fill_s(job: Job, layout: Execution) -> float:
    """Seconds per microbatch the first stage's embedding backward spends creating the
    embeddings' dense weight gradients zeroed (``embedding_grads.embedding_fill_bytes``), at
    the GPU's memory rate."""
    run = layout.run
    rate = gpu_compute(job.cluster.gpu, run.precision).gpu.memory_rate
    return embedding_fill_bytes(job.spec, layout.tp, run.precision) / rate


def accumulation_seconds(job: Job, layout: Execution) -> list[float]:
    """Each virtual stage's gradient accumulation per microbatch (``job.grad_accumulation``:
    zero when fused), with, on a single stage, the tied embedding's two gradients summed
    before it (``embedding_grads.tied_sum_bytes``)."""
    run = layout.run
    per_parameter = accumulation_bytes(run.grad_accumulation, run.precision, run.grad_bytes)
    if not per_parameter:  # fused: no pass of its own (and nothing to count on the hot path)
        return [0.0] * layout.virtual_stages
    rate = gpu_compute(job.cluster.gpu, layout.run.precision).gpu.memory_rate
    seconds = [params * per_parameter / rate
               for params in stage_parameters(job.spec, layout, experts=True)]
    seconds[0] += tied_sum_bytes(job.spec, layout) / rate
    return seconds


def _stage_units(job: Job, layout: Execution, times: PipelineTimes, stage: int) -> list[Unit]:
    """FSDP2's units of virtual stage ``stage`` in forward order (``job.communication.
    fsdp2_costs``): under ``fsdp2`` the stage module's root (the embedding on the first stage,
    the final norm and the output on the last: bf16, TorchTitan keeps ``output`` out of float8)
    then its blocks; under ``fsdp2-split`` the embedding, the blocks, then ``[norm, output]``.
    A block's forward is its stage's spread over its layers (the embedding's and head's
    included, as ``job.dp_sync``'s gather units); a block is a dense layer (ZeRO 3 of MoE
    layers is refused: ``job.compute.moe_costs.check_moe_layout``)."""
    spec, tp = job.spec, layout.tp
    spans = layout.stage_layers(spec.layers, spec.mtp_layers)
    span = spans[stage]
    embedding, head = root_parameters(spec, tp)
    embedding = embedding if stage == 0 else 0.0
    head = head if stage == len(spans) - 1 else 0.0
    run = layout.run
    layer = layer_unit(spec, tp, run.precision, run.sharding, run.fp8_all_gather,
                       run.grad_bytes)
    seconds = times.forward[stage] / len(span) if span else 0.0
    blocks = [Unit(layer.params, layer.gathered, seconds)] * len(span)
    if layout.run.sharding == "fsdp2-split":
        first = [Unit(embedding, PARAM_BYTES * embedding, 0.0)] if embedding else []
        last = [Unit(head, PARAM_BYTES * head, 0.0)] if head else []
        return first + blocks + last
    root = embedding + head
    return ([Unit(root, PARAM_BYTES * root, 0.0)] if root else []) + blocks


def fsdp2_pipeline_ends(job: Job, layout: Execution, times: PipelineTimes
                        ) -> tuple[float, list[float]]:
    """FSDP2 under a pipeline schedule (``job.communication.fsdp2_costs``): the seconds its
    once-per-iteration all-gathers add to the first microbatch's forward through every virtual
    stage, and each pipeline rank's reduce-scatters after its stages' last backwards (0 and
    zeros for any other sharding, without PP or over one replica)."""
    run = layout.run
    if not layout.fsdp2(run.sharding, pipelined=True):
        return 0.0, [0.0] * layout.pp
    group = layout.group("dp_cp", job.cluster)
    gather = curve(group, "all-gather", run.collective_policy)
    reduce = curve(group, "reduce-scatter", run.collective_policy)
    rate = gpu_compute(job.cluster.gpu, run.precision).gpu.memory_rate
    units = [_stage_units(job, layout, times, s) for s in range(layout.virtual_stages)]
    start = sum(stage_start(stage, gather, rate) for stage in units)
    ends = [sum(stage_end(units[s], run.grad_bytes, reduce, rate)
                for s in held_stages(layout.schedule, layout.pp, layout.chunks, rank))
            for rank in range(layout.pp)]
    return start, ends
