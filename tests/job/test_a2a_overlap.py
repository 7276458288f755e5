"""Megatron-Core's EP All-to-All overlap (``job.evaluation.a2a_overlap``): the two streams of
one merged layer by hand, the merged schedule's units, its refusals, and a whole evaluation."""

from __future__ import annotations

import pytest

from dlsched.errors import ConfigError
from dlsched.job.cluster import node_cluster
from dlsched.job.compute.moe_costs import moe_layer_costs
from dlsched.job.evaluation.a2a_overlap import (
    COMM_SMS,
    LayerNodes,
    check_a2a_overlap,
    comm_sms,
    merged_seconds,
    pair_table,
)
from dlsched.job.evaluation.evaluate import Job, evaluate
from dlsched.job.evaluation.pipeline_walk import PipelineTimes, walk_pipeline
from dlsched.job.evaluation.unit_walk import merged_layout, rank_units, unit_seconds
from dlsched.job.execution import Execution
from dlsched.job.model_spec import Model
from dlsched.pipeline.plans.actions import Action

# forward: pre-dispatch 4, dispatch 2, experts 3, combine 2; backward: combine 2, experts'
# data gradients 3, their weight gradients 3, dispatch 2, pre-dispatch data 4, weight 4 (s)
LAYER = LayerNodes(4, 2, 3, 2, 0, 0, 2, 3, 3, 2, 4, 4)
SMALL = Model(name="moe-small", layers=4, hidden=1024, heads=8, seq=1024, vocab=32000,
              ffn_hidden=2048, kv_heads=8, tied_embeddings=False, gated_ffn=True,
              bias=False, rms_norm=True, learned_positions=False, experts=8, top_k=2)


def test_one_merged_layer_by_hand():
    """Issue order combine_b, pre_f, mlp_b, dispatch_f, mlp_w, dispatch_b, mlp_f, combine_f,
    pre_b, pre_w on two streams: compute 0-4 pre_f, 4-7 mlp_b, 7-10 mlp_w, 10-13 mlp_f, 13-17
    pre_b, 17-21 pre_w; communication 0-2 combine_b, 4-6 dispatch_f, 7-9 dispatch_b (after
    mlp_b, beside mlp_w), 13-15 combine_f: 21 s, every All-to-All (8 s) hidden of the 29 s the
    two take one after the other."""
    assert LAYER.forward == 11 and LAYER.backward == 18
    assert merged_seconds([LAYER], [LAYER]) == 21


def test_the_communication_kernels_slow_the_compute_beside_them():
    """HybridEP's 32 of a 128-SM GPU's SMs: the compute beside the 8 hidden seconds of
    All-to-All runs on 96 of them, 8 x 32 / 96 = 2.67 s more: 23.67 s; a lone forward hides
    nothing and loses nothing; never more than the 29 s one after another."""
    assert merged_seconds([LAYER], [LAYER], comm_share=32 / 128) == pytest.approx(21 + 8 / 3)
    assert merged_seconds([LAYER], [], comm_share=32 / 128) == 11
    assert merged_seconds([LAYER], [LAYER], comm_share=0.9) == 29


def test_the_combine_kernels_share_the_compute():
    """The unpermutation (1 s each way) runs after its combine on the communication stream but
    takes its time from the compute too: the step is the 23 s of compute, the 8 s of
    All-to-All still hidden."""
    posted = LayerNodes(4, 2, 3, 2, 1, 1, 2, 3, 3, 2, 4, 4)
    assert merged_seconds([posted], [posted]) == 23


def test_alone_a_forward_hides_nothing_a_backward_its_dispatch():
    """A forward's nodes wait for each other: 11 s. A backward alone: combine 0-2, mlp_b 2-5,
    mlp_w 5-8 beside dispatch_b 5-7, pre_b 8-12, pre_w 12-16: 16 s of 18. With two layers the
    second's combine_b (12-14) also runs beside the first's pre_w (12-16): 30 s of 36."""
    assert merged_seconds([LAYER], []) == 11
    assert merged_seconds([], [LAYER]) == 16
    assert merged_seconds([], [LAYER, LAYER]) == 30


