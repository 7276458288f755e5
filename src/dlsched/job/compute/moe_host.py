"""The host launches of Megatron-Core's MoE layer around its experts: the router's, the load-
balancing loss's and the token dispatcher's small kernels, and which of them a CUDA graph takes
off the host.

``job.compute.moe_costs`` prices the router GEMM, the fused top-k, the permutation, the
dispatcher's two chunk sorts and the unpermutation as one kernel each, and the experts' GEMM
loop per expert (``job.compute.expert_launches``). Megatron-Core launches more, each a
kernel of a few microseconds of GPU work, so each costs the host its launch: on a host-bound
layer (few tokens per expert) the GPU waits for them. Counted from the code the rows ran
(NVIDIA/Megatron-LM megatron/core/transformer/moe/ at 8f1c2f8, the Megatron-Core Megatron-Bridge
pins for the 26.02 tables: router.py ``TopKRouter``, moe_utils.py, token_dispatcher.py
``MoEAlltoAllTokenDispatcher``; Transformer Engine v2.12 transformer_engine/pytorch/router.py,
permutation.py and triton/permutation.py, the fused router and permutation kernels with
``moe_router_fusion`` and ``moe_permute_fusion``, which every Megatron-Bridge perf script sets):

* **forced balancing** (``moe_router_force_load_balancing``, the model's ``router_balance:
  forced``): ``RandomSTE`` replaces the logits by ``logits.clone().normal_()``: 2 kernels
  forward, none backward (the gradient passes through) (``FORCED_LAUNCHES``);
* **the load-balancing loss** (the model's ``aux_loss``: ``moe_router_load_balancing_type
  aux_loss`` with a coefficient > 0, Qwen3's 1e-3): TE's fused scores for the loss, the
  tokens per expert (``routing_map.sum``; its all-reduce over the TP x CP group is skipped at
  TP = CP = 1), TE's fused loss, the tracker's ``aux_loss / coeff`` and its in-place add: 5
  forward; backward ``MoEAuxLossAutoScaler``'s ``ones_like(aux_loss) * scale`` (2), the two
  fused kernels' backward (2) and the sum of the logits' two gradients (1): 5
  (``AUX_LOSS_LAUNCHES``);
* **the All-to-All dispatcher's preprocess** (``preprocess``, dropless with EP > 1):
  ``routing_map.sum(0).long()`` (2), the input splits' sum (1), the all-gather of the tokens
  per expert over the EP group (1), ``.contiguous()`` of the local experts' slice (1) and
  three sums (output splits, their TP sum, tokens per local expert: 3): 8
  (``PREPROCESS_LAUNCHES``); then ``_maybe_dtoh_and_synchronize`` copies the tokens per
  expert and the three split tensors to the host on a side stream: 4 copies
  (``DTOH_COPIES``);
* **the fused permutation** (``_moe_permute_mask_map``): ``make_row_id_map``'s three Triton
  passes before the permute kernel (``PERMUTE_MAP_LAUNCHES``, 3 more than the one priced);
  its backward is one unpermute kernel, as priced;
* **each chunk sort** (``moe_sort_chunks_by_index``, with more than one local expert):
  ``make_chunk_sort_map`` before the sort kernel, 1 more each (``SORT_MAP_LAUNCHES``); the
  backward reuses the map;
* **the flex dispatcher** (``deepep``, ``hybridep``) does its permutation inside its
  dispatch kernels; only the tokens' count ``tokens_per_expert.sum()`` is counted (1,
  ``FLEX_LAUNCHES``; HybridEP's own metadata kernels are not read here and not priced).

The dispatcher's counts are those of dropless routing (the model's ``capacity_factor`` None),
every Megatron-Bridge MoE row's. With a capacity factor the rows dgxc holds (NeMo's token-drop
callback) pad each expert's inputs to capacity, a path (``drop_and_pad``: the counts set by
``torch.full``, no host copy, no sync) not counted here: nothing is added for it.

Each launch costs the GPU preset's ``kernel_overhead`` forward and ``backward_overhead``
backward, the evaluator's per-launch host cost of every kernel outside the experts' GEMM loop
(``hardware.gpu``: the host's CPU time per kernel of eager PyTorch, fitted on the H100's own
training steps): nothing new is fitted.

**CUDA graphs** (``cuda_graph``, Megatron-Bridge's ``cuda_graph_scope`` with
``cuda_graph_impl transformer_engine``): ``moe`` is the scope ``[moe_router, moe_preprocess]``
(``attn+moe`` adds ``attn``: the attention half below),
``full`` a full-iteration graph. A captured part is replayed as one graph: its ops keep their
GPU time and cost the host one launch forward and one backward (``GRAPH_LAUNCHES``) instead of
one per kernel. ``moe`` captures the router (GEMM, top-k, forced balancing, loss) and
``MoELayer.preprocess`` (the dispatcher's preprocess and the permutation; megatron/core/
transformer/moe/moe_layer.py at 8f1c2f8); the host copies stay outside it (with the
``moe_preprocess`` scope the dispatcher moves them to ``before_ep_alltoall``, the All-to-All's
own step). ``full`` captures every routed op, the experts' GEMM loop included.

The rest of the layer (``captured_blocks``): Megatron-Core's
``TransformerLayer._te_cuda_graph_capture`` (megatron/core/transformer/transformer_layer.py at
8f1c2f8; ``_get_submodules_under_cudagraphs``: ``input_layernorm`` and ``self_attention`` with
``attn``, ``pre_mlp_layernorm`` and the router with ``moe_router``) runs, with ``attn`` in the
scope, ``_forward_attention`` (the norm, the attention, its bias-dropout-add), and with
``moe_router`` ``_forward_mlp`` up to the router and preprocess, which starts with
``_forward_pre_mlp_layernorm``: one capture per layer and microbatch, its backward graphed too
(Transformer Engine's ``make_graphed_callables``). So the pre-MLP norm's kernels are replayed
under ``moe`` and ``attn+moe``, the attention's under ``attn+moe``: no host seconds per launch,
the graph's one launch being the one the captured router already counts; under ``full`` every
kernel of the layer is captured, the MoE output's residual add too. Outside the MoE layer
(embedding, loss, the dense layers of a model with some) nothing changes here.
"""

