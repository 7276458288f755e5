"""Calibration that refuses implausible fits: queued streams timed from issue, spreads,
per-action overheads; with a faked clock and faked collectives (no process group)."""

from __future__ import annotations

import types

import pytest

from dlsched.errors import ConfigError
from dlsched.runtime import calibrate
from dlsched.runtime.calibrate import (
    STREAM_LENGTH,
    implausible,
    loads_document,
    spread,
    stream_seconds,
)

IDLE = 370e-6  # seconds of one idle all-reduce, as measured on the 2-core machine


class _FakeClock:
    """perf_counter / thread_time that move only when a faked all-reduce is waited for."""

    def __init__(self) -> None:
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now

    def thread_time(self) -> float:
        return 0.0


class _LateWork:
    """An all-reduce of a queue whose completions the stamping thread sees late: the first
    wait returns when every message of the queue has completed (each took ``IDLE`` seconds
    after the previous), the later ones at once."""

    def __init__(self, clock: _FakeClock, queue: list[_LateWork]) -> None:
        self.clock, self.queue = clock, queue
        queue.append(self)

    def wait(self) -> bool:
        if self is self.queue[0]:
            self.clock.now += IDLE * len(self.queue)
        return True


@pytest.fixture
def late_stamps(monkeypatch: pytest.MonkeyPatch) -> _FakeClock:
    """calibrate's clock and torch.distributed's collectives faked: a barrier does nothing,
    an async all-reduce joins the current queue (a new one after each barrier), a blocking
    one (the reduction over ranks) leaves its tensor as it is."""
    torch = pytest.importorskip("torch")
    dist = torch.distributed
    clock = _FakeClock()
    queues: list[list[_LateWork]] = [[]]

    def all_reduce(tensor: object, op: object = None, async_op: bool = False) -> object:
        return _LateWork(clock, queues[-1]) if async_op else None

    monkeypatch.setattr(calibrate, "time", types.SimpleNamespace(
        perf_counter=clock.perf_counter, thread_time=clock.thread_time))
    monkeypatch.setattr(dist, "barrier", lambda *a, **k: queues.append([]))
    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    return clock


def test_queued_stream_is_timed_from_issue_to_the_last_completion(late_stamps) -> None:
    """Eight queued all-reduces of 370 us each, stamped late (all at once): from issue to the
    last completion they cost 370 us per message, at least 0.5x idle. Between the first
    and the last completion (the method before) they cost 0, which was clamped to 1 ns."""
    result = calibrate.time_streams(0, 2, (4096, 65536), warmup=1, repeats=3)
    for size, samples in result:
        assert size in (4096, 65536) and len(samples) == 3
        assert samples == pytest.approx([IDLE] * 3)
        assert min(samples) >= 0.5 * IDLE


def test_stream_seconds_by_hand() -> None:
    """Issued at 10 s, completions at 10.002, 10.003, 10.004 s: (10.004 - 10) / 3."""
    assert stream_seconds(10.0, [10.002, 10.003, 10.004], 3) == pytest.approx(0.004 / 3)
    with pytest.raises(ConfigError, match="stream: 2 completions stamped for 3"):
        stream_seconds(10.0, [10.002, 10.003], 3)


