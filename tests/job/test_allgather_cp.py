"""PyTorch's all-gather context parallelism (``job.allgather_cp``): the exposed seconds at the
bounds of the overlap, checked by hand, eager and compiled (nothing overlapped), and the
algorithm priced when given, never searched."""

from __future__ import annotations

import pytest

from dlsched.job.cluster import load_cluster
from dlsched.job.communication.allgather_cp import (
    allgather_buffer,
    allgather_bytes,
    allgather_exposed,
    allgather_merge_seconds,
    cp_traffic,
    exchanged_block,
    rank_traffic,
)
from dlsched.job.communication.collective_costs import curve
from dlsched.job.communication.context_parallel import cp_cost
from dlsched.job.execution import Execution
from dlsched.job.model_spec import bundled_specs

GROUP = load_cluster("dgx-h100", 8, None).group_topology(1, 4)
BLOCK = 64e6  # bytes of one GPU's K and V block


def test_nothing_to_hide_behind_exposes_everything() -> None:
    """No attention to overlap: the forward is the all-gather of the 4 blocks, the backward
    the all-gather again and the 4 dK/dV transfers."""
    gather = curve(GROUP, "all-gather", "baseline").seconds(4 * BLOCK)
    forward, backward = allgather_exposed(BLOCK, 4, GROUP, "baseline", 0.01, 0.0, 0.0)
    assert forward == pytest.approx(gather)
    assert backward == pytest.approx(gather + 4 * 0.01)


def test_a_long_attention_hides_all_but_the_last_dkv_send() -> None:
    forward, backward = allgather_exposed(BLOCK, 4, GROUP, "baseline", 0.01, 100.0, 100.0)
    assert forward == 0.0
    assert backward == pytest.approx(0.01)


def test_bytes_and_buffer_by_hand() -> None:
    assert allgather_bytes(BLOCK, 4) == (3 * BLOCK, 3 * BLOCK + 4 * 2 * BLOCK)  # FP32 dK/dV
    assert allgather_buffer(BLOCK, 4) == 4 * BLOCK


def test_torchtitan_exchanges_the_repeated_kv_heads() -> None:
    """Llama 3 8B: 32 heads, 8 KV heads; repeat_kv before SDPA makes the block 4x."""
    assert exchanged_block(BLOCK, 32, 8) == 4 * BLOCK


def test_eager_merge_traffic_by_hand() -> None:
    """The last rank of CP 2: forward K/V copies 8, one concatenation 8, two casts to FP32 6
    + 6, the merge 32, the cast back 6 = 66; backward zeros 12, copies 8, one concatenation
    8, first step 3 x 10 + 16, second step dK/dV halves (5 + 8) x 2, dQ 10, concatenation
    16, end 18 = 144, and the second step's FlashAttention-2 backward call's own kernels
    over all the queries, 14 = 158."""
    assert rank_traffic(2, 1, False) == (66.0, 144.0 + 14.0)
    # rank 0's second step is partial: half the cast and merge (19) and the write-back (8);
    # its second backward call covers half the queries (7)
    assert rank_traffic(2, 0, False) == (8 + 8 + 6 + 6 + 19 + 8,
                                         12 + 8 + 8 + 18 + 46 + 20 + 13 + 16 + 7)
    assert rank_traffic(1, 0, False) == (0.0, 0.0)


def test_compiled_merge_traffic_by_hand() -> None:
    """CP 4, last rank: merges 2+2+4, 4+2+4, 4+2+2 = 26; backward first step 6 + 12, three
    steps of (8 + 2 + 8) + 10, the received dK/dV cast 12 = 114, and three later
    FlashAttention-2 backward calls' own kernels, 3 x 14 = 156."""
    assert rank_traffic(4, 3, True) == (26.0, 114.0 + 42.0)
    # rank 0: every step partial, half merged and half rewritten: 4 + 3, 5 + 4, 4 + 3
    assert rank_traffic(4, 0, True)[0] == 7.0 + 9.0 + 7.0


def test_flash_backward_kernels_per_call_by_hand() -> None:
    """PyTorch's FlashAttention-2 backward runs, per call, flash_bwd_dot_do_o_kernel (reads
    dO and O, 2 + 2 bytes per query element, clears the FP32 dq_accum, 4) and
    flash_bwd_convert_dq_kernel (reads dq_accum, 4, writes dQ, 2): 14. CP's last rank makes
    cp - 1 calls beyond the one a layer without CP makes, each over all its queries; rank 0's
    later calls are partial (half the queries). Llama 3 8B at CP 8 (262,144 tokens: 32,768
    x 4,096 query elements per GPU): 7 x 14 x 134,217,728 = 13.15 GB more per layer backward
    on the last rank, eager or compiled; nothing in the forward."""
    from dlsched.job.communication.allgather_cp import FA2_BACKWARD_CALL, _merge_traffic

    assert FA2_BACKWARD_CALL == 14.0
    for compiled in (False, True):
        for cp in (2, 4, 8):
            last, first = rank_traffic(cp, cp - 1, compiled), rank_traffic(cp, 0, compiled)
            assert last[0] == _merge_traffic(cp, cp - 1, compiled)[0]
            assert last[1] - _merge_traffic(cp, cp - 1, compiled)[1] == 14.0 * (cp - 1)
            assert first[1] - _merge_traffic(cp, 0, compiled)[1] == 7.0 * (cp - 1)
    elements = 32768 * 4096
    eager = cp_traffic(elements, 8, False, reruns=True)[1] - 504.0 * elements
    assert eager == pytest.approx(13.153e9, rel=1e-4)


