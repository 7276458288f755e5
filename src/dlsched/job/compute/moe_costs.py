"""Seconds of one mixture-of-experts layer per microbatch on one GPU of a layout with expert
parallelism (Megatron-Core's MoE layer with its All-to-All token dispatcher).

An MoE layer is the dense layer's attention half (the zoo's Megatron-style ops of
``job.layer_costs``, priced the same way) followed by, in order:

1. the **router**: an ``h x experts`` GEMM on the GPU's ``T`` tokens (``T = b s / (cp tp)``:
   Megatron-Core requires sequence parallelism with MoE and TP > 1, so each TP rank routes its
   share of its CP rank's ``s / cp`` tokens; the FFN is token-wise, so context parallelism
   changes nothing else in it) and
   the score function and top-k over the ``T x experts`` scores (FP32, three passes: softmax reads
   and writes, top-k reads);
2. the **permutation** of the ``T k`` routed copies of the tokens into expert order (a gather:
   read and write ``T k h`` elements);
3. the **dispatch All-to-All** over the EP group (``ep`` ranks ``e`` apart, ``e`` the expert
   TP degree: ``Execution.group("ep")``) of ``T k L h`` 16-bit elements per GPU, ``L``
   the load factor below;
4. with expert TP ``e > 1``, the **all-gather over the expert-TP group** (``e`` neighbouring
   ranks) of the received tokens: each of them holds a ``1/e`` slice of every local expert and
   computes it on the whole group's tokens. ``e`` is the layout's ``expert_tp``: the TP degree
   by default (Megatron-Core's ``--expert-tensor-parallel-size`` default), or another degree
   under MoE parallel folding (Liu et al. 2025), the expert groups laid out expert-TP, EP,
   expert-DP over the ``tp x cp x dp`` ranks of a pipeline stage (Megatron-Core's expert rank
   generator, order ``tp-ep-dp-pp``);
5. the **expert GEMMs**: one grouped GEMM (``--moe-grouped-gemm``) of ``experts / ep`` local
   experts (launched by Transformer Engine as one cuBLASLt GEMM per expert, whose host time
   ``job.compute.expert_launches`` prices), each an ``M x N x K`` product with
   ``M = R / (experts / ep)`` tokens per expert,
   ``R = T e k L`` tokens at the rank; fc1 ``N = (2 if gated else 1) f_e / e, K = h``, the
   activation (SwiGLU or GELU on ``R f_e / e`` elements), fc2 ``N = h, K = f_e / e``;
6. with ``e > 1`` the **reduce-scatter** of the expert outputs back over expert TP, the
   **combine All-to-All** (the dispatch's bytes back: dispatch = combine), and the
   **unpermutation**, which reads the ``k`` expert outputs of each token and writes their
   router-weighted sum;
7. ``shared_experts`` (if any): a dense FFN of ``shared_experts x f_e`` on every token, with the
   TP exchange a dense FFN has.

The attention half is the dense layer's at the CP rank's ``s / cp`` tokens (its context-parallel
communication is priced by ``job.context_parallel`` for every layer); with ``tp_overlap`` its two
sequence-parallel collectives overlap their GEMMs as ``job.tp_overlap`` prices them. Under FP8
current scaling with SP its two linears reduce one amax each over TP, blocking (QKV's gathered
input forward, the projection's gathered output gradient backward: half of a dense layer's
``job.compute.fp8.amax_reductions``, whose other half is the FFN's; the experts at expert TP 1
have none, and an expert-TP grouped linear's amax reduction is not priced).

The backward runs the same ops' backward (each GEMM's input and weight gradients, priced by
``models.compute`` at their shapes) and the two All-to-Alls again (the combine's gradient is a
dispatch-sized exchange and vice versa); full recomputation runs the forward (All-to-Alls
included) again before it, selective the attention core, Megatron-Core's per-module
recomputation its modules (``job.compute.module_recompute``). The MoE collectives block the GPU
(Megatron-Core's dispatcher waits for them) unless the EP overlap merges two microbatches' steps
(``moe_a2a_overlap``: ``job.evaluation.a2a_overlap`` walks the layer's nodes, ``nodes``, on two
streams). All are priced by ``job.collective_costs.curve`` under the job's
collective policy, so a multi-dimensional EP group's All-to-All is scheduled across its
dimensions by ``baseline``, ``themis`` or ``dlsched``.

**Load factor** ``L``: tokens on the busiest expert over the mean, ``min(router_imbalance,
capacity_factor)`` (a capacity factor drops what exceeds it). The spec's ``router_imbalance``
defaults to 1.0, i.e. the assumption that the auxiliary load-balancing loss keeps every expert
at its mean share (Fedus et al. 2021's Switch Transformer loss, as Mixtral and Megatron-Core
train); the busiest rank sets the pace of the All-to-Alls and the expert GEMMs, so both take
``L``. Every rank is priced as the busiest (a lower bound on nothing: with ``L = 1`` exact for
a balanced router).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from dlsched.collectives.nccl_alltoall import nvlink_rate
from dlsched.errors import ConfigError
from dlsched.hardware import Topology
from dlsched.job.communication.collective_costs import curve
from dlsched.job.communication.context_parallel import local_tokens
from dlsched.job.communication.moe_dispatch import (
    HYBRIDEP_RATES,
    NodeSplit,
    deepep_dispatch_seconds,
    expected_nodes,
    hybridep_rates,
    hybridep_seconds,
)
from dlsched.job.communication.nccl_costs import NcclGroup
from dlsched.job.communication.tp_overlap import overlapped_tp
from dlsched.job.compute.block_pricing import KernelOptions
from dlsched.job.compute.expert_launches import expert_launch_ops, routed_seconds
from dlsched.job.compute.fp8 import AMAX_BYTES, amax_reductions
from dlsched.job.compute.layer_costs import (
    ACTIVATION_BYTES,
    ATTENTION_CORE,
    attention_exchange,
    gpu_compute,
    rank_decoder,
)
from dlsched.job.compute.module_recompute import (
    modules_of,
    recomputed,
    recomputed_routed,
    rerun_seconds,
)
from dlsched.job.compute.moe_fp8 import layer_seconds
from dlsched.job.compute.moe_host import (
    captured_blocks,
    captured_labels,
    check_cuda_graph,
    host_ops,
    with_fused_maps,
)
from dlsched.job.compute.qkv_layout import CORE_COPY_LABELS
from dlsched.job.compute.te_unfused_mask import mask_seconds
from dlsched.job.compute.transformer_impl import with_transformer_impl
from dlsched.job.execution import Execution
from dlsched.job.model_spec import Model
from dlsched.models.compute import CalibratedCompute
from dlsched.models.layer import Layer
from dlsched.models.ops import BACKWARD_FACTOR, Op, elementwise, matmul
from dlsched.models.zoo import ffn_activation

ROUTER_PASSES = 3.0  # softmax reads and writes the scores, top-k reads them
PROB_BYTES = 4  # bytes of one routing probability in the dispatcher's probs All-to-All (FP32)


@dataclass(frozen=True)
class MoELayerCosts:
    """Seconds per microbatch of one MoE layer on one GPU (forward; backward with its
    recomputation), the blocking communication inside them (``a2a_*``: the EP All-to-Alls,
    ``tp_*``: the TP exchanges), and the bytes per GPU of one dispatch and one combine."""

    layer_f: float
    layer_b: float
    a2a_forward_s: float
    a2a_backward_s: float
    tp_forward_s: float
    tp_backward_s: float
    dispatch_bytes: float
    combine_bytes: float
    tokens_per_expert: float
    nodes: tuple[float, ...] = ()
    """The layer's seconds split into Megatron-Core's EP-overlap nodes (``_overlap_nodes``)."""


def load_factor(spec: Model) -> float:
    """The busiest expert's tokens over the mean (module docstring)."""
    if spec.capacity_factor is None:
        return spec.router_imbalance
    return min(spec.router_imbalance, spec.capacity_factor)


