"""Memory of the MoE layers per GPU: expert weights and their state, and the stash of the routed
tokens (``job.memory`` adds these to a dense layer's accounting).

Weights: an MoE layer keeps on each GPU its attention (split over TP as a dense layer's), the
router (``h x experts``, replicated over TP as Megatron-Core's router), the shared experts
(split over TP) and ``experts / ep`` routed experts, each split over the expert-TP group (``e``
ranks: TP by default, ``Execution.expert_tp`` under parallel folding). The routed experts'
gradients and optimizer state are ZeRO-sharded over the expert-data-parallel group (``tp x cp
x dp / (e ep)`` ranks), the rest over the dense data-parallel group, as Megatron-Core's
distributed optimizer shards each parameter over its own group.

Activations kept per microbatch by one MoE layer on one GPU, in place of the dense FFN's ``h``
(its input) and ``2 f`` (GELU's input and output; ``3 f`` gated: gate, up and the down
projection's input) elements per token over TP: the router's input
(``h`` per local token: ``T = b s / (cp tp)``) and FP32 scores (``experts`` per local token),
the dispatched tokens (the dispatch All-to-All's receive buffer, gathered over expert TP:
``R h`` with ``R = T e k L`` tokens at the rank, ``job.moe_costs``), fc1's output (``R
(matrices - 1) f_e / e``), the activation's output (``R f_e / e``), and the expert outputs the
combine All-to-All returns (``R h / e``: the unpermutation's router-weighted sum needs them for
the scores' gradient); shared experts keep a dense FFN's stash of their width on the CP rank's
``s / cp`` tokens. 16-bit elements (``activation_bytes``).

**Probabilities in the activation** (``moe_probs_in_activation``; Megatron-Core since
NVIDIA/Megatron-LM 2659630 "Memory efficient token permutation", 2025-04-09, first in
core_v0.13.0: every 25.11 to 26.08 container's Megatron-LM): ``TEGroupedMLP`` multiplies the
routing probabilities into the activation (``weighted_bias_swiglu_impl``,
``activation_func_with_probs``; ``WeightedSwiGLUFunction`` saves its input, fc1's output, and
the FP32 probabilities, one per routed token: ``4 R`` bytes) and the token dispatchers'
``unpermute`` runs without ``probs`` (a plain gather-sum: nothing but its index map saved),
so the combined expert outputs (``R h / e``) are not kept. Before it (core_v0.12 and older)
the unpermutation weighted them as above.
"""

from __future__ import annotations

from dlsched.job.communication.context_parallel import local_tokens
from dlsched.job.compute.moe_costs import load_factor
from dlsched.job.compute.mtp import mtp_layer_is_moe
from dlsched.job.evaluation.unit_walk import held_stages
from dlsched.job.execution import Execution
from dlsched.job.model_spec import Model

SCORE_BYTES = 4  # the router's scores in FP32


def layer_indices(spec: Model, layout: Execution, stage: int, chunk: int) -> range:
    """The layers of chunk ``chunk`` of pipeline rank ``stage`` (virtual stage ``chunk x pp
    + stage``, or the V's and DualPipe's placements: ``unit_walk.held_stages``;
    ``job.pipeline_split``)."""
    held = held_stages(layout.schedule, layout.pp, layout.chunks, stage)
    return layout.stage_layers(spec.layers, spec.mtp_layers)[held[chunk]]


def stage_moe_layers(spec: Model, layout: Execution, stage: int) -> int:
    """MoE layers held by pipeline rank ``stage`` over all its chunks, the MTP modules' among
    them on the rank holding the last virtual stage (``held_mtp_moe``)."""
    held = held_stages(layout.schedule, layout.pp, layout.chunks, stage)
    return sum(spec.moe_layers_in(r.start, r.stop) for r in
               (layer_indices(spec, layout, stage, c) for c in range(len(held)))) + \
        held_mtp_moe(spec, layout, stage)


def held_mtp_moe(spec: Model, layout: Execution, stage: int) -> int:
    """MoE layers of the MTP modules (``job.compute.mtp``) on pipeline rank ``stage``: all of
    them on the rank holding the last virtual stage, none elsewhere."""
    held = held_stages(layout.schedule, layout.pp, layout.chunks, stage)
    if layout.virtual_stages - 1 not in held:
        return 0
    return sum(mtp_layer_is_moe(spec, k) for k in range(spec.mtp_layers))


def moe_dense_delta(spec: Model, tp: int) -> float:
    """Parameters per GPU an MoE layer's non-expert part holds beyond a dense layer's: the
    dense FFN (split over TP) replaced by the router (whole) and the shared experts (split)."""
    shared = spec.shared_experts * spec.ffn_parameters(spec.expert_ffn_hidden)
    return spec.router_parameters() + (shared - spec.ffn_parameters(spec.ffn_hidden)) / tp


def experts_per_gpu(spec: Model, layout: Execution) -> float:
    """One MoE layer's routed-expert parameters on one GPU: ``experts / ep`` of them, over
    expert TP."""
    return spec.expert_parameters() / (layout.ep * layout.etp)


def moe_stash_delta(spec: Model, layout: Execution, p: int) -> float:
    """Bytes one MoE layer keeps per microbatch per GPU beyond a dense layer (module
    docstring)."""
    s, b, h, t = local_tokens(spec, layout.cp), layout.microbatch_size, spec.hidden, layout.tp
    fe, up = spec.expert_ffn_hidden, (spec.ffn_matrices - 1) * spec.expert_ffn_hidden
    e = layout.etp
    local = b * s / t
    routed = local * e * spec.top_k * load_factor(spec)
    moe = (p * local * h + SCORE_BYTES * local * spec.experts + p * routed * h
           + p * routed * (up + fe) / e + combine_stash(layout, p, routed, h)
           + p * b * s * spec.shared_experts * (up + fe) / t)
    dense = p * local * h + spec.ffn_matrices * p * b * s * spec.ffn_hidden / t
    return moe - dense


def combine_stash(layout: Execution, p: int, routed: float, h: int) -> float:
    """Bytes the probability weighting keeps per microbatch for ``routed`` tokens at the rank:
    the combined expert outputs ``p R h / e`` (the unpermutation's weighted sum), or with
    ``moe_probs_in_activation`` the activation's FP32 probabilities ``4 R`` (module
    docstring)."""
    if layout.run.moe_probs_in_activation:
        return SCORE_BYTES * routed
    return p * routed * h / layout.etp
