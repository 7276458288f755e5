"""Hand-computed timelines of 2-layer problems under each policy (times in ms).

Costs are alpha + 0.25 ms per MB (10^6 bytes: ByteScheduler's and US-Byte's default
partition is 10^6 fp32 elements, 4 MB). Layer l's gradient is ready at the sum of the backward
times of layers >= l; the next forward starts after backward (at T_b).
"""

import pytest

from dlsched.dataparallel import AlphaBeta, Block, DPProblem, run_dataparallel
from dlsched.dataparallel.policies.simple import horovod_plan
from dlsched.dataparallel.policies.usbyte import usbyte_schedule
from dlsched.dataparallel.simulate import iteration_time

MS = 1e-3
MB = 10**6


def _problem(backward, grads_mb, alpha_ms, forward=(1.0, 1.0)) -> DPProblem:
    return DPProblem(tuple(f * MS for f in forward), tuple(b * MS for b in backward),
                     tuple(g * MB for g in grads_mb), AlphaBeta(alpha_ms * MS, 0.25 * MS / MB))


# Ready: layer 1 at 2 ms, layer 0 at 4 ms; 4 MB each = 2 ms with the 1 ms startup.
BASE = _problem((2.0, 2.0), (4, 4), 1.0)


@pytest.mark.parametrize("policy", ["wfbp", "mgwfbp", "ddp", "usbyte", "bytescheduler",
                                    "dlsched"])
def test_base_case_meets_the_bound(policy):
    """Layer 1 goes 2..4, layer 0 4..6, forward 6..7 and 7..8: 8 ms. The bound is 8 too:
    C_0 = 4 + 1 + 1 = 6, C_1 = max(6, 2 + 1 + 2) = 6, f_0 = 6 -> 7, f_1 = 7 -> 8."""
    result = run_dataparallel(BASE, policy)
    assert result.time_s == pytest.approx(8 * MS)
    assert result.bound_s == pytest.approx(8 * MS)


# Startup 3 ms: 4 MB cost 4 ms, 8 MB fused cost 5 ms.
SLOW_START = _problem((2.0, 2.0), (4, 4), 3.0)


@pytest.mark.parametrize(("policy", "expected_ms"), [
    ("wfbp", 12.0),     # L1 2..6, L0 6..10, barrier, forward 10..12
    ("ddp", 12.0),      # buckets [L1] (first cap 1 MiB) and [L0]: as WFBP
    ("mgwfbp", 11.0),   # L0 ready 2 ms after L1 would start < 3 ms startup: fuse, 4..9, fwd 9..11
    ("horovod", 13.5),  # median phase 2.5 ms (below): L1 2.5..6.5, L0 7.5..11.5, fwd ..13.5
])
def test_slow_startup_case(policy, expected_ms):
    """Merging saves a startup only when the wait for the next layer is shorter."""
    assert run_dataparallel(SLOW_START, policy).time_s == pytest.approx(expected_ms * MS)


def test_slow_startup_bound():
    """C_0 = 4 + 3 + 1 = 8, C_1 = max(8, 2 + 3 + 2) = 8: f_0 = 8 -> 9, f_1 = 9 -> 10."""
    assert run_dataparallel(SLOW_START, "wfbp").bound_s == pytest.approx(10 * MS)


def test_horovod_time_is_the_median_over_phases():
    """5 ms cycle, phases (i + 1/2)/7 x 5 ms. Below 2 ms both layers wait for the tick at
    phase + 5 ms (L0 is ready at 4) and go fused (5 ms): phase + 12. At 2.5 and 3.21 ms L1 goes
    alone, L0 at the next tick: 2.5 + 11 and 3.21 + 11; at 3.93 ms L0 misses the first tick
    too: 3.93 + 11; at 4.64 ms both are ready: fused, 4.64 + 7. Median: 13.5 ms at 2.5 ms."""
    phases = [(i + 0.5) / 7 * 5 * MS for i in range(7)]
    times = sorted(iteration_time(SLOW_START, horovod_plan(SLOW_START, phase=p)) for p in phases)
    expected = sorted([phases[0] + 12 * MS, phases[1] + 12 * MS, phases[2] + 12 * MS,
                       phases[3] + 11 * MS, phases[4] + 11 * MS, phases[5] + 11 * MS,
                       phases[6] + 7 * MS])
    assert times == pytest.approx(expected)
    assert iteration_time(SLOW_START, horovod_plan(SLOW_START)) == pytest.approx(13.5 * MS)


def test_horovod_cycle_delays_launch():
    """A 1 ms cycle at phase 0 launches layer 1 at the 2 ms tick and layer 0 at the 4 ms tick;
    every phase shifts both by the same amount, so the median phase is the middle one, 0.5 ms:
    the 2.5 and 4.5 ms ticks."""
    plan = horovod_plan(BASE, cycle=1 * MS, phase=0.0)
    assert [m.launch for m in plan.messages] == pytest.approx([2 * MS, 4 * MS])
    plan = horovod_plan(BASE, cycle=1 * MS)
    assert [m.launch for m in plan.messages] == pytest.approx([2.5 * MS, 4.5 * MS])


def test_usbyte_gap_filling_and_forward_order():
    """Ready: L1 at 1 ms (8 MB), L0 at 3 ms (4 MB). At 1 ms the 2 ms gap is shorter than
    L1's 3 ms rest, so US-Byte sends just enough 1 MB units to reach 3 ms: 4 MB (1 + 1 ms).
    Phase 2 then sends L0 first (3..5) and L1's rest (5..7): forward 5..6, 7..8."""
    problem = _problem((2.0, 1.0), (4, 8), 1.0)
    plan = usbyte_schedule(problem, [0, 1], unit=MB)
    assert [(m.blocks, m.launch) for m in plan.messages] == [
        ((Block(1, 0, 4 * MB),), pytest.approx(1 * MS)),
        ((Block(0, 0, 4 * MB),), pytest.approx(3 * MS)),
        ((Block(1, 4 * MB, 4 * MB),), pytest.approx(1 * MS)),
    ]
    assert iteration_time(problem, plan) == pytest.approx(8 * MS)


def test_timeline_spans_and_readiness():
    """The timeline has backward, all-reduce and forward spans; no all-reduce starts before
    its gradients are ready, and the last forward ends at the iteration time."""
    result = run_dataparallel(SLOW_START, "mgwfbp")
    kinds = {s.kind for s in result.timeline.spans}
    assert kinds == {"backward", "forward", "allreduce"}
    for span in result.timeline.spans:
        if span.kind == "allreduce":
            assert span.start >= max(SLOW_START.ready[layer] for layer in span.args["layers"])
    assert result.timeline.end == pytest.approx(result.time_s)