def _timed(stream_s: float, idle_times: tuple[float, ...] = (IDLE,) * 5) -> dict:
    sizes = (4096, 65536)
    per_size = [(b, list(idle_times)) for b in sizes]
    return {"none": [(b, sorted(idle_times)[len(idle_times) // 2]) for b in sizes],
            "none_times": per_size, "compute": [(b, 2 * IDLE) for b in sizes],
            "compute_times": [(b, [2 * IDLE] * 5) for b in sizes],
            "stream": [(b, stream_s) for b in sizes],
            "stream_times": [(b, [stream_s] * 5) for b in sizes]}


def test_queued_message_faster_than_half_an_idle_one_is_refused() -> None:
    """Stream 1 us against 370 us idle (the issue's values): refused, naming the size and
    both times; at 0.5x idle exactly it passes."""
    reason = implausible(_timed(1e-6))
    assert reason == ("queued all-reduce of 4096 B: 1.0 us per message, below 0.5x its "
                      "idle time 370.0 us")
    assert implausible(_timed(0.5 * IDLE)) is None


def test_spread_over_a_quarter_of_the_median_is_refused() -> None:
    """Idle repeats 300, 370, 370, 370, 500 us: quartiles 370 and 370, spread 0 (passes);
    300, 330, 370, 450, 500: quartiles 330 and 450, spread 120 / 370 = 32% (refused)."""
    steady = (300e-6, 370e-6, 370e-6, 370e-6, 500e-6)
    assert spread(steady) == 0.0 and implausible(_timed(IDLE, steady)) is None
    noisy = (300e-6, 330e-6, 370e-6, 450e-6, 500e-6)
    assert spread(noisy) == pytest.approx(120 / 370)
    assert implausible(_timed(IDLE, noisy)) == (
        "idle all-reduce of 4096 B: repeats spread 32% of their median (limit 25%; the "
        "machine is too busy to calibrate)")


def test_time_loads_measures_again_then_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    """An implausible measurement is taken again; a plausible one after it is kept with the
    rejected reason recorded in the document; three implausible ones are refused, and the
    document is not written: ConfigError with the last reason."""
    measured = [_timed(1e-6), _timed(IDLE)]
    monkeypatch.setattr(calibrate, "warm_up", lambda sizes: None)
    monkeypatch.setattr(calibrate, "_measure_loads", lambda *args: measured.pop(0))
    timed = calibrate.time_loads(0, 2, (4096, 65536), 1, 5, "both")
    assert len(timed["rejected"]) == 1 and "refused" not in timed
    document = loads_document(timed, 2, "t", "gloo", "alpha-beta")
    assert document["measured_with"]["rejected"] == timed["rejected"]
    assert document["measured_with"]["largest_spread"] == {"idle": 0.0, "loaded": 0.0,
                                                           "queued": 0.0}
    monkeypatch.setattr(calibrate, "_measure_loads", lambda *args: _timed(1e-6))
    refused = calibrate.time_loads(0, 2, (4096, 65536), 1, 5, "both")
    assert len(refused["rejected"]) == calibrate.ATTEMPTS
    with pytest.raises(ConfigError, match=r"^calibration: refused after 3 measurements: "
                       r"queued all-reduce of 4096 B"):
        loads_document(refused, 2, "t", "gloo", "alpha-beta")
    assert STREAM_LENGTH == 8


@pytest.fixture
def pipeline_calibrate() -> types.ModuleType:
    """The pipeline calibration module (it needs torch)."""
    pytest.importorskip("torch")
    from dlsched.runtime import pipeline_calibrate

    return pipeline_calibrate


def test_overhead_by_hand(pipeline_calibrate) -> None:
    """8 microbatches (16 actions), six rounds of (fastest iteration, compute): fastest
    iteration 99 ms, fastest compute 10 ms: (99 - 80) / 16 = 1.1875 ms per action. Parts
    (rounds 0+3, 1+4, 2+5): (99 - 80) / 16, (103 - 81.6) / 16, (101 - 83.2) / 16 = 1.1875,
    1.3375, 1.1125 ms, spread 0.225 ms (under 25% of 1.1875 = 0.297 ms); mean action = median
    compute 10.3 ms / 2: plausible."""
    calibration = pipeline_calibrate.overhead_of(
        [(0.100, 0.010), (0.104, 0.0105), (0.101, 0.011), (0.099, 0.0101), (0.103, 0.0102),
         (0.102, 0.0104)], 8)
    assert calibration.overhead_s == pytest.approx(1.1875e-3)
    assert calibration.parts_s == pytest.approx((1.1875e-3, 1.3375e-3, 1.1125e-3))
    assert calibration.spread_s == pytest.approx(0.225e-3)
    assert calibration.action_s == pytest.approx(5.15e-3)
    assert pipeline_calibrate.implausible_overhead(calibration) is None


def test_implausible_overheads_are_refused(pipeline_calibrate) -> None:
    """An overhead larger than the action (iteration 400 ms: 20 ms per 5 ms action), a run
    faster than its blocks (70 ms: -0.625 ms), parts at 1.25, 3.25 and 2.25 ms (spread 2 ms
    around 1.25 ms); parts 0, 0.1 and 0.05 ms apart pass (within the 0.2 ms tolerance)."""
    def reason(samples: list[tuple[float, float]]) -> str | None:
        return pipeline_calibrate.implausible_overhead(
            pipeline_calibrate.overhead_of(samples, 8))

    assert reason([(0.400, 0.010)] * 3) == (
        "overhead 20.00 ms per action is larger than the mean action itself (5.00 ms)")
    assert "negative" in reason([(0.070, 0.010)] * 3)
    spread_rounds = [(0.100, 0.010), (0.132, 0.010), (0.116, 0.010)]
    assert pipeline_calibrate.overhead_of(spread_rounds, 8).spread_s == pytest.approx(2e-3)
    assert "overhead 1.25 ms per action, but its 3 parts give 1.25, 3.25, 2.25 ms (spread " \
        "2.00 ms" in reason(spread_rounds)
    assert reason([(0.080, 0.010), (0.0816, 0.010), (0.0808, 0.010)]) is None
    with pytest.raises(ConfigError, match="at least 3 rounds"):
        pipeline_calibrate.overhead_of([(0.1, 0.01)] * 2, 8)


def test_overhead_measured_again_then_refused(pipeline_calibrate,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """measure_action_overhead spawns again after an implausible measurement and keeps the
    reason; after three it raises ConfigError with the last one."""
    runs = [[(0.400, 0.010)] * 3, [(0.100, 0.010)] * 3]
    monkeypatch.setattr(pipeline_calibrate, "spawn", lambda *args: [runs.pop(0)])
    calibration = pipeline_calibrate.measure_action_overhead("gpt-tiny", 1, 8)
    assert calibration.overhead_s == pytest.approx(1.25e-3)
    assert len(calibration.rejected) == 1 and "larger than" in calibration.rejected[0]
    monkeypatch.setattr(pipeline_calibrate, "spawn", lambda *args: [[(0.070, 0.010)] * 3])
    with pytest.raises(ConfigError, match=r"refused after 3 measurements: overhead -0\.62"):
        pipeline_calibrate.measure_action_overhead("gpt-tiny", 1, 8)