def test_embedding_and_head_run_first_and_last_on_the_compute_stream():
    """The forward's embedding (1 s) and the backward's loss and head (2 s) before the layers,
    the forward's head (3 s) and the backward's embedding (1 s) after: 21 + 7 s."""
    assert merged_seconds([LAYER], [LAYER], (1, 3), (2, 1)) == 28


def test_pair_table_is_stage_seconds_less_what_is_hidden():
    """One rank, one stage of one layer, the stage's own seconds 12 (forward) and 20 (backward:
    1 s and 2 s outside the layer): a merged step 32 - 8, a lone forward 12, a backward 20 - 2."""
    table = pair_table(1, 1, [12.0], [20.0], [[LAYER]], [((0.0, 0.0), (0.0, 0.0))])
    assert table == ((24.0, 12.0), (18.0, 0.0))


def test_merged_orders_have_one_more_warm_up_forward():
    """PP 1 (Megatron-Core's combined_1f1b_schedule_for_no_pipelining): the first forward
    alone, then forward i + 1 with backward i, the last backward alone. Interleaved, PP 2, two
    chunks, 4 microbatches: rank 0's 2 (pp - 1) + (chunks - 1) x pp = 4 warm-up forwards and
    one more alone, then merged steps."""
    layout = merged_layout("1f1b", 1, 1, 3)
    f, b = (lambda j: Action(0, "F", j)), (lambda j: Action(0, "B", j))
    assert layout.orders[0] == (f(0), f(1), b(0), f(2), b(1), b(2))
    assert layout.joined[0] == frozenset({1, 3})
    rank0 = merged_layout("interleaved", 2, 2, 4).orders[0]
    assert [a.kind for a in rank0[:6]] == ["F"] * 6 and rank0[6].kind == "B"
    assert 5 in merged_layout("interleaved", 2, 2, 4).joined[0]


def test_the_walk_of_one_rank_is_its_units_one_after_another():
    """Without a pipeline the iteration is the rank's units in order: 12 + 2 x 24 + 18 s."""
    table = pair_table(1, 1, [12.0], [20.0], [[LAYER]], [((0.0, 0.0), (0.0, 0.0))])
    times = PipelineTimes(1, 1, 3, "1f1b", (12.0,), (20.0,), (), pair_seconds=table)
    assert [unit_seconds(times, u) for u in rank_units(times, 0)] == [12, 24, 24, 18]
    assert walk_pipeline(times).end == 78


def test_megatron_core_refusals():
    with pytest.raises(ConfigError, match="expert parallelism"):
        check_a2a_overlap("1f1b", 1, 1, "none")
    with pytest.raises(ConfigError, match="virtual pipeline stages"):
        check_a2a_overlap("1f1b", 2, 8, "none")
    with pytest.raises(ConfigError, match="full recomputation"):
        check_a2a_overlap("interleaved", 2, 8, "full")
    with pytest.raises(ConfigError, match="moe module"):
        check_a2a_overlap("1f1b", 1, 8, "modules:moe")
    check_a2a_overlap("interleaved", 4, 8, "modules:moe_act,layernorm")


def test_layer_nodes_add_up_to_the_layer():
    """The MoE layer's nodes add up to its forward and backward seconds; its All-to-Alls are
    the dispatch and combine halves."""
    layout = Execution(1, 1, 8, 1, 8, ep=8)
    costs = moe_layer_costs(SMALL, layout, "h100", "bf16", None,
                            layout.group("ep", node_cluster("dgx-h100", 8)), "baseline")
    nodes = LayerNodes(*costs.nodes)
    assert nodes.forward == pytest.approx(costs.layer_f)
    assert nodes.backward == pytest.approx(costs.layer_b)
    assert nodes.dispatch == pytest.approx(costs.a2a_forward_s / 2)
    assert min(costs.nodes) >= 0


def test_overlap_shortens_a_one_rank_iteration_by_what_its_units_hide():
    """EP 8 on one DGX H100, 8 microbatches: the overlapped iteration is shorter, by the hidden
    seconds its merged steps report; its exposed All-to-All is what they do not hide."""
    job = Job(SMALL, node_cluster("dgx-h100", 8))
    plain = Execution(1, 1, 8, 1, 64, ep=8)
    blocking, overlapped = _evaluate(job, plain, False), _evaluate(job, plain, True)
    hidden = blocking.exposed["ep_a2a_s"] - overlapped.exposed["ep_a2a_s"]
    assert 0 < hidden <= blocking.exposed["ep_a2a_s"]
    assert blocking.iteration_s - overlapped.iteration_s == pytest.approx(hidden, rel=0.05)
    assert overlapped.iteration_s >= overlapped.bound_s * (1 - 1e-9)


