"""NeMo's bulk TP overlap (``set_sm_margin=False``) beside Hopper's persistent cuBLAS GEMMs
(``job.communication.tp_overlap``, ``bulk-all-sms``), checked by hand."""

from __future__ import annotations

import pytest

from dlsched.job.cluster import load_cluster
from dlsched.job.communication.collective_costs import curve
from dlsched.job.communication.tp_overlap import OVERLAPS, exposed_seconds, overlapped_tp
from dlsched.job.compute.layer_costs import decoder_model, gpu_compute
from dlsched.job.model_spec import bundled_specs


def test_a_full_grid_gemm_waits_for_the_collectives_sms() -> None:
    """A 1 s GEMM launched for all 132 SMs beside a collective holding some: a 0.3 s collective
    delays its last blocks by 0.3 s (exposed in full); a 1.5 s one leaves them to a second wave
    after the first (GEMM ends at 2 s, collective at 1.5 s: 1 s exposed); a 3 s one outlasts
    both waves (2 s exposed). How many SMs the collective holds does not matter; with the
    margin (``bulk``) the GEMM runs on the rest and a 0.3 s collective costs 132 / 108 - 1."""
    for comm_sms in (2, 4, 24):
        assert exposed_seconds("bulk-all-sms", 0.3, 1.0, 132, comm_sms) == pytest.approx(0.3)
        assert exposed_seconds("bulk-all-sms", 1.5, 1.0, 132, comm_sms) == pytest.approx(1.0)
        assert exposed_seconds("bulk-all-sms", 3.0, 1.0, 132, comm_sms) == pytest.approx(2.0)
    assert exposed_seconds("bulk", 0.3, 1.0, 132, 24) == pytest.approx(132 / 108 - 1)


def test_nemo_bulk_overlaps_are_full_grid_and_the_fprop_ones_are_not() -> None:
    """NeMo's userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192: the four backward bulk overlaps
    (QKV and FC1 data gradient's all-gathers, weight gradient's reduce-scatters) have no SM
    margin; the forward's reduce-scatters are pipelined with one; the rest ring exchanges."""
    methods = {(phase, collective, label): method
               for phase, collective, label, method, _ in OVERLAPS}
    assert [key for key, method in methods.items() if method == "bulk-all-sms"] == [
        ("dgrad", "all-gather", "h.0.attn.c_attn"), ("wgrad", "reduce-scatter", "h.0.attn.c_attn"),
        ("dgrad", "all-gather", "h.0.mlp.c_fc"), ("wgrad", "reduce-scatter", "h.0.mlp.c_fc")]
    assert {method for (phase, *_), method in methods.items() if phase == "forward"} == {
        "ring", "pipeline"}


def test_llama_70b_backward_exposes_its_four_bulk_collectives_in_full() -> None:
    """Llama 3 70B at TP 4 with SP and CP 2 (4,096 tokens, a 64 MiB activation): each of the
    QKV and FC1 backward GEMM halves outlasts its all-gather or reduce-scatter, so the four
    bulk collectives are exposed in full and the two ring exchanges (0.16 ms against GEMMs of
    0.2 ms and more) not at all: the backward's exposed TP time is 2 all-gathers + 2
    reduce-scatters."""
    llama = bundled_specs()["llama3-70b"]
    cluster = load_cluster("dgx-h100", 64, None)
    group = cluster.group_topology(1, 4)
    compute = gpu_compute(cluster.gpu, "bf16", 4, True)
    message = (llama.seq // 2) * llama.hidden * 2
    assert message == 64 * 2**20
    gather = curve(group, "all-gather", "baseline").seconds(message)
    scatter = curve(group, "reduce-scatter", "baseline").seconds(message)
    gemms = {op.label: op for layer in decoder_model(llama, 1, 2).layers for op in layer.ops
             if op.kind == "gemm"}
    halves = [compute.op_time(gemms[label], 1, backward=True) / 2
              for label in ("h.0.attn.c_attn", "h.0.mlp.c_fc", "h.0.attn.c_proj",
                            "h.0.mlp.c_proj")]
    assert min(halves) > max(gather, scatter)
    _, backward = overlapped_tp(decoder_model(llama, 1, 2), compute, 1, message, group,
                                "baseline")
    assert backward == pytest.approx(2 * gather + 2 * scatter)
