"""Two-state all-reduce cost: idle and under compute load, charged by overlap."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.dataparallel import POLICIES, AlphaBeta, DPProblem, run_dataparallel
from dlsched.dataparallel.comm import Piecewise, Segment, TwoState
from dlsched.dataparallel.contention import contended_run
from dlsched.dataparallel.netfile import load_network_file
from dlsched.dataparallel.network import SharedNetwork
from dlsched.dataparallel.plan import DPPlan, Message, whole_layer
from dlsched.dataparallel.simulate import comm_finish_times, execute, iteration_time
from dlsched.errors import ConfigError

MS = 1e-3
MiB = 2**20
IDLE = AlphaBeta(4 * MS, 0.0)
LOADED = AlphaBeta(8 * MS, 0.0)


def _two_layers() -> tuple[DPProblem, DPPlan]:
    """Backward: layer 1 over 0..2 ms, layer 0 over 2..6 ms; forward 1 ms each; one message
    per layer, each launched when its gradient is ready."""
    problem = DPProblem((1 * MS, 1 * MS), (4 * MS, 2 * MS), (1000, 1000), TwoState(IDLE, LOADED))
    plan = DPPlan(tuple(Message((whole_layer(problem, layer),), problem.ready[layer])
                        for layer in (1, 0)), False, "by-hand")
    return problem, plan


def test_half_overlapping_message_costs_half_of_each_curve():
    """m0 (layer 1) starts at 2 ms under backward: by 6 ms it has done 4/8 of its work (the
    loaded curve: 8 ms), the other half idle costs 4/2 = 2 ms, so it ends at 8 ms = 2 + 8/2 +
    4/2. m1 (layer 0) then runs with nothing computing (the forward waits for it): 8..12 ms.
    Forward 12..13 and 13..14 ms."""
    problem, plan = _two_layers()
    starts, ends = comm_finish_times(problem, plan)
    assert starts == pytest.approx([2 * MS, 8 * MS])
    assert ends == pytest.approx([8 * MS, 12 * MS])
    assert iteration_time(problem, plan) == pytest.approx(14 * MS)


def test_message_overlapping_the_forward_is_loaded():
    """A message the first forward does not wait for runs beside it: layer 1's message
    launched at the end of backward (6 ms) after layer 0's (6..10 ms idle while the forward
    waits), then loaded during forward 0 (10..11 ms: 1/8 of its work), idle after: it ends at
    11 + 7/8 x 4 = 14.5 ms, and forward 1 runs 14.5..15.5 ms."""
    problem, _ = _two_layers()
    plan = DPPlan(tuple(Message((whole_layer(problem, layer),), 6 * MS) for layer in (0, 1)),
                  False, "by-hand")
    assert comm_finish_times(problem, plan)[1] == pytest.approx([10 * MS, 14.5 * MS])
    assert iteration_time(problem, plan) == pytest.approx(15.5 * MS)


def test_latency_half_loaded_by_hand():
    """Two messages of 1 ms latency + 2 ms transfer at t = 0 on two slots, slowdown 2, loaded
    over 0..1 ms: half of each latency is done at 1 ms, the rest (0.5 ms) idle ends it at
    1.5 ms, then both share the bandwidth for 2 x 2 ms: both end at 5.5 ms."""
    network = SharedNetwork(2)
    for index in range(2):
        network.submit(index, 0.0, 1 * MS, 2 * MS, 2.0)
    network.set_loaded(True)
    assert network.advance(1 * MS) == []
    network.set_loaded(False)
    done = network.advance(float("inf"))
    assert [end for _, _, end in done] == pytest.approx([5.5 * MS, 5.5 * MS])


def test_loaded_transfer_shares_at_the_slowed_rate():
    """Two 0-latency 2 ms transfers, one with slowdown 3, loaded throughout: the slow one
    progresses at 1/(2 x 3), the other at 1/2; the fast ends at 4 ms (slow: 4/6 = 2/3 ms of
    its 2 ms done, 4/3 ms left), then alone the slow needs 3 x 4/3 = 4 ms more: 8 ms."""
    network = SharedNetwork(2)
    network.submit(0, 0.0, 0.0, 2 * MS, 1.0)
    network.submit(1, 0.0, 0.0, 2 * MS, 3.0)
    network.set_loaded(True)
    done = sorted(network.advance(float("inf")))
    assert [end for _, _, end in done] == pytest.approx([4 * MS, 8 * MS])


def test_slowdown_never_below_one():
    """A loaded fit cheaper than the idle one (noise) counts as idle; sizes pick segments."""
    comm = TwoState(AlphaBeta(1 * MS, 1e-9), Piecewise((Segment(4096, 0.5 * MS, 1e-9),
                                                        Segment(float("inf"), 3 * MS, 2e-9))))
    assert comm.slowdown(1024) == 1.0
    assert comm.slowdown(MiB) == pytest.approx((3 * MS + 2e-9 * MiB) / (1 * MS + 1e-9 * MiB))
    assert comm.cost(MiB) == comm.idle.cost(MiB) and comm.split(MiB) == comm.idle.split(MiB)


problems = st.builds(
    lambda layers, alpha, beta, k: (tuple(f * MS for f, _, _ in layers),
                                    tuple(b * MS for _, b, _ in layers),
                                    tuple(g * MiB for _, _, g in layers), alpha * MS, beta, k),
    st.lists(st.tuples(st.floats(0.05, 8), st.floats(0.05, 8), st.integers(1, 12)),
             min_size=1, max_size=5),
    st.floats(0.05, 3), st.sampled_from([1e-11, 6e-11, 3e-10]), st.integers(1, 3))


@settings(max_examples=20, deadline=None)
@given(case=problems, factor=st.floats(1.0, 4.0))
def test_two_state_between_idle_and_loaded(case, factor):
    """Equal curves give exactly the one-curve iteration for every policy; on the serial
    network a slower loaded curve (factor x idle) makes a plan no faster than the idle curve
    alone and no slower than the loaded curve alone (on a shared network neither holds: a
    message held back in its latency leaves the others more bandwidth); the lower bound
    holds either way."""
    forward, backward, grads, alpha, beta, k = case
    idle = AlphaBeta(alpha, beta)
    loaded = AlphaBeta(alpha * factor, beta * factor)
    one = DPProblem(forward, backward, grads, idle, in_flight=k)
    same = DPProblem(forward, backward, grads, TwoState(idle, idle), in_flight=k)
    two = DPProblem(forward, backward, grads, TwoState(idle, loaded), in_flight=k)
    slow = DPProblem(forward, backward, grads, loaded, in_flight=k)
    for name in POLICIES:
        plan = POLICIES[name](one)
        assert iteration_time(same, plan) == pytest.approx(iteration_time(one, plan), rel=1e-9)
        time = iteration_time(two, plan)
        if plan.in_flight == 1:
            assert time >= iteration_time(one, plan) * (1 - 1e-9), name
            assert time <= iteration_time(slow, plan) * (1 + 1e-9), name
        result = run_dataparallel(two, name)
        assert result.time_s >= result.bound_s * (1 - 1e-9), name
    queued = DPProblem(forward, backward, grads,
                       TwoState(idle, loaded, stream=AlphaBeta(alpha / 2, beta / 2)),
                       in_flight=k)
    idle_queued = DPProblem(forward, backward, grads,
                            TwoState(idle, loaded, idle_stream=AlphaBeta(alpha / 2, beta / 3)),
                            in_flight=k)
    for problem in (queued, idle_queued):  # queued messages cheaper than idle ones
        for name in POLICIES:
            result = run_dataparallel(problem, name)
            assert result.time_s >= result.bound_s * (1 - 1e-9), name


GOOD = {"kind": "allreduce-cost", "name": "t", "workers": 4, "model": "alpha-beta",
        "alpha_beta": {"alpha": "100 us", "bandwidth": "1 GB/s"},
        "under_load": {"model": "alpha-beta",
                       "alpha_beta": {"alpha": "300 us", "bandwidth": "0.5 GB/s"}}}


def test_under_load_block_builds_two_states(tmp_path):
    """The top-level fit is the idle curve, under_load the loaded one."""
    path = tmp_path / "net.json"
    path.write_text(json.dumps(GOOD))
    comm = load_network_file(path)
    assert isinstance(comm, TwoState)
    assert comm.idle.cost(1e6) == pytest.approx(100e-6 + 1e-3)
    assert comm.loaded.cost(1e6) == pytest.approx(300e-6 + 2e-3)


@pytest.mark.parametrize(("under_load", "field"), [
    ({"model": "alpha-beta", "alpha_beta": {"alpha": 1e-4, "bandwidth": "nan"}},
     "under_load.alpha_beta.bandwidth"),
    ({"model": "alpha-beta", "alpha_beta": {"alpha": "inf", "bandwidth": 1e9}},
     "under_load.alpha_beta.alpha"),
    ({"model": "alpha-beta", "alpha_beta": {"alpha": 1e6, "bandwidth": 1e9}},
     "under_load.alpha_beta.alpha"),
    ({"model": "ring", "alpha_beta": {"alpha": 1e-4, "bandwidth": 1e9}}, "under_load"),
    ({"model": "alpha-beta", "alpha_beta": {"alpha": 1e-4, "bandwidth": 1e9},
      "colour": "red"}, "under_load.colour"),
    ({"model": "alpha-beta", "alpha_beta": {"alpha": 1e-4, "bandwidth": 1e9},
      "samples": [{"bytes": 4096, "seconds": -1}]}, "under_load.samples"),
])
def test_bad_under_load_exits_2_naming_the_field(run_cli, tmp_path, under_load, field):
    """NaN, infinite, absurd (> 60 s start-up) or missing values in the loaded fit fail with
    exit 2 and a message naming the field, before any planning."""
    path = tmp_path / "net.json"
    path.write_text(json.dumps(GOOD | {"under_load": under_load}))
    code, _, err = run_cli("dataparallel", "--model", "vgg16", "--network", str(path),
                           "--policy", "wfbp")
    assert code == 2
    assert field in err


def test_two_state_file_on_the_cli(run_cli, tmp_path):
    """A two-curve file plans and simulates every policy; predictions are no faster than with
    the idle curve alone."""
    path = tmp_path / "net.json"
    path.write_text(json.dumps(GOOD))
    idle = tmp_path / "idle.json"
    idle.write_text(json.dumps({k: v for k, v in GOOD.items() if k != "under_load"}))
    times = []
    for network in (path, idle):
        code, out, _ = run_cli("dataparallel", "--model", "resnet50", "--network", str(network),
                               "--policy", "wfbp,ddp", "--json")
        assert code == 0
        times.append([row["time_s"] for row in json.loads(out)["rows"]])
    assert all(two >= one for two, one in zip(*times, strict=True))


def _two_layers_one_message_each(comm: TwoState) -> tuple[DPProblem, DPPlan, object]:
    """Two layers (forward 1 ms, backward 2 ms, 1000 bytes each), one message per layer in
    backward order, run under ``comm``."""
    problem = DPProblem((1 * MS, 1 * MS), (2 * MS, 2 * MS), (1000, 1000), comm)
    plan = DPPlan(tuple(Message((whole_layer(problem, layer),), problem.ready[layer])
                        for layer in (1, 0)), False, "by-hand")
    return problem, plan, contended_run(problem, plan, comm)


def test_message_in_flight_slows_the_backward_by_hand():
    """Compute runs 2x slower while a message is in flight (messages not slowed): layer 1's
    backward 0..2 ms; m0 (layer 1, 4 ms) from 2 ms; layer 0's 2 ms of backward beside it take
    4 ms (2..6); m1 (layer 0), planned at 4 ms of backward work, launches at its actual end,
    6 ms, and runs 6..10 ms while the forward waits; forward 10..11 and 11..12 ms."""
    problem, plan, run = _two_layers_one_message_each(TwoState(IDLE, IDLE,
                                                               compute=((1.0, 2.0),)))
    assert run.ready == pytest.approx((6 * MS, 2 * MS))
    assert run.starts == pytest.approx((2 * MS, 6 * MS))
    assert run.ends == pytest.approx((6 * MS, 10 * MS))
    assert run.forward_starts == pytest.approx((10 * MS, 11 * MS))
    assert iteration_time(problem, plan) == pytest.approx(12 * MS)
    spans = {s.label: (s.start, s.end) for s in execute(problem, plan).timeline.spans}
    assert spans["B layer0"] == pytest.approx((2 * MS, 6 * MS))


def test_both_slowdowns_by_hand():
    """Messages 2x slower under compute and compute 2x slower beside a message: m0 from 2 ms
    does 4 of its 8 loaded ms by 6 ms while layer 0's backward (2 ms of work) takes 4 ms;
    idle, its other half takes 2 ms: ends at 8 ms. m1 launches at 6 ms (backward's actual
    end), starts at 8 ms, runs idle to 12 ms; forward 12..13 and 13..14 ms."""
    _, _, run = _two_layers_one_message_each(TwoState(IDLE, LOADED, compute=((1.0, 2.0),)))
    assert run.ends == pytest.approx((8 * MS, 12 * MS))
    assert run.time == pytest.approx(14 * MS)


def test_compute_slowdown_interpolates_in_log_size():
    """Measured 1.5 at 1 KiB and 3.0 at 1 MiB: 2.25 at 32 KiB (half way in log size), the
    end values outside, never below 1."""
    comm = TwoState(IDLE, LOADED, compute=((1024.0, 1.5), (float(MiB), 3.0)))
    assert comm.compute_slowdown(32 * 1024) == pytest.approx(2.25)
    assert comm.compute_slowdown(10) == 1.5 and comm.compute_slowdown(64 * MiB) == 3.0
    assert TwoState(IDLE, LOADED, compute=((1.0, 0.5),)).compute_slowdown(MiB) == 1.0
    assert TwoState(IDLE, LOADED).compute_slowdown(MiB) == 1.0


@pytest.mark.parametrize(("compute", "field"), [
    ([{"bytes": 4096, "factor": 2}, {"bytes": 1024, "factor": 2}],
     "under_load.compute_slowdown"),
    ([{"bytes": 4096, "factor": "nan"}], "under_load.compute_slowdown[0].factor"),
    ([{"bytes": 4096, "factor": 0}], "under_load.compute_slowdown[0].factor"),
    ([{"bytes": -1, "factor": 2}], "under_load.compute_slowdown[0].bytes"),
])
def test_bad_compute_slowdown_exits_2_naming_the_field(run_cli, tmp_path, compute, field):
    """Unordered sizes, NaN or zero factors, negative sizes: exit 2 naming the field."""
    path = tmp_path / "net.json"
    path.write_text(json.dumps(GOOD | {"under_load": GOOD["under_load"]
                                       | {"compute_slowdown": compute}}))
    code, _, err = run_cli("dataparallel", "--model", "vgg16", "--network", str(path),
                           "--policy", "wfbp")
    assert code == 2
    assert field in err


def test_queued_message_uses_its_queued_slowdown_by_hand():
    """Two 0-latency 2 ms messages launched at 0 on one slot, loaded throughout, slowdown 3
    alone and 1.5 queued: the first (admitted at its launch) takes 6 ms, the second waited
    behind it and takes 1.5 x 2 = 3 ms: ends at 6 and 9 ms. Without a queued slowdown: 12 ms."""
    for queued, second in ((1.5, 9 * MS), (None, 12 * MS)):
        network = SharedNetwork(1)
        for index in range(2):
            network.submit(index, 0.0, 0.0, 2 * MS, 3.0, 1.0, queued)
        network.set_loaded(True)
        done = network.advance(float("inf"))
        assert [end for _, _, end in done] == pytest.approx([6 * MS, second])


def test_queued_message_on_idle_ranks_costs_its_idle_queued_factor_by_hand():
    """Two messages of 1 ms latency and 2 ms transfer launched at 0 on one slot, never
    loaded, queued-idle factor 1.5: the first (admitted at its launch) takes 3 ms, the
    second waited behind it and takes 1.5 x 3 = 4.5 ms: ends at 3 and 7.5 ms. Loaded
    throughout with queued slowdown 2, the second still takes 2 x 3 = 6 ms (ends at 3 x 3 + 6
    = 15 ms, slowdown 3 for the first). Without the factor: 6 ms."""
    for loaded, queued_idle, second in ((False, 1.5, 7.5 * MS), (False, 1.0, 6 * MS),
                                        (True, 1.5, 15 * MS)):
        network = SharedNetwork(1)
        for index in range(2):
            network.submit(index, 0.0, 1 * MS, 2 * MS, 3.0, 1.0, 2.0, 0.0, queued_idle)
        network.set_loaded(loaded)
        done = network.advance(float("inf"))
        first = 9 * MS if loaded else 3 * MS
        assert [end for _, _, end in done] == pytest.approx([first, second])


def test_top_level_stream_gives_the_idle_queued_factor(tmp_path):
    """A top-level stream block is the queue's cost per message on idle ranks:
    idle_queued_slowdown = stream / idle (150 us + 1 MB / 1 GB/s over 100 us + 1 MB / 1 GB/s
    = 1.15 / 1.1); 1 without it; refused without under_load, naming the field."""
    document = json.loads(json.dumps(GOOD))
    document["stream"] = {"model": "alpha-beta",
                          "alpha_beta": {"alpha": "150 us", "bandwidth": "1 GB/s"}}
    path = tmp_path / "net.json"
    path.write_text(json.dumps(document))
    comm = load_network_file(path)
    assert comm.idle_queued_slowdown(1e6) == pytest.approx(1.15 / 1.1)
    path.write_text(json.dumps(GOOD))
    assert load_network_file(path).idle_queued_slowdown(1e6) == 1.0
    del document["under_load"]
    path.write_text(json.dumps(document))
    with pytest.raises(ConfigError, match=r"stream .*give under_load too"):
        load_network_file(path)


def test_stream_block_gives_the_queued_slowdown(tmp_path):
    """under_load.stream is the loaded cost per queued message: queued_slowdown = stream /
    idle, not clamped (10 us + 1 MB / 2 GB/s over 100 us + 1 MB / 1 GB/s = 0.51 / 1.1);
    without it, the isolated loaded slowdown."""
    document = json.loads(json.dumps(GOOD))
    document["under_load"]["stream"] = {
        "model": "alpha-beta", "alpha_beta": {"alpha": "200 us", "bandwidth": "1 GB/s"}}
    path = tmp_path / "net.json"
    path.write_text(json.dumps(document))
    comm = load_network_file(path)
    assert comm.queued_slowdown(1e6) == pytest.approx((200e-6 + 1e-3) / (100e-6 + 1e-3))
    assert comm.slowdown(1e6) == pytest.approx((300e-6 + 2e-3) / (100e-6 + 1e-3))
    document["under_load"]["stream"]["alpha_beta"] = {"alpha": "10 us", "bandwidth": "2 GB/s"}
    path.write_text(json.dumps(document))
    assert load_network_file(path).queued_slowdown(1e6) == pytest.approx(0.51e-3 / 1.1e-3)
    path.write_text(json.dumps(GOOD))
    plain = load_network_file(path)
    assert plain.queued_slowdown(1e6) == plain.slowdown(1e6)
    document["under_load"]["stream"]["alpha_beta"] = {"alpha": "nan", "bandwidth": "2 GB/s"}
    path.write_text(json.dumps(document))
    with pytest.raises(ConfigError, match=r"under_load\.stream\.alpha_beta\.alpha"):
        load_network_file(path)