def _evaluate(job: Job, layout: Execution, overlap: bool):
    """``evaluate`` with ``moe_a2a_overlap`` set on the execution's run settings."""
    return evaluate(job, layout.with_run(moe_a2a_overlap=overlap))


@pytest.mark.parametrize(("pp", "chunks", "m"), [(1, 1, 5), (2, 2, 4), (2, 3, 6), (4, 2, 8),
                                                  (4, 4, 12), (3, 2, 9)])
def test_merged_orders_run_every_action_once_and_never_deadlock(pp: int, chunks: int, m: int):
    """Every rank runs each of its forwards and backwards once, merged steps a forward and a
    backward; the walk of uneven stage times ends (no deadlock) at or above the busiest
    rank's units one after another (``unit_bound``)."""
    from dlsched.job.evaluation.unit_walk import unit_bound
    schedule = "1f1b" if chunks == 1 else "interleaved"
    layout = merged_layout(schedule, pp, chunks, m)
    stages = pp * chunks
    for rank, order in enumerate(layout.orders):
        held = [s for s in range(stages) if s % pp == rank]
        assert sorted((a.stage, a.kind, a.microbatch) for a in order) == sorted(
            (s, kind, j) for s in held for kind in "BF" for j in range(m))
        for i in layout.joined[rank]:
            assert (order[i].kind, order[i + 1].kind) == ("F", "B")
    forward = tuple(11.0 + 0.1 * s for s in range(stages))  # one LAYER and a little more
    backward = tuple(18.0 + 0.1 * s for s in range(stages))
    nodes = [[LAYER] for _ in range(stages)]
    table = pair_table(pp, chunks, forward, backward, nodes,
                       [((0.0, 0.0), (0.0, 0.0))] * stages)
    times = PipelineTimes(pp, chunks, m, schedule, forward, backward, (0.05,) * (stages - 1),
                          pair_seconds=table)
    assert min(min(row) for row in table) >= 0
    assert walk_pipeline(times).end >= unit_bound(times) - 1e-9


def test_nccl_all_to_all_kernels_hold_32_sms_beside_the_compute(monkeypatch):
    """Megatron-Core's alltoall dispatcher runs NCCL's All-to-All, whose kernel holds one SM per
    P2P channel (32 on an 8-GPU H100 node) for its duration: one rank, EP 8 on a DGX H100 (132
    SMs), 8 microbatches. Counted as holding none, the overlapped iteration is shorter than the
    blocking one by the hidden seconds; with NCCL's 32 the compute beside those seconds takes
    132 / 100 as long, so the iteration gives back 32 / 100 of them."""
    job = Job(SMALL, node_cluster("dgx-h100", 8))
    plain = Execution(1, 1, 8, 1, 64, ep=8)
    assert plain.run.moe_dispatcher == "alltoall"
    with_sms = _evaluate(job, plain, True)
    monkeypatch.setitem(COMM_SMS, "alltoall", 0)
    blocking, free = _evaluate(job, plain, False), _evaluate(job, plain, True)
    hidden = blocking.exposed["ep_a2a_s"] - free.exposed["ep_a2a_s"]
    assert hidden > 0
    assert with_sms.iteration_s - free.iteration_s == pytest.approx(hidden * 32 / 100, rel=1e-6)
    assert with_sms.iteration_s < blocking.iteration_s


def test_nccl_all_to_all_across_nodes_holds_its_16_channels():
    """NCCL's communicator on more than one node has 16 P2P channels (the two-node p5 and the
    32-rank logs): an EP group on 4 nodes 16 SMs, on one 32; HybridEP and DeepEP keep their set
    counts wherever the group lies."""
    assert comm_sms("alltoall", 1) == 32 and comm_sms("alltoall", 4) == 16
    assert comm_sms("hybridep", 4) == 32 and comm_sms("deepep", 1) == 20
    with pytest.raises(ValueError, match=r"^nodes: must be >= 1"):
        comm_sms("alltoall", 0)
