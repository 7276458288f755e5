"""Megatron-Core's interleaved schedule under the EP All-to-All overlap runs one more warm-up
forward (get_pp_rank_microbatches), so one more chunk-microbatch is in flight."""

from __future__ import annotations

from dlsched.job.execution import Execution
from dlsched.job.memory.in_flight import in_flight_peak, warmup_forwards
from dlsched.job.run_settings import RunSettings


def test_one_more_warmup_forward_under_the_a2a_overlap():
    """PP 2, VP 2, 8 microbatches: rank 0 warms up 2 (2 - 0 - 1) + (2 - 1) 2 = 4 chunk-forwards,
    5 with the overlap, and holds one chunk-microbatch more at its peak; 1F1B is unchanged."""
    plain = Execution(tp=1, pp=2, dp=1, microbatch_size=1, global_batch=8, chunks=2,
                      schedule="interleaved")
    overlap = plain.with_run(moe_a2a_overlap=True)
    assert (warmup_forwards(plain, 0), warmup_forwards(overlap, 0)) == (4, 5)
    assert warmup_forwards(plain, 1) + 1 == warmup_forwards(overlap, 1) == 3
    held = [sum(in_flight_peak(lay, 0, [(1.0, 0.0), (1.0, 0.0)])[2]) for lay in (plain, overlap)]
    assert held == [5, 6]
    flat = Execution(tp=1, pp=2, dp=1, microbatch_size=1, global_batch=8,
                     run=RunSettings(moe_a2a_overlap=True))
    assert warmup_forwards(flat, 0) == 1