def check_moe_layout(spec: Model, layout: Execution) -> None:
    """ConfigError naming the field when ``layout`` cannot run ``spec``'s MoE layers."""
    if not spec.experts:
        if layout.ep > 1:
            raise ConfigError(f"{spec.name} has no experts; accepted: 1", "ep")
        if layout.expert_tp is not None:
            raise ConfigError(f"{spec.name} has no experts; accepted: the TP "
                              f"degree ({layout.tp})", "expert_tp")
        return
    if spec.experts % layout.ep:
        raise ConfigError(f"{layout.ep} does not divide the {spec.experts} experts", "ep")
    check_expert_tp(spec, layout.etp)
    if layout.tp > 1 and not layout.sequence_parallel:
        raise ConfigError("MoE layers with TP > 1 need sequence "
                          "parallelism (Megatron-Core's validate_args); accepted: "
                          "--sequence-parallel", "sequence_parallel")
    if layout.zero == 3:
        raise ConfigError("ZeRO-3 of MoE layers is not priced; accepted: 0, 1, 2", "zero")


def check_expert_tp(spec: Model, etp: int) -> None:
    """ConfigError naming the field ``expert_tp`` unless expert TP ``etp`` divides ``spec``'s
    experts' FFN width (each expert-TP rank holds whole columns of every expert's FFN)."""
    if spec.expert_ffn_hidden % etp:
        accepted = [d for d in range(1, min(spec.expert_ffn_hidden, 64) + 1)
                    if spec.expert_ffn_hidden % d == 0]
        raise ConfigError(f"{etp} does not divide {spec.name}'s experts' FFN "
                          f"width {spec.expert_ffn_hidden}; accepted: a divisor of it "
                          f"({', '.join(map(str, accepted))}"
                          f"{', ...' if spec.expert_ffn_hidden > 64 else ''})", "expert_tp")


