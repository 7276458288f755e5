"""Overlapped communication in the job evaluator: the weights' all-gather behind the next
forward (``--overlap-param-gather``) and the TP collectives beside their GEMMs
(``--tp-comm-overlap``), checked by hand and against the blocking model."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dlsched.job.cluster import load_cluster
from dlsched.job.communication.collective_costs import CollectiveCurve, curve
from dlsched.job.communication.dp_sync import WEIGHT_BYTES, overlapped_gather
from dlsched.job.communication.tp_overlap import OVERLAPS, exposed_seconds
from dlsched.job.compute.layer_costs import block_costs, decoder_model, gpu_compute
from dlsched.job.evaluation.evaluate import Job, evaluate
from dlsched.job.execution import Execution
from dlsched.job.model_spec import bundled_specs
from dlsched.job.run_settings import RunSettings

# 1 s per 1e9 bytes, no latency: a unit of p parameters gathers in 2 p / 1e9 s
LINEAR = CollectiveCurve(load_cluster("dgx-h100", 16, None).group_topology(8, 2), "all-gather",
                         "baseline", (0, 10**9), (0.0, 1.0))


def test_gathers_wait_for_the_network_then_the_forward_by_hand() -> None:
    """Units (0.5e9 params, 0.5 s), (0.25e9 params, 2 s): gathers end at 1 s and 1.5 s, the
    forwards at 1.5 s and 3.5 s: 1 s more than the forward's 2.5 s. A forward long enough to
    hide the second gather exposes only the first."""
    assert LINEAR.seconds(0.5e9 * WEIGHT_BYTES) == pytest.approx(1.0)
    assert overlapped_gather(((0.5e9, 0.5), (0.25e9, 2.0)), LINEAR) == pytest.approx(1.0)
    assert overlapped_gather(((0.05e9, 5.0), (0.5e9, 1.0)), LINEAR) == pytest.approx(0.1)


LLAMA = bundled_specs()["llama3-70b"]
LAYOUT = Execution(4, 4, 2, 1, 128, 5, "interleaved", "none", True, 1, cp=2,
                   run=RunSettings("bf16", dp_policy="ddp"))
JOB = Job(LLAMA, load_cluster("dgx-h100", 64, None))


def test_overlapped_param_gather_never_costs_more_and_zero_0_has_none() -> None:
    """Overlapping the ZeRO-1 gather shortens the DP step and the iteration; without ZeRO
    there is no gather and nothing changes."""
    blocking = evaluate(JOB, LAYOUT)
    overlapped = evaluate(JOB, LAYOUT.with_run(overlap_param_gather=True))
    assert overlapped.exposed["dp_s"] < blocking.exposed["dp_s"]
    assert overlapped.iteration_s < blocking.iteration_s
    plain = replace(LAYOUT, zero=0)
    assert evaluate(JOB, plain.with_run(overlap_param_gather=True)).iteration_s == \
        evaluate(JOB, plain).iteration_s


def test_each_overlap_method_by_hand() -> None:
    """On 132 SMs: a ring exchange exposes what the collective outlasts; bulk beside a 1 s GEMM
    on 24 SMs stretches it to 132 / 108 s; a 4-chunk pipeline on 24 SMs (chunks of 132 / 432 s)
    with a 0.4 s reduce-scatter ends at 132/432 + 3 x 132/432 + 0.1 s."""
    assert exposed_seconds("ring", 0.3, 1.0, 132, 0) == 0.0
    assert exposed_seconds("ring", 1.5, 1.0, 132, 0) == pytest.approx(0.5)
    assert exposed_seconds("bulk", 0.3, 1.0, 132, 24) == pytest.approx(132 / 108 - 1)
    assert exposed_seconds("bulk", 2.0, 1.0, 132, 24) == pytest.approx(1.0)
    chunk = 132 / 108 / 4
    assert exposed_seconds("pipeline", 0.4, 1.0, 132, 24) == pytest.approx(
        chunk + 3 * chunk + 0.1 - 1.0)
    assert exposed_seconds("pipeline", 8.0, 1.0, 132, 24) == pytest.approx(
        chunk + 3 * 2.0 + 2.0 - 1.0)


def test_tp_overlap_sums_its_ten_collectives() -> None:
    """Llama 3 70B, TP 4 with SP: the layer's forward exposes the sum over its four forward
    collectives, the backward over its six (each by its method beside its GEMM, the backward's
    GEMMs half data and half weight gradient); the layer's forward is its compute plus that."""
    cluster = JOB.cluster
    group = cluster.group_topology(1, 4)
    args = (LLAMA, 1, cluster.gpu, "bf16", 4, True, "none", group, "baseline", 2, "ring",
            "flash")
    blocking, overlapped = block_costs(*args), block_costs(*args, True)
    compute = gpu_compute(cluster.gpu, "bf16", 4, True)
    gemms = {op.label: op for layer in decoder_model(LLAMA, 1, 2).layers for op in layer.ops
             if op.kind == "gemm"}
    message = 1 * (LLAMA.seq // 2) * LLAMA.hidden * 2
    forward = backward = 0.0
    for phase, collective, label, method, comm_sms in OVERLAPS:
        seconds = curve(group, collective, "baseline").seconds(message)
        if phase == "forward":
            gemm = compute.op_time(gemms[label], 1)
            forward += exposed_seconds(method, seconds, gemm, 132, comm_sms)
        else:
            gemm = compute.op_time(gemms[label], 1, backward=True) / 2
            backward += exposed_seconds(method, seconds, gemm, 132, comm_sms)
    assert (sum(p == "forward" for p, *_ in OVERLAPS), len(OVERLAPS)) == (4, 10)
    assert overlapped.tp_forward_s == pytest.approx(forward)
    assert overlapped.tp_backward_s == pytest.approx(backward)
    assert overlapped.layer_f == pytest.approx(blocking.layer_f - blocking.tp_forward_s
                                               + overlapped.tp_forward_s)


def test_tp_overlap_needs_sequence_parallelism() -> None:
    """Without SP the all-reduces block as before (Megatron-Core's --tp-comm-overlap needs
    --sequence-parallel)."""
    layout = replace(LAYOUT, sequence_parallel=False)
    assert evaluate(JOB, layout.with_run(tp_comm_overlap=True)).iteration_s == \
        evaluate(JOB, layout).iteration_s
