"""The k-in-flight network, size-dependent costs and fitted network files."""

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.dataparallel import POLICIES, AlphaBeta, DPProblem, run_dataparallel
from dlsched.dataparallel.comm import Piecewise, Segment, nccl_allreduce, ring_allreduce
from dlsched.dataparallel.netfile import load_network_file
from dlsched.dataparallel.network import shared_times
from dlsched.dataparallel.plan import DPPlan, Message, whole_layer
from dlsched.dataparallel.simulate import comm_finish_times

MS = 1e-3
MiB = 2**20

messages = st.lists(st.tuples(st.floats(0, 20 * MS), st.floats(0, 2 * MS), st.floats(0, 5 * MS)),
                    min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(msgs=messages)
def test_one_slot_is_the_serial_network(msgs):
    """k = 1: each message starts at max(previous end, launch) and lasts latency + transfer."""
    starts, ends = shared_times(msgs, 1)
    free = 0.0
    for (launch, latency, transfer), start, end in zip(msgs, starts, ends, strict=True):
        assert start == pytest.approx(max(free, launch), abs=1e-12)
        assert end == pytest.approx(start + latency + transfer, abs=1e-12)
        free = end


@settings(max_examples=60, deadline=None)
@given(msgs=messages, slots=st.integers(1, 5))
def test_shared_network_conserves_bytes_and_slots(msgs, slots):
    """The bandwidth is used at full rate whenever some message transfers (the union of transfer
    phases lasts exactly the sum of transfers: no byte lost or created), no message is faster
    than alone, admission is FIFO after launch, and at most k run at once."""
    starts, ends = shared_times(msgs, slots)
    phases = sorted((start + latency, end) for (_, latency, _), start, end
                    in zip(msgs, starts, ends, strict=True))
    union, reach = 0.0, -math.inf
    for low, high in phases:
        union += max(0.0, high - max(low, reach))
        reach = max(reach, high)
    assert union == pytest.approx(sum(m[2] for m in msgs), abs=1e-9)
    for (launch, latency, transfer), start, end in zip(msgs, starts, ends, strict=True):
        assert start >= launch - 1e-15
        assert end >= start + latency + transfer - 1e-12
    assert starts == sorted(starts)
    for moment in starts:
        assert sum(1 for s, e in zip(starts, ends, strict=True) if s <= moment < e) <= slots


@settings(max_examples=60, deadline=None)
@given(msgs=messages, slots=st.integers(1, 5), sizes=st.lists(st.integers(1, 10**8),
                                                              min_size=12, max_size=12),
       credit=st.integers(1, 4 * 10**8))
def test_credit_limits_admission(msgs, slots, sizes, credit):
    """A message starts only while the running ones hold less than the credit (bytes): a
    credit of 1 byte is the serial network, and at every start the earlier messages still
    running hold less than the credit."""
    sizes = sizes[:len(msgs)]
    assert shared_times(msgs, slots, 1, sizes) == shared_times(msgs, 1)
    starts, ends = shared_times(msgs, slots, credit, sizes)
    for index, moment in enumerate(starts):
        held = sum(size for start, end, size in zip(starts[:index], ends, sizes, strict=False)
                   if start <= moment < end)
        assert held < credit


def test_two_in_flight_by_hand():
    """Two 1 ms latency + 2 ms transfer messages at t = 0: serial 0..3 and 3..6; two slots
    overlap the latencies and share the bandwidth, both ending at 1 + 4 = 5 ms."""
    msgs = [(0.0, 1 * MS, 2 * MS), (0.0, 1 * MS, 2 * MS)]
    assert shared_times(msgs, 1) == (pytest.approx([0, 3 * MS]), pytest.approx([3 * MS, 6 * MS]))
    assert shared_times(msgs, 2) == (pytest.approx([0, 0]), pytest.approx([5 * MS, 5 * MS]))


def test_plan_in_flight_uses_the_shared_network():
    """A plan with in_flight 2 on a 2-slot problem is simulated with shared bandwidth."""
    problem = DPProblem((1 * MS,) * 2, (1 * MS,) * 2, (8 * MiB,) * 2,
                        AlphaBeta(1 * MS, 0.25 * MS / MiB), in_flight=2)
    blocks = [whole_layer(problem, layer) for layer in (1, 0)]
    plan = DPPlan(tuple(Message((b,), 2 * MS) for b in blocks), False, "t", in_flight=2)
    assert comm_finish_times(problem, plan)[1] == pytest.approx([7 * MS, 7 * MS])


problems = st.builds(
    lambda layers, alpha, beta, k: DPProblem(
        tuple(f * MS for f, _, _ in layers), tuple(b * MS for _, b, _ in layers),
        tuple(g * MiB for _, _, g in layers), AlphaBeta(alpha * MS, beta), in_flight=k),
    st.lists(st.tuples(st.floats(0.05, 8), st.floats(0.05, 8), st.integers(1, 12)),
             min_size=1, max_size=6),
    st.floats(0.05, 3), st.sampled_from([1e-11, 6e-11, 3e-10]), st.integers(1, 4))


@settings(max_examples=25, deadline=None)
@given(problem=problems)
def test_bound_holds_with_messages_in_flight(problem):
    """On a k-message network every policy stays above the bound (which counts one latency)."""
    for name in POLICIES:
        result = run_dataparallel(problem, name)
        assert result.time_s >= result.bound_s * (1 - 1e-9), name


def test_piecewise_cost_and_lower_bound():
    """Segments apply by size; lower() never exceeds any split's total cost."""
    model = Piecewise((Segment(64 * 1024, 80e-6, 2e-9), Segment(math.inf, 400e-6, 8.7e-10)))
    assert model.cost(4096) == pytest.approx(80e-6 + 2e-9 * 4096)
    assert model.cost(MiB) == pytest.approx(400e-6 + 8.7e-10 * MiB)
    for parts in ([4096] * 3, [MiB, 4096], [64 * 1024, 64 * 1024 + 1], [10 * MiB]):
        total = sum(model.cost(p) for p in parts)
        assert model.lower(sum(parts), len(parts)) <= total * (1 + 1e-12)


@given(st.lists(st.integers(1, 2**28), min_size=1, max_size=8), st.integers(2, 512))
def test_nccl_is_the_faster_of_tree_and_ring(parts, workers):
    """nccl: min(tree, ring) per size; its lower bound is below every split's cost."""
    model = nccl_allreduce(workers, 12.5e9, 5e-6)
    ring = ring_allreduce(workers, 12.5e9, 5e-6)
    for size in parts:
        tree = 2 * math.ceil(math.log2(workers)) * 5e-6 + 2 * size / 12.5e9
        assert model.cost(size) == pytest.approx(min(tree, ring.cost(size)))
    assert model.lower(sum(parts), len(parts)) <= sum(model.cost(p) for p in parts) * (1 + 1e-12)


EXAMPLE = "examples/network-gloo-4ranks.yaml"


def test_example_network_file_loads():
    """The shipped example: piecewise, 3 segments, units parsed (64 KiB, 80 us, 0.5 GB/s)."""
    model = load_network_file(EXAMPLE)
    assert isinstance(model, Piecewise) and len(model.segments) == 3
    assert model.cost(4096) == pytest.approx(80e-6 + 4096 / 0.5e9)
    assert model.segments[0].up_to == 64 * 1024


GOOD = {"kind": "allreduce-cost", "name": "t", "workers": 4, "model": "alpha-beta",
        "alpha_beta": {"alpha": "100 us", "bandwidth": "1 GB/s"}}


@pytest.mark.parametrize(("change", "field"), [
    ({"kind": "topology"}, "kind"),
    ({"model": "ring"}, "ring"),
    ({"alpha_beta": {"alpha": -1, "bandwidth": 1e9}}, "alpha_beta.alpha"),
    ({"alpha_beta": {"alpha": 1e-4, "bandwidth": "nan"}}, "alpha_beta.bandwidth"),
    ({"model": "piecewise", "piecewise": [{"up_to": "1 MiB", "alpha": 1e-4, "bandwidth": 1e9},
                                          {"up_to": "2 KiB", "alpha": 1e-4, "bandwidth": 1e9},
                                          {"alpha": 1e-4, "bandwidth": 1e9}]}, "piecewise"),
    ({"workers": 1}, "workers"),
    ({"colour": "red"}, "colour"),
])
def test_bad_network_files_exit_2_naming_the_field(run_cli, tmp_path, change, field):
    """Each bad file fails with exit 2 and a message naming the field."""
    path = tmp_path / "net.json"
    path.write_text(json.dumps(GOOD | change))
    code, _, err = run_cli("dataparallel", "--model", "vgg16", "--network", str(path),
                           "--policy", "wfbp")
    assert code == 2
    assert field in err


def test_network_file_on_the_cli(run_cli, tmp_path):
    """A good file runs with its own worker count; another count is refused for a non-ring
    fit (exit 2 naming workers)."""
    path = tmp_path / "net.yaml"
    path.write_text(json.dumps(GOOD))
    code, out, _ = run_cli("dataparallel", "--model", "vgg16", "--network", str(path),
                           "--policy", "wfbp,bytescheduler", "--in-flight", "2", "--json")
    assert code == 0
    rows = json.loads(out)["rows"]
    assert rows[0]["workers"] == 4 and rows[1]["in_flight"] == 2
    code, _, err = run_cli("dataparallel", "--network", str(path), "--workers", "8")
    assert code == 2 and "workers" in err


def test_bad_model_options_exit_2(run_cli):
    """In-flight count, backward ratio, efficiency and output suffixes are checked first."""
    for args, needle in ((("--in-flight", "0"), "in-flight"),
                         (("--backward-ratio", "nan"), "backward-ratio"),
                         (("--efficiency", "1.5"), "efficiency"),
                         (("--device", "tpu9"), "v100"),
                         (("--csv", "out.txt"), "--csv")):
        code, _, err = run_cli("dataparallel", "--model", "vgg16", "--policy", "wfbp", *args)
        assert code == 2, args
        assert needle in err, args