def routed_ops(spec: Model, microbatch_size: int, tp: int, ep: int, cp: int = 1,
               expert_tp: int | None = None
               ) -> tuple[tuple[Op, ...], tuple[Op, ...], tuple[Op, ...]]:
    """The MoE FFN's ops on one GPU, per microbatch, already divided over TP and expert TP:
    those before the dispatch (router, top-k, permutation), those between the All-to-Alls (the
    experts' grouped GEMMs and activation) and those after (unpermutation, shared experts);
    ``ep`` the EP degree, ``cp`` the CP degree, ``expert_tp`` the experts' TP degree (None:
    ``tp``)."""
    h, k, fe = spec.hidden, spec.top_k, spec.expert_ffn_hidden
    e = tp if expert_tp is None else expert_tp
    tokens = microbatch_size * spec.seq // cp
    local = tokens // tp
    routed = local * e * k * load_factor(spec)
    experts = spec.experts // ep
    per_expert = routed / experts
    m = math.ceil(per_expert)
    up = (spec.ffn_matrices - 1) * fe // e
    before = (matmul("router", h, spec.experts, local, bias=False),
              elementwise("router-topk", local * spec.experts, ROUTER_PASSES, fp32=True),
              elementwise("permute", local * k * h))
    experts_ops = (
        Op("gemm", 2 * routed * h * up, routed * (h + up), experts * h * up,
           label="expert-fc1", shape=(m, up, h, experts), backward_kernels=2.0),
        ffn_activation(round(routed * fe / e), spec.gated_ffn, True),
        Op("gemm", 2 * routed * (fe // e) * h, routed * (fe // e + h),
           experts * (fe // e) * h, label="expert-fc2", shape=(m, h, fe // e, experts),
           backward_kernels=2.0))
    after: tuple[Op, ...] = (elementwise("unpermute", local * h * (k + 1), 1.0),)
    if spec.shared_experts:
        width = spec.shared_experts * fe // tp
        after += (matmul("shared-fc1", h, (spec.ffn_matrices - 1) * width, tokens, spec.bias),
                  ffn_activation(tokens * width, spec.gated_ffn, True),
                  matmul("shared-fc2", width, h, tokens, spec.bias))
    return before, experts_ops, after


def chunk_sorts(spec: Model, experts_ops: tuple[Op, ...], ep: int
                ) -> tuple[Op, ...]:
    """``experts_ops`` between Megatron-Core's All-to-All dispatcher's two chunk sorts: with
    more than one local expert, the received rows arrive grouped by source rank and are
    sorted into expert order before the experts (``dispatch_postprocess``:
    ``sort_chunks_by_idxs`` by ``sort_input_by_local_experts``) and back into source-rank
    order after them (``combine_preprocess``: by ``restore_output_by_local_experts``), each
    a gather that reads and writes every received row of ``hidden`` 16-bit elements (the
    fused kernel with ``moe_permute_fusion``; NVIDIA/Megatron-LM
    megatron/core/transformer/moe/token_dispatcher.py, MoEAlltoAllTokenDispatcher). The
    rows are those the experts' fc1 computes (its shape's ``M x groups``). Both are appended
    after the experts' own ops (their seconds add up the same; the experts' ops keep their
    places, which ``job.compute.module_recompute`` reads)."""
    if spec.experts // ep < 2:
        return experts_ops
    fc1 = next(op for op in experts_ops if op.label == "expert-fc1")
    rows = fc1.shape[0] * fc1.shape[3] if fc1.shape else 0
    return (*experts_ops, elementwise("sort-chunks", rows * spec.hidden),
            elementwise("restore-chunks", rows * spec.hidden))


BIAS_PASSES = (6, 8)
"""16-bit passes over fc2's ``rows x hidden`` output of ``_apply_bias`` (forward, backward)."""
CLAMP_PASSES = (8, 10)
"""16-bit passes over the activation's output elements of the clamp (forward, backward)."""
CLAMP_KERNELS = 3  # two clamps and the concatenation; backward two clamp gradients, the join


def expert_eager_ops(experts_ops: tuple[Op, ...], hidden: int, local_experts: int,
                     bias: bool, glu_clamp: float) -> tuple[Op, ...]:
    """``experts_ops`` (``routed_ops``' middle group: fc1, activation, fc2, per GPU and
    microbatch) with the experts' eager PyTorch work around Transformer Engine's grouped GEMMs:
    the activation op grown by a clamped GLU's clamp when ``glu_clamp`` > 0, and fc2's
    per-expert bias loop appended after fc2 when the experts have a ``bias``; ``hidden`` fc2's
    output width (elements), ``local_experts`` the experts on this GPU.

    Megatron-Core's ``TEGroupedMLP`` (megatron/core/transformer/moe/experts.py, identical at the
    Megatron-LM commits Megatron-Bridge pins for the 25.11, 26.02 and 26.04.01 tables: 92c8482,
    8f1c2f8 and 4415119) builds its two ``GroupedLinear``\\ s with ``bias=add_bias_linear``, fc1
    with ``skip_bias_add=False`` (the bias goes into the GEMM's epilogue, priced with the GEMM) and
    fc2 with ``skip_bias_add=True``: fc2 returns its ``G`` local experts' biases, and
    ``_apply_bias`` adds each to its expert's rows scaled by the rows' routing probabilities, in a
    Python loop::

        torch.cat([t + b * p for t, b, p in zip(torch.split(out, tokens_per_expert), biases,
                                                 torch.split(probs, tokens_per_expert))])

    Every op there is an eager kernel over the expert's ``rows x hidden`` output (the probabilities
    are one element a row; ``p`` in the activations' 16 bits when the model sets no
    ``moe_router_dtype``, as Megatron-Bridge's GPT-OSS provider does not): per expert ``b * p``
    writes a full tensor, ``t + b * p`` reads two and writes one, then ``torch.cat`` reads and
    writes all rows once more (``.to`` of the same dtype copies nothing). 16-bit passes over the
    ``rows x hidden`` output (``BIAS_PASSES``): forward 1 + 3 + 2 = 6; backward (autograd) the
    multiplication's two gradients, each a broadcast product written out and reduced
    (``g * p`` then its sum over the rows for the bias, ``g * b`` then its sum over the hidden
    width for the probabilities: 3 passes each) and ``torch.split``'s backward concatenating the
    experts' output gradients into one tensor (2): 8. Kernels: ``2 G + 1`` forward (a product and
    a sum per expert, the concatenation), ``4 G + 2`` backward (two products and two reductions per
    expert, the two splits' concatenations).

    **Clamped GLU** (the model's ``glu_clamp``: GPT-OSS's ``swiglu_limit`` 7.0, OpenAI's
    config.json; Megatron-Bridge's ``GPTOSSProvider``: ``activation_func quick_gelu``,
    ``glu_linear_offset 1.0``, ``activation_func_clamp_value 7.0``, ``bias_activation_fusion
    True``): the fused activation ``weighted_bias_quick_geglu_impl``
    (megatron/core/fusions/fused_bias_geglu.py, same commits) is one ``torch.compile``\\ d kernel
    (``jit_fuser``) priced as the gated activation already is, but with a clamp value it first
    runs, eagerly, ``input.chunk(2, -1)``, ``x_glu.clamp(max=c)``, ``x_linear.clamp(-c, c)`` and
    ``torch.cat`` of the two: 16-bit passes over the activation's output elements (``f`` wide per
    routed row, the fc1 output being ``2 f``; ``CLAMP_PASSES``): forward 2 + 2 (the clamps, each
    half read and written) + 4 (the concatenation, the whole fc1 output read and written) = 8;
    backward the two clamps' gradients (each reads its gradient half and its input half for the
    mask and writes: 3) and ``chunk``'s backward joining the two halves' gradients (4): 10. The
    clamp runs inside the ``moe_act`` checkpoint (``bias_act_func``), so it is folded into the
    activation op, which ``--recompute-modules moe_act`` reruns; 3 more kernels each way.

    The bias loop's passes are given in 4-byte units of the pricing's ``upcast`` elements (half
    the 16-bit count), so its bytes are the 16-bit tensors' whatever the run's GEMM precision (FP8
    runs keep fc2's output in BF16); the clamp's are added to the activation op in that op's own
    elements."""
    if local_experts < 1:
        raise ValueError(f"local_experts: must be >= 1 (got {local_experts})")
    fc1, activation, fc2, *rest = experts_ops
    rows = fc1.shape[0] * fc1.shape[3] if fc1.shape else 0  # (m, up, h, groups)
    if glu_clamp > 0 and fc1.shape:
        out = rows * fc1.shape[1] / 2  # the GLU's output: half of fc1's up width
        forward, backward = (passes * out for passes in CLAMP_PASSES)
        activation = replace(
            activation, elements=activation.elements + forward,
            backward_elements=(BACKWARD_FACTOR * activation.elements
                               if activation.backward_elements is None
                               else activation.backward_elements) + backward,
            kernels=activation.kernels + CLAMP_KERNELS,
            backward_kernels=activation.launches_backward + CLAMP_KERNELS)
    ops = (fc1, activation, fc2, *rest)
    if not bias:
        return ops
    forward, backward = (passes * rows * hidden / 2 for passes in BIAS_PASSES)
    loop = elementwise("expert-fc2-bias", forward, 1.0, kernels=2.0 * local_experts + 1,
                       backward_kernels=4.0 * local_experts + 2, upcast=True)
    return (*ops, replace(loop, backward_elements=backward))


def a2a_bytes(spec: Model, microbatch_size: int, tp: int, cp: int = 1) -> float:
    """Bytes one GPU exchanges in one dispatch (= one combine) All-to-All: its ``T k`` routed
    token copies of ``h`` 16-bit elements, times the load factor (module docstring)."""
    local = microbatch_size * spec.seq // (cp * tp)
    return local * spec.top_k * load_factor(spec) * spec.hidden * ACTIVATION_BYTES


def moe_layer_costs(spec: Model, layout: Execution, gpu: str, precision: str,
                    tp_group: Topology | None, ep_topology: Topology | None,
                    policy: str, attention: str = "flash",
                    expert_tp_topology: Topology | None = None,
                    tp_overlap: bool = False, dispatcher: str = "alltoall",
                    ep_split: NodeSplit | None = None,
                    kernels: KernelOptions | None = None,
                    transformer_impl: str = "local", cuda_graph: str = "none") -> MoELayerCosts:
    """One MoE layer's seconds (``MoELayerCosts``, module docstring), its attention core by
    the ``attention`` kernel (``job.layer_costs``); ``expert_tp_topology`` the expert-TP
    group's network (``tp_group`` when the experts' TP is the layout's), ``tp_overlap`` the
    attention's sequence-parallel collectives overlapped with their GEMMs, ``dispatcher`` the
    token dispatch (``job.communication.moe_dispatch``: ``deepep`` needs ``ep_split``, the
    EP group on its nodes), ``kernels`` how the kernels run (an FP8 recipe: the attention's
    linears and the experts' grouped GEMMs in FP8, ``job.compute.moe_fp8``), the norms by
    ``transformer_impl``'s kernels (``job.compute.transformer_impl``), the router's, loss's and
    dispatcher's small kernels launched as ``job.compute.moe_host`` counts them, on the host
    unless the run's ``cuda_graph`` scope captures them."""
    experts_group = tp_group if layout.expert_tp is None else expert_tp_topology
    return _layer_costs(spec, layout.microbatch_size, layout.tp, layout.sequence_parallel,
                        layout.ep, layout.recompute, gpu, precision, tp_group, ep_topology,
                        policy, attention, layout.cp, layout.cp_algorithm, layout.etp,
                        experts_group, tp_overlap and layout.sequence_parallel,
                        dispatcher if ep_split is not None else "alltoall", ep_split,
                        kernels if kernels is not None and kernels.fp8_recipe else None,
                        transformer_impl, check_cuda_graph(cuda_graph))


@lru_cache(maxsize=4096)
def _layer_costs(spec: Model, b: int, tp: int, sp: bool, ep: int, recompute: str,
                 gpu: str, precision: str, tp_group: Topology | None,
                 ep_topology: Topology | None, policy: str, attention: str, cp: int,
                 cp_algorithm: str, etp: int, etp_group: Topology | None,
                 tp_overlap: bool, dispatcher: str = "alltoall",
                 ep_split: NodeSplit | None = None,
                 kernels: KernelOptions | None = None,
                 transformer_impl: str = "local", cuda_graph: str = "none") -> MoELayerCosts:
    """``moe_layer_costs`` kept per what it depends on (a search asks again per layout)."""
    compute = gpu_compute(gpu, precision, tp, sp)
    alone = gpu_compute(gpu, precision)  # the routed ops are given per GPU already
    model = with_transformer_impl(rank_decoder(spec, cp, cp_algorithm, attention, tp,
                                               transformer_impl), transformer_impl)
    layers = [layer for layer in model.layers if layer.block == "h.0"]
    attention_layers = [layer for layer in layers if ".mlp." not in layer.name]
    residual = Layer("h.0.mlp.residual", 0, ops=tuple(
        op for layer in layers if ".mlp." in layer.name for op in layer.ops if not op.split))
    before, experts, after = routed_ops(spec, b, tp, ep, cp, etp)
    dropless = spec.capacity_factor is None
    before = (*before, *host_ops(spec.router_balance == "forced", spec.aux_loss, dispatcher, ep,
                                 dropless))
    experts = expert_eager_ops(experts, spec.hidden, spec.experts // ep, spec.bias,
                               spec.glu_clamp)
    if dispatcher == "alltoall":  # Megatron-Core's All-to-All dispatcher's chunk sorts
        experts = chunk_sorts(spec, experts, ep)
    experts = expert_launch_ops(experts, spec.experts // ep)
    before, experts = (with_fused_maps(before, dispatcher, dropless),
                       with_fused_maps(experts, dispatcher, dropless))
    routed = [Layer(name, 0, ops=ops) for name, ops in
              (("moe.router", before), ("moe.experts", experts), ("moe.combine", after))]
    graphed = [captured_labels(cuda_graph, frozenset(op.label for op in layer.ops))
               for layer in routed]
    attn_graphed, norm_graphed, residual_graphed = captured_blocks(cuda_graph)
    blocks = [*((layer, norm_graphed if ".ln_2." in layer.name else attn_graphed)
                for layer in attention_layers), (residual, residual_graphed)]

    def seconds(backward: bool) -> float:  # the layer's blocks and routed parts, one half
        return (sum(layer_seconds(layer, b, compute, kernels, backward, captured)
                    for layer, captured in blocks)
                + sum(routed_seconds(layer, alone, kernels, backward, captured)
                      for layer, captured in zip(routed, graphed, strict=True)))
    forward, backward = seconds(False), seconds(True)
    # Transformer Engine's unfused core builds its causal mask each call (te_unfused_mask)
    mask = mask_seconds(spec, cp, attention, transformer_impl, compute.gpu.memory_rate)
    forward += mask
    message = b * local_tokens(spec, cp) * spec.hidden * ACTIVATION_BYTES
    exchange = (curve(tp_group, "all-gather", policy).seconds(message)
                + curve(tp_group, "reduce-scatter", policy).seconds(message)) if sp else \
        curve(tp_group, "all-reduce", policy).seconds(message)
    attention_f = attention_b = attention_exchange(spec, sp, message, tp_group, policy, exchange)
    if tp_overlap:
        attention_f, attention_b = overlapped_tp(model, compute, b, message, tp_group, policy,
                                                 halves=("attn",))
    amax_f, amax_b = amax_reductions(kernels.fp8_recipe if kernels else None, tp, sp)
    if amax_f or amax_b:  # current scaling's amax of the attention's gathered operands
        amax = curve(tp_group, "all-reduce", policy).seconds(AMAX_BYTES)  # job.compute.fp8
        attention_f += amax * amax_f / 2  # QKV's input (a dense layer's FC1 input is the other)
        attention_b += amax * amax_b / 2  # the projection's output gradient (and FC2's)
    sent = a2a_bytes(spec, b, tp, cp)
    gathered = sent * etp  # the expert-TP group's received tokens, gathered on each of its ranks
    expert_tp = (curve(etp_group, "all-gather", policy).seconds(gathered)
                 + curve(etp_group, "reduce-scatter", policy).seconds(gathered)) if etp > 1 \
        else 0.0
    shared = exchange * (spec.shared_experts > 0)
    tp_forward = attention_f + shared + expert_tp
    if dispatcher == "hybridep" and ep_split is not None:  # job.communication.moe_dispatch
        fallback = (nvlink_rate(ep_topology.node) if isinstance(ep_topology, NcclGroup)
                    and ep_topology.node is not None else 0.0)
        if not fallback and str(gpu) not in HYBRIDEP_RATES:  # by the GPU's name
            raise ConfigError(f"hybridep has no measured rate on {gpu} and "
                              "the EP group is not an NVIDIA node's; accepted: alltoall, deepep",
                              "moe_dispatcher")
        rates = hybridep_rates(gpu, ep // ep_split.nodes, fallback)
        a2a = hybridep_seconds(sent / spec.top_k, spec.experts, spec.top_k, ep_split, rates,
                               policy)
    elif dispatcher == "deepep" and ep_split is not None:
        nodes = expected_nodes(spec.experts, spec.top_k, ep_split.nodes, spec.router_groups,
                               spec.router_group_topk)
        a2a = 2 * deepep_dispatch_seconds(sent / spec.top_k, spec.top_k, nodes, ep_split,
                                          policy)
    else:  # the tokens there and back, and the routing probabilities with them (FP32)
        a2a = (2 * curve(ep_topology, "all-to-all", policy).seconds(sent)
               + curve(ep_topology, "all-to-all", policy).seconds(
                   sent / (spec.hidden * ACTIVATION_BYTES) * PROB_BYTES))
    full = recompute == "full"
    tp_backward = attention_b + shared + expert_tp + (tp_forward if full else 0.0)
    a2a_backward = a2a * (2 if full else 1)
    backward += forward if full else 0.0
    if recompute == "selective" or "core_attn" in modules_of(recompute):
        backward += mask + sum(compute.op_time(op, b) for layer in attention_layers
                               for op in layer.ops
                               if op.label in ATTENTION_CORE or op.label in CORE_COPY_LABELS)
    modules = modules_of(recompute)  # Megatron-Core's --recompute-modules
    if modules:
        again = recomputed(((layer.name, op) for layer in (*attention_layers, residual)
                            for op in layer.ops), modules)
        routed_again = recomputed_routed(before, experts, after, modules)
        backward += (rerun_seconds(again, b, compute, kernels)
                     + rerun_seconds(routed_again, 1, alone, kernels))
        a2a_backward += a2a if "moe" in modules else 0.0  # both All-to-Alls run again
        tp_backward += (expert_tp + shared if "moe" in modules
                        else shared if "shared_experts" in modules else 0.0)
    layer_f, layer_b = forward + tp_forward + a2a, backward + tp_backward + a2a_backward
    return MoELayerCosts(layer_f, layer_b,
                         a2a, a2a_backward, tp_forward, tp_backward, sent, sent,
                         spec.top_k * load_factor(spec) * b * local_tokens(spec, cp) * etp
                         / tp / (spec.experts // ep),
                         _overlap_nodes(layer_f, layer_b, routed, (a2a, a2a_backward),
                                        expert_tp, alone, kernels,
                                        [op for layer in attention_layers for op in layer.ops
                                         if op.kind == "gemm"], compute, b, graphed))


def _overlap_nodes(layer_f: float, layer_b: float, routed: list[Layer],
                   a2a: tuple[float, float], expert_tp: float, alone: CalibratedCompute,
                   kernels: KernelOptions | None, attention_gemms: list[Op],
                   compute: CalibratedCompute, b: int,
                   graphed: list[frozenset[str]]) -> tuple[float, ...]:
    """The layer's seconds as Megatron-Core's EP overlap splits it into nodes
    (``job.evaluation.a2a_overlap.LayerNodes``' order): the experts (their grouped GEMMs and
    activation, expert TP's exchanges) the ``mlp`` node, each All-to-All half of ``a2a`` (the
    dispatch and the combine move the same bytes), the unpermutation (and shared experts,
    which Megatron-Core computes before the dispatch: on the ledger's models, none) the
    combine's ``post`` kernels; the delayed weight gradients half of each GEMM's backward
    (data and weight gradients each the forward's FLOP); the rest of the layer (attention,
    norms, router, permutation, TP exchanges, recomputation) the ``pre_dispatch`` node, so the
    nodes add up to the layer's seconds."""
    _, experts, combine = routed
    _, in_experts, in_combine = graphed  # the CUDA graph's captured ops (job.compute.moe_host)
    gemms = Layer("moe.experts.gemms", 0, ops=tuple(op for op in experts.ops if op.kind == "gemm"))
    mlp_f = routed_seconds(experts, alone, kernels, False, in_experts) + expert_tp
    mlp_b = routed_seconds(experts, alone, kernels, True, in_experts) + expert_tp
    mlp_w = min(mlp_b, routed_seconds(gemms, alone, kernels, True, in_experts) / 2)
    post_f = routed_seconds(combine, alone, kernels, False, in_combine)
    post_b = routed_seconds(combine, alone, kernels, True, in_combine)
    pre_b = layer_b - post_b - a2a[1] - mlp_b
    pre_w = min(pre_b, sum(compute.op_time(op, b, backward=True) for op in attention_gemms) / 2)
    return (layer_f - a2a[0] - mlp_f - post_f, a2a[0] / 2, mlp_f, a2a[0] / 2, post_f,
            post_b, a2a[1] / 2, mlp_b - mlp_w, mlp_w, a2a[1] / 2, pre_b - pre_w, pre_w)
