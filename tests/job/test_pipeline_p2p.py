"""Pipeline transfers blocking the ranks or beside their compute (``job.pipeline_p2p``): the
stage times each mode runs by hand, Megatron-Core's ``auto`` choice, one microbatch costing the
same either way (its transfers are on the critical path in both), blocking never faster, the
scatter-gather's TP gather on the receiver, the ledger's rows as their code ran and the
Megatron-LM flag."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dlsched.errors import ConfigError
from dlsched.job.cluster import load_cluster
from dlsched.job.communication.collective_costs import curve
from dlsched.job.communication.pipeline_p2p import resolved_p2p, with_p2p
from dlsched.job.evaluation.evaluate import (
    Job,
    evaluate,
    event_pipeline,
    executed_times,
    pipeline_times,
)
from dlsched.job.evaluation.pipeline_time import PipelineTimes, fast_pipeline
from dlsched.job.execution import Execution
from dlsched.job.exports.writers import megatron_args, torchtitan_toml
from dlsched.job.model_spec import bundled_specs
from dlsched.job.run_settings import RunSettings
from dlsched.ledger import load_ledger
from dlsched.ledger.predict import job_and_layout

TIMES = PipelineTimes(3, 1, 4, "1f1b", (1.0, 2.0, 3.0), (4.0, 5.0, 6.0), (0.5, 0.25))
SPEC = bundled_specs()["gpt-18.4b"]
JOB = Job(SPEC, load_cluster("dgx-a100", 64, "a100"))
BLOCKING = RunSettings("fp16", pipeline_p2p="blocking")
OVERLAPPED = replace(BLOCKING, pipeline_p2p="overlapped")


def test_blocking_sends_last_as_long_as_their_transfer() -> None:
    """Stage k's forward ends when its activation has reached k + 1, stage k + 1's backward
    when its gradient has reached k; the transfers then add nothing; the gather of pieces goes
    to the receiving stages in both modes."""
    blocked = with_p2p(TIMES, "blocking", 0.0)
    assert blocked.forward == (1.5, 2.25, 3.0) and blocked.backward == (4.0, 5.5, 6.25)
    assert blocked.send == (0.0, 0.0)
    gathered = with_p2p(TIMES, "overlapped", 0.125)
    assert gathered.forward == (1.0, 2.125, 3.125) and gathered.backward == (4.125, 5.125, 6.0)
    assert gathered.send == TIMES.send


def test_auto_is_megatron_cores_choice() -> None:
    assert resolved_p2p("auto", "interleaved") == "overlapped"
    for schedule in ("1f1b", "gpipe", "zb-h1"):
        assert resolved_p2p("auto", schedule) == "blocking"
    assert resolved_p2p("overlapped", "1f1b") == "overlapped"
    with pytest.raises(ConfigError, match=r"^pipeline_p2p: 'sometimes' is not accepted"):
        replace(BLOCKING, pipeline_p2p="sometimes")


@pytest.mark.parametrize("pp", [2, 4])
def test_one_microbatch_costs_the_same_either_way(pp: int) -> None:
    """With one microbatch every transfer is on the critical path, blocking or not."""
    layout = Execution(8, pp, 1, 1, 1, recompute="full", run=BLOCKING)
    job = replace(JOB, cluster=load_cluster("dgx-a100", 8 * pp, "a100"))
    blocking = evaluate(job, layout).iteration_s
    overlapped = evaluate(job, replace(layout, run=OVERLAPPED)).iteration_s
    assert blocking == pytest.approx(overlapped, rel=1e-12)


def test_blocking_is_never_faster_and_exposes_its_transfers() -> None:
    """PP 4 over 4 nodes, 32 microbatches of 1F1B: blocking adds to the exposed PP time, by
    at most two transfers per microbatch and stage boundary on the critical rank's path; the
    event simulator agrees with the fast walk on the executed times."""
    layout = Execution(8, 4, 2, 1, 64, recompute="full", run=BLOCKING)
    blocking = evaluate(JOB, layout)
    overlapped = evaluate(JOB, replace(layout, run=OVERLAPPED))
    assert blocking.iteration_s > overlapped.iteration_s
    assert blocking.exposed["pp_s"] > overlapped.exposed["pp_s"]
    times, _, _ = pipeline_times(JOB, layout)
    added = blocking.iteration_s - overlapped.iteration_s
    assert added <= 2 * layout.num_microbatches * sum(times.send)
    executed = executed_times(JOB, layout, times)
    assert event_pipeline(executed).end == pytest.approx(fast_pipeline(executed).end, rel=0.01)


def test_pieces_sent_without_sequence_parallelism_are_gathered_on_the_receiver() -> None:
    """TP 8 without SP sends eighths and all-gathers them over the TP group (the full
    activation, b s h 16-bit elements); with SP the shards stay apart."""
    layout = Execution(8, 2, 4, 1, 64, recompute="full", run=OVERLAPPED)
    times, _, _ = pipeline_times(JOB, layout)
    executed = executed_times(JOB, layout, times)
    gather = curve(JOB.cluster.group_topology(1, 8), "all-gather", "baseline").seconds(
        SPEC.seq * SPEC.hidden * 2)
    assert executed.forward[1] - times.forward[1] == pytest.approx(gather, rel=1e-12)
    assert executed.backward[0] - times.backward[0] == pytest.approx(gather, rel=1e-12)
    sp = replace(layout, sequence_parallel=True)
    sp_times, _, _ = pipeline_times(JOB, sp)
    assert executed_times(JOB, sp, sp_times) == sp_times


def test_ledger_rows_run_their_codes_transfers() -> None:
    """SC21 and Korthikanti et al.'s Megatron-LM blocks on every transfer; the dgxc recipes'
    interleaved runs overlap them (NeMo's comm-overlap callback with virtual pipelining)."""
    rows = {row.id: row for row in load_ledger()}
    for row_id in ("sc21-t1-gpt-76.1b", "korthikanti-t5-175b-full"):
        assert job_and_layout(rows[row_id])[1].run.pipeline_p2p == "blocking"
    _, layout = job_and_layout(rows["dgxc-2504-h100-llama3.1-70b-bf16-64gpu"])
    assert (layout.run.pipeline_p2p, layout.schedule) == ("overlapped", "interleaved")


def test_exports_say_how_the_transfers_were_priced() -> None:
    """An interleaved plan priced blocking carries Megatron-LM's --no-overlap-p2p-communication;
    a 1F1B plan priced overlapped, a note (Megatron-LM blocks there); TorchTitan's asynchronous
    sends, a note on a plan priced blocking."""
    interleaved = Execution(8, 4, 2, 1, 64, chunks=2, schedule="interleaved", recompute="full")
    assert "--no-overlap-p2p-communication" in megatron_args(
        SPEC, interleaved.with_run(precision="fp16", pipeline_p2p="blocking"))
    assert "--no-overlap-p2p-communication" not in megatron_args(
        SPEC, interleaved.with_run(precision="fp16"))
    plain = Execution(8, 4, 2, 1, 64, recompute="full")
    assert "only with the interleaved schedule" in megatron_args(
        SPEC, plain.with_run(precision="fp16", pipeline_p2p="overlapped"))
    llama = bundled_specs()["llama3-8b"]
    assert "torch.distributed.pipelining sends asynchronously" in torchtitan_toml(
        llama, plain)
