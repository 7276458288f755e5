"""The router's, load-balancing loss's and dispatcher's host launches of Megatron-Core's MoE
layer and the CUDA graph scopes that replay them as one launch (``job.compute.moe_host``),
checked by hand on one layer's timeline."""

from __future__ import annotations

import pytest

from dlsched.errors import ConfigError
from dlsched.job.compute.expert_launches import routed_seconds
from dlsched.job.compute.layer_costs import decoder_model, gpu_compute
from dlsched.job.compute.moe_costs import chunk_sorts, moe_layer_costs, routed_ops
from dlsched.job.compute.moe_fp8 import layer_seconds
from dlsched.job.compute.moe_host import (
    captured_blocks,
    captured_labels,
    check_cuda_graph,
    host_ops,
    with_fused_maps,
)
from dlsched.job.execution import Execution
from dlsched.job.model_spec import Model
from dlsched.ledger import load_ledger
from dlsched.models.layer import Layer
from dlsched.models.ops import elementwise

# Qwen3-30B-A3B's MoE shape (hidden 2048, 128 experts of width 768, top 8, forced balancing,
# the load-balancing loss) at a short sequence
QWEN = Model(name="qwen-moe", layers=2, hidden=2048, heads=32, seq=256, vocab=1000,
             experts=128, top_k=8, expert_ffn_hidden=768, gated_ffn=True, bias=False,
             rms_norm=True, learned_positions=False, router_balance="forced",
             aux_loss=True)


def _launches(ops: tuple, backward: bool) -> float:
    return sum(op.launches_backward if backward else op.kernels for op in ops)


def test_counts_per_dispatcher() -> None:
    """Forward: forced balancing 2 + loss 5 + the All-to-All preprocess 8 + 4 host copies =
    19; backward the loss's 5. The flex dispatcher: 2 + 5 + its count 1; EP 1 no exchange."""
    alltoall = host_ops(True, True, "alltoall", 8)
    assert [op.label for op in alltoall] == ["router-host", "dispatch-preprocess",
                                             "dispatch-dtoh"]
    assert (_launches(alltoall, False), _launches(alltoall, True)) == (19, 5)
    assert (_launches(host_ops(True, True, "hybridep", 8), False)) == 8
    assert _launches(host_ops(False, False, "alltoall", 1), False) == 0
    assert _launches(host_ops(True, False, "alltoall", 1), True) == 0  # RandomSTE passes through
    assert all(op.elements == 0 and op.flops == 0 for op in alltoall)  # host work only
    # a capacity factor's padded path: the router's only
    assert _launches(host_ops(True, True, "alltoall", 8, dropless=False), False) == 7


def test_fused_maps_forward_only() -> None:
    before, experts, _ = routed_ops(QWEN, 1, 1, 8)
    sorted_ops = chunk_sorts(QWEN, experts, 8)
    permute = next(op for op in with_fused_maps(before, "alltoall") if op.label == "permute")
    assert (permute.kernels, permute.launches_backward) == (4, 1)  # row-id map's 3 passes
    sorts = [op for op in with_fused_maps(sorted_ops, "alltoall") if "chunks" in op.label]
    assert [(op.kernels, op.launches_backward) for op in sorts] == [(2, 1), (2, 1)]
    assert with_fused_maps(before, "hybridep") == before
    assert with_fused_maps(before, "alltoall", dropless=False) == before


def test_host_only_layer_by_hand() -> None:
    """No GPU work: from an idle host the GPU waits for every launch. B200's preset: 77.44 us
    a forward launch, 23.81 us a backward one. Eager: 19 x 77.44 forward, 5 x 23.81 backward;
    the ``moe`` graph replays the loss and the preprocess as one launch and leaves the 4 host
    copies: (1 + 4) x 77.44 forward, 1 x 23.81 backward."""
    compute = gpu_compute("b200", "bf16")
    spec = compute.gpu.spec
    layer = Layer("moe.router", 0, ops=host_ops(True, True, "alltoall", 8))
    labels = frozenset(op.label for op in layer.ops)
    assert routed_seconds(layer, compute, None, False) == pytest.approx(19 * 77.44e-6)
    assert spec.kernel_overhead == pytest.approx(77.44e-6)
    assert routed_seconds(layer, compute, None, True) == pytest.approx(5 * 23.81e-6)
    graph = captured_labels("moe", labels)
    assert graph == {"router-host", "dispatch-preprocess"}
    assert routed_seconds(layer, compute, None, False, graph) == pytest.approx(5 * 77.44e-6)
    assert routed_seconds(layer, compute, None, True, graph) == pytest.approx(23.81e-6)
    assert captured_labels("full", labels) == labels
    assert captured_labels("none", labels) == frozenset()


def test_bad_scope_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"^cuda_graph: 'attn'.*none, moe, attn\+moe, full"
                       ) as refused:
        check_cuda_graph("attn")
    assert refused.value.field == "cuda_graph"