from __future__ import annotations

from dataclasses import replace

from dlsched.errors import ConfigError
from dlsched.models.ops import Op, elementwise

CUDA_GRAPHS = ("none", "moe", "attn+moe", "full")
"""The CUDA graph scopes a run names (module docstring): none, Megatron-Bridge's
``[moe_router, moe_preprocess]``, ``[attn, moe_router, moe_preprocess]``, a full iteration."""

FORCED_LAUNCHES = (2, 0)  # RandomSTE: clone, normal_ (forward, backward)
AUX_LOSS_LAUNCHES = (5, 5)  # the load-balancing loss (module docstring)
PREPROCESS_LAUNCHES = 8  # MoEAlltoAllTokenDispatcher.preprocess, forward
DTOH_COPIES = 4  # _maybe_dtoh_and_synchronize's copies to the host, forward
PERMUTE_MAP_LAUNCHES = 3  # make_row_id_map's Triton passes, forward
SORT_MAP_LAUNCHES = 1  # make_chunk_sort_map per chunk sort, forward
FLEX_LAUNCHES = 1  # the flex dispatcher's tokens_per_expert.sum(), forward
GRAPH_LAUNCHES = 1  # one graph replay per captured part, forward and backward

ROUTER_LABELS = frozenset({"router", "router-topk", "router-host", "dispatch-preprocess",
                           "permute"})
"""The routed ops the ``moe`` scope captures (the router and ``MoELayer.preprocess``)."""


def check_cuda_graph(scope: str) -> str:
    """``scope`` when it is one of ``CUDA_GRAPHS``; ConfigError naming the field otherwise."""
    if scope not in CUDA_GRAPHS:
        raise ConfigError(f"{scope!r} is not accepted; accepted: "
                          + ", ".join(CUDA_GRAPHS), "cuda_graph")
    return scope


def host_ops(forced: bool, aux_loss: bool, dispatcher: str, ep: int,
             dropless: bool = True) -> tuple[Op, ...]:
    """The launches the router and the dispatcher add before the dispatch (module docstring),
    as ops of no GPU work: ``router-host`` (forced balancing, load-balancing loss),
    ``dispatch-preprocess`` and ``dispatch-dtoh`` (the All-to-All dispatcher at EP > 1) or
    the flex dispatcher's count (``dispatcher`` ``deepep`` / ``hybridep``); the dispatcher's
    only for ``dropless`` routing (module docstring)."""
    forward = FORCED_LAUNCHES[0] * forced + AUX_LOSS_LAUNCHES[0] * aux_loss
    backward = FORCED_LAUNCHES[1] * forced + AUX_LOSS_LAUNCHES[1] * aux_loss
    ops = [elementwise("router-host", 0, kernels=forward, backward_kernels=backward)] \
        if forward or backward else []
    if not dropless:
        return tuple(ops)
    if dispatcher == "alltoall" and ep > 1:
        ops += [elementwise("dispatch-preprocess", 0, kernels=PREPROCESS_LAUNCHES,
                            backward_kernels=0),
                elementwise("dispatch-dtoh", 0, kernels=DTOH_COPIES, backward_kernels=0)]
    elif dispatcher != "alltoall":
        ops.append(elementwise("dispatch-preprocess", 0, kernels=FLEX_LAUNCHES,
                               backward_kernels=0))
    return tuple(ops)


def with_fused_maps(ops: tuple[Op, ...], dispatcher: str, dropless: bool = True
                    ) -> tuple[Op, ...]:
    """``ops`` with the All-to-All dispatcher's fused permutation and chunk sorts launching
    their maps' kernels too (forward only: ``PERMUTE_MAP_LAUNCHES``, ``SORT_MAP_LAUNCHES``),
    for ``dropless`` routing."""
    if dispatcher != "alltoall" or not dropless:
        return ops
    more = {"permute": PERMUTE_MAP_LAUNCHES, "sort-chunks": SORT_MAP_LAUNCHES,
            "restore-chunks": SORT_MAP_LAUNCHES}
    return tuple(replace(op, kernels=op.kernels + more[op.label],
                         backward_kernels=op.launches_backward)
                 if op.label in more else op for op in ops)


def captured_blocks(scope: str) -> tuple[bool, bool, bool]:
    """Whether a CUDA graph of ``scope`` runs the layer's attention (``input_layernorm``, the
    self-attention with its bias-dropout-add), its ``pre_mlp_layernorm`` and the MoE output's
    residual add (module docstring): ``moe`` the norm, ``attn+moe`` the attention too, ``full``
    all three."""
    check_cuda_graph(scope)
    return scope in ("attn+moe", "full"), scope != "none", scope == "full"


def captured_labels(scope: str, labels: frozenset[str]) -> frozenset[str]:
    """The labels among ``labels`` (one routed layer's ops) a CUDA graph of ``scope`` runs
    (module docstring)."""
    check_cuda_graph(scope)
    if scope == "full":
        return labels
    if scope in ("moe", "attn+moe"):
        return labels & ROUTER_LABELS
    return frozenset()