def test_slowest_rank_and_scale() -> None:
    """cp_traffic takes the rank with the most bytes (the forward twice when rerun) and
    scales by the query elements; compiled moves less than eager."""
    elements = 1e6
    forward, backward = cp_traffic(elements, 8, False, reruns=True)
    assert (forward, backward) == (342.0 * elements, (504.0 + 7 * 14.0) * elements)
    assert sum(cp_traffic(elements, 8, True, True)) < forward + backward


def test_merge_seconds_enter_the_layer_by_hand() -> None:
    """Llama 3 8B at 32k tokens, CP 4, full recomputation, compiled: the last rank's 26 and
    156 bytes per query element (b s h / cp = 8192 x 4096 per GPU) at the GPU's memory rate
    are added to the layer's forward and backward (the forward's again with the rerun), and
    only under the all-gather algorithm."""
    from dlsched.job.compute.block_pricing import KernelOptions
    from dlsched.job.compute.layer_costs import block_costs, gpu_compute
    from dlsched.job.model_spec import Model

    spec = Model("llama3-8b", 32, 4096, 32, 32768, 128256, ffn_hidden=14336,
                 kv_heads=8, tied_embeddings=False, gated_ffn=True, bias=False,
                 rms_norm=True, learned_positions=False)
    rate = gpu_compute("h100", "bf16").gpu.memory_rate
    elements = 8192 * 4096
    forward, backward = allgather_merge_seconds(spec, 1, 1, 4, "all-gather", rate, True, True)
    assert (forward, backward) == pytest.approx((26 * elements / rate, 156 * elements / rate))
    assert allgather_merge_seconds(spec, 1, 1, 4, "ring", rate, True, True) == (0.0, 0.0)
    assert allgather_merge_seconds(spec, 1, 1, 1, "all-gather", rate, True, True) == (0.0, 0.0)
    kernels = KernelOptions(compiled=True)
    ring, gather = (block_costs(spec, 1, "h100", "bf16", 1, False, "full", GROUP, "baseline",
                                cp=4, cp_algorithm=algorithm, kernels=kernels)
                    for algorithm in ("ring", "all-gather"))
    assert gather.layer_f - ring.layer_f == pytest.approx(forward)
    assert gather.layer_b - ring.layer_b == pytest.approx(backward + forward)


def test_plan_prices_all_gather_cp_when_given_and_never_searches_it() -> None:
    from dlsched.job.scenario import PlanScenario

    base = {"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 8, "global_batch": 4,
            "seq": 32768, "tp": 1, "pp": 1, "cp": 2, "zero": 3, "microbatch_size": 1,
            "recompute": "full", "baselines": False}
    given, = PlanScenario(**base, cp_algorithm="all-gather").run().rows
    assert given["cp_algorithm"] == "all-gather" and given["exposed_cp_s"] > 0
    searched, = PlanScenario(**base).run().rows
    assert searched["cp_algorithm"] in ("ring", "all-to-all")


def test_compiled_attention_hides_nothing() -> None:
    """Traced by torch.compile every functional collective is waited as issued: however long
    the attention, the forward is the whole all-gather of the 4 blocks and the backward the
    all-gather again and all 4 dK/dV transfers."""
    gather = curve(GROUP, "all-gather", "baseline").seconds(4 * BLOCK)
    forward, backward = allgather_exposed(BLOCK, 4, GROUP, "baseline", 0.01, 100.0, 100.0,
                                          compiled=True)
    assert forward == pytest.approx(gather)
    assert backward == pytest.approx(gather + 4 * 0.01)


def test_cp_cost_follows_the_runs_compile_setting() -> None:
    """Llama 3 70B at 32,768 tokens, TP 8 x CP 2 on two DGX H100 nodes (the CP pair crosses
    the NIC, 50e9 B/s and 5 us each way), full recomputation. The exchanged K/V block:
    2 x 16,384 tokens x 64 heads (repeat_kv of the 8 KV heads) / 8 x 128 x 2 B = 67,108,864 B;
    a dK/dV transfer, FP32: 5e-6 + 2 x 67,108,864 / 50e9 = 2.689355 ms. Eager, behind a
    second of attention: nothing of the all-gathers, only the last dK/dV transfer. Compiled:
    the all-gather of the 2 blocks in the forward, again in the backward with both dK/dV
    transfers, and the recomputed forward's all-gather once more."""
    layout = Execution(8, 1, 1, 1, 8, recompute="full", cp=2, cp_algorithm="all-gather")
    spec = bundled_specs()["llama3-70b"].replace(seq=32768)
    group = load_cluster("dgx-h100", 16, None).group_topology(8, 2)
    dkv = 5e-6 + 2 * 67_108_864 / 50e9
    assert dkv == pytest.approx(2.689355e-3)
    gather = curve(group, "all-gather", "baseline").seconds(2 * 67_108_864)
    eager = cp_cost(spec, layout, group, "baseline", 1.0, 1.0)
    assert eager.forward_s == 0.0
    assert eager.backward_s == pytest.approx(dkv)
    compiled = cp_cost(spec, layout.with_run(compile=True), group, "baseline", 1.0, 1.0)
    assert compiled.forward_s == pytest.approx(gather)
    assert compiled.backward_s == pytest.approx(gather + 2 * dkv + gather)
    # the bytes, either way: the block to the other GPU; backward its block again, the 2
    # FP32 dK/dV blocks and the recomputed forward's block (sent, hidden or not)
    block = 67_108_864
    for cost in (eager, compiled):
        assert (cost.forward_bytes, cost.backward_bytes) == (block, block + 2 * 2 * block + block)