def test_layer_costs_by_scope() -> None:
    """One B200 layer at micro-batch 1, EP 8, All-to-All dispatcher: the eager layer is the
    slowest, a full-iteration graph the fastest; ``moe`` takes the pre-MLP norm's host time
    off with the router's, ``attn+moe`` the attention's too: each scope's difference is those
    sub-layers eager against graphed, each way."""
    layout = Execution(1, 1, 8, 1, 64, ep=8)
    costs = {scope: moe_layer_costs(QWEN, layout, "b200", "bf16", None, None, "baseline",
                                    cuda_graph=scope)
             for scope in ("none", "moe", "attn+moe", "full")}
    seconds = {scope: cost.layer_f for scope, cost in costs.items()}
    assert seconds["none"] > seconds["moe"] > seconds["attn+moe"] > seconds["full"]
    compute = gpu_compute("b200", "bf16")
    half = [layer for layer in decoder_model(QWEN, 1).layers
            if layer.block == "h.0" and ".mlp." not in layer.name]
    assert [layer.name for layer in half] == ["h.0.ln_1.weight", "h.0.attn.c_attn.weight",
                                              "h.0.attn.c_proj.weight", "h.0.ln_2.weight"]

    def host(layers: list, backward: bool) -> float:
        return sum(layer_seconds(layer, 1, compute, None, backward)
                   - layer_seconds(layer, 1, compute, None, backward, graphed=True)
                   for layer in layers)

    for backward, attribute in ((False, "layer_f"), (True, "layer_b")):
        attention, norm = host(half[:3], backward), host(half[3:], backward)
        assert attention > 0 and norm > 0
        assert getattr(costs["moe"], attribute) - getattr(costs["attn+moe"], attribute) == \
            pytest.approx(attention)
        # 256 tokens x 2048: each of the norm's kernels is shorter than a launch (77.44 us
        # forward, 23.81 us backward on the b200 preset), so from an idle host it ends one
        # kernel's GPU time after its last launch: eager n x launch + g / n, graphed g
        op = half[3].ops[0]
        n = op.launches_backward if backward else op.kernels
        g = compute.work(op, 1, backward).gpu_s
        assert g / n < 23.81e-6
        assert norm == pytest.approx(n * (23.81e-6 if backward else 77.44e-6) - g * (n - 1) / n)
        # the moe scope saves the norm's and the router's launches (test_host_only_layer_...)
        assert getattr(costs["none"], attribute) - getattr(costs["moe"], attribute) > norm
    plain = QWEN.model_copy(update={"aux_loss": False, "router_balance": None})
    assert moe_layer_costs(plain, layout, "b200", "bf16", None, None, "baseline").layer_f < \
        seconds["none"]


def test_captured_blocks_per_scope() -> None:
    """Megatron-Core's scopes: ``moe_router`` captures the pre-MLP norm with the router, ``attn``
    the attention (norm, attention, its bias-dropout-add); a full-iteration graph the residual
    add too."""
    assert [captured_blocks(scope) for scope in ("none", "moe", "attn+moe", "full")] == \
        [(False, False, False), (False, True, False), (True, True, False), (True, True, True)]
    with pytest.raises(ConfigError, match=r"^cuda_graph: "):
        captured_blocks("attn")


def test_graphed_layer_by_hand() -> None:
    """A graphed sub-layer costs its kernels' GPU seconds, no host time per launch: 6 launches
    of no GPU work cost 6 x 77.44 us eager (forward) and nothing graphed; with GPU work the
    graphed layer is the sum of its ops' GPU seconds."""
    compute = gpu_compute("b200", "bf16")
    empty = Layer("h.0.ln_1.weight", 0, ops=(elementwise("h.0.ln_1", 0, kernels=6),))
    assert layer_seconds(empty, 1, compute, None, False) == pytest.approx(6 * 77.44e-6)
    assert layer_seconds(empty, 1, compute, None, False, graphed=True) == 0.0
    ops = (elementwise("h.0.ln_1", 4096 * 2048, 2.0), elementwise("bias-add", 4096 * 2048, 3.0))
    busy = Layer("h.0.ln_1.weight", 0, ops=ops)
    for backward in (False, True):
        gpu = sum(compute.work(op, 1, backward).gpu_s for op in ops)
        assert gpu > 0
        assert layer_seconds(busy, 1, compute, None, backward, graphed=True) == \
            pytest.approx(gpu)


def test_the_ledger_rows_name_their_scope() -> None:
    """Megatron-Bridge's workload configs: GB200 30B-A3B MXFP8 graphs the router and the
    preprocess, the H100 PP 2 runs none, 26.08's recipe a full iteration."""
    rows = {row.id: row for row in load_ledger("megatron-bridge-moe")}
    assert rows["mbridge-moe-2602-gb200-qwen3-30b-a3b-mxfp8"].execution.run.cuda_graph == "moe"
    assert rows["mbridge-moe-2602-h100-qwen3-30b-a3b-fp8cs"].execution.run.cuda_graph == "none"
    assert rows["mbridge-moe-2608-gb200-qwen3-30b-a3b-mxfp8"].execution.run.cuda_graph == "full"
    assert rows["mbridge-moe-2602-h100-qwen3-30b-a3b-fp8cs"].model.aux_loss
