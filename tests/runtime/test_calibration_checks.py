"""Calibration that refuses implausible fits: queued streams timed from issue, spreads,
per-action overheads; with a faked clock and faked collectives (no process group)."""

from __future__ import annotations

import types

import pytest

from dlsched.errors import ConfigError
from dlsched.runtime.dataparallel import calibrate, calibration_checks
from dlsched.runtime.dataparallel.calibrate import STREAM_LENGTH, loads_document, stream_seconds
from dlsched.runtime.dataparallel.calibration_checks import (
    implausible,
    spread,
    standard_error,
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
    last completion they cost 370 us per message, at least 0.5x idle, with the rank computing
    or only waiting. Between the first
    and the last completion (the method before) they cost 0, which was clamped to 1 ns."""
    for computing in (True, False):
        result = calibrate.time_streams(0, 2, (4096, 65536), warmup=1, repeats=3,
                                        computing=computing)
        for size, samples in result:
            assert size in (4096, 65536) and len(samples) == 3
            assert samples == pytest.approx([IDLE] * 3)
            assert min(samples) >= 0.5 * IDLE


def test_stream_seconds_by_hand() -> None:
    """Issued at 10 s, completions at 10.002, 10.003, 10.004 s: (10.004 - 10) / 3."""
    assert stream_seconds(10.0, [10.002, 10.003, 10.004], 3) == pytest.approx(0.004 / 3)
    with pytest.raises(ConfigError, match="stream: 2 completions stamped for 3"):
        stream_seconds(10.0, [10.002, 10.003], 3)


def _timed(stream_s: float, idle_times: tuple[float, ...] = (IDLE,) * 5,
           sizes: tuple[int, ...] = (4096, 65536),
           idle: dict[int, tuple[float, ...]] | None = None) -> dict:
    """A measurement of ``sizes``: idle repeats ``idle[size]`` (default ``idle_times``),
    loaded 2x idle, queued ``stream_s`` per message."""
    per_size = [(b, list((idle or {}).get(b, idle_times))) for b in sizes]
    return {"none": [(b, sum(t) / len(t)) for b, t in per_size],
            "none_times": per_size, "compute": [(b, 2 * IDLE) for b in sizes],
            "compute_times": [(b, [2 * IDLE] * 5) for b in sizes],
            "stream": [(b, stream_s) for b in sizes],
            "stream_times": [(b, [stream_s] * 5) for b in sizes]}


def test_queued_message_faster_than_half_an_idle_one_is_refused() -> None:
    """Stream 1 us against 370 us idle (the issue's values): refused, naming the size and
    both times; at 0.5x idle exactly it passes. The same for a stream on idle ranks (100 us
    refused, 185 us passes)."""
    reason = implausible(_timed(1e-6))
    assert reason == ("queued all-reduce of 4096 B under load: 1.0 us per message, below "
                      "0.5x its idle time 370.0 us (lower quartile of the idle repeats)")
    assert implausible(_timed(0.5 * IDLE)) is None
    sizes = (4096, 65536)
    idle_queue = {"idle_stream": [(b, 100e-6) for b in sizes],
                  "idle_stream_times": [(b, [100e-6] * 5) for b in sizes]}
    assert implausible(_timed(IDLE) | idle_queue) == (
        "queued all-reduce of 4096 B on idle ranks: 100.0 us per message, below 0.5x its idle "
        "time 370.0 us (lower quartile of the idle repeats)")
    idle_queue = {"idle_stream": [(b, 185e-6) for b in sizes],
                  "idle_stream_times": [(b, [185e-6] * 5) for b in sizes]}
    assert implausible(_timed(IDLE) | idle_queue) is None


def test_queued_message_is_judged_against_an_idle_one_that_waited_for_nothing() -> None:
    """Idle repeats in two clusters as on the 2-core VM, 500 us and 3500 us, 2 of 3 in the
    fast one: mean 1500 us, lower quartile 500 us (inclusive quartiles of 500, 500, 500, 500,
    3500, 3500: position 1.25 of 0..5, 500 us). A queue of 732 us per message (the VM's
    refused run of 10:42) is 0.49x the mean but 1.46x the lower quartile: kept; 240 us (below
    250 us) is refused, naming the quartile."""
    clusters = (500e-6,) * 4 + (3500e-6,) * 2
    sizes = (4096, 65536)
    assert calibration_checks.fast_idle(_timed(IDLE, clusters)) == {
        4096: pytest.approx(500e-6), 65536: pytest.approx(500e-6)}
    queue = {"idle_stream": [(b, 732e-6) for b in sizes],
             "idle_stream_times": [(b, [732e-6] * 5) for b in sizes]}
    assert calibration_checks.impossible(_timed(732e-6, clusters) | queue) is None
    queue = {"idle_stream": [(b, 240e-6) for b in sizes],
             "idle_stream_times": [(b, [240e-6] * 5) for b in sizes]}
    assert calibration_checks.impossible(_timed(732e-6, clusters) | queue) == (
        "queued all-reduce of 4096 B on idle ranks: 240.0 us per message, below 0.5x its idle "
        "time 500.0 us (lower quartile of the idle repeats)")


def test_mean_that_is_uncertain_is_refused() -> None:
    """Repeats 300 and 440 us alternating, 16 of them: mean 370 us, sample standard deviation
    70 * sqrt(16/15) = 72.3 us, standard error 72.3 / 4 = 18.07 us = 4.9% of the mean (holds);
    repeats 100 and 1000 us alternating, 4 of them: mean 550 us, deviation 519.6 us, standard
    error 259.8 us = 47% (refused, naming the size, the repeats and the limit); the same
    repeats at a hundredth (standard error 2.6 us, under the 20 us tolerance) hold."""
    steady = (300e-6, 440e-6) * 8
    assert standard_error(steady) == pytest.approx(70 * (16 / 15) ** 0.5 / 4 / 370)
    assert implausible(_timed(IDLE, steady)) is None
    bimodal = (100e-6, 1000e-6) * 2
    assert standard_error(bimodal) == pytest.approx(259.8 / 550, rel=1e-4)
    assert implausible(_timed(IDLE, bimodal)) == (
        "idle all-reduce of 4096 B: the mean of its 4 repeats is uncertain by 47% (standard "
        "error; limit 15% or 20 us; the machine is too busy to calibrate)")
    small = tuple(t / 100 for t in bimodal)
    assert implausible(_timed(IDLE / 100, small)) is None
    assert standard_error((IDLE,)) == 0.0


def test_spread_by_hand() -> None:
    """Interquartile range over median: repeats 200-900 us with quartiles 200 and 380 us and
    median 370 us spread 180 / 370."""
    scattered = (200e-6, 370e-6, 380e-6, 370e-6, 900e-6, 380e-6, 900e-6, 200e-6, 200e-6)
    assert spread(scattered) == pytest.approx(180 / 370)


def test_time_loads_measures_again_then_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    """An implausible measurement is taken again; a plausible one after it is kept with the
    rejected reason recorded in the document; ``ATTEMPTS`` implausible ones are refused, and
    the document is not written: ConfigError with the last reason."""
    measured = [_timed(1e-6), _timed(IDLE)]
    monkeypatch.setattr(calibrate, "warm_up", lambda sizes: None)
    monkeypatch.setattr(calibrate, "_measure_loads", lambda *args: measured.pop(0))
    timed = calibrate.time_loads(0, 2, (4096, 65536), 1, 5, "both")
    assert len(timed["rejected"]) == 1 and "refused" not in timed
    document = loads_document(timed, 2, "t", "gloo", "alpha-beta")
    assert document["measured_with"]["rejected"] == timed["rejected"]
    assert document["measured_with"]["largest_spread"] == {"idle": 0.0, "loaded": 0.0,
                                                           "queued": 0.0}
    assert document["measured_with"]["largest_standard_error"] == {
        "idle": 0.0, "loaded": 0.0, "queued": 0.0}
    monkeypatch.setattr(calibrate, "_measure_loads", lambda *args: _timed(1e-6))
    refused = calibrate.time_loads(0, 2, (4096, 65536), 1, 5, "both", attempts=3)
    assert len(refused["rejected"]) == 3
    with pytest.raises(ConfigError, match=r"^calibration: refused after 3 measurements: "
                       r"queued all-reduce of 4096 B"):
        loads_document(refused, 2, "t", "gloo", "alpha-beta")
    assert STREAM_LENGTH == 8


def test_uncertain_sizes_are_measured_again_and_pooled(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    """4 KiB idle repeats 100, 1000, 100, 1000 us (mean 550, standard error 47%: refused),
    64 KiB steady at 370 us: only 4 KiB is measured again. A measurement with an impossible
    queued stream in between is discarded, not pooled; then 16 repeats of 550 us pooled with
    the first 4: mean 550 us, deviation sqrt(4 x 450^2 / 19) = 206.5 us, standard error
    206.5 / sqrt(20) = 8.4% (holds). 64 KiB keeps its 5 repeats."""
    bimodal = (100e-6, 1000e-6) * 2
    measured = [_timed(IDLE, idle={4096: bimodal}), _timed(1e-6, sizes=(4096,)),
                _timed(IDLE, (550e-6,) * 16, sizes=(4096,))]
    asked: list[list[int]] = []

    def measure(rank: int, world: int, sizes: list[int], *rest: object) -> dict:
        asked.append(list(sizes))
        return measured.pop(0)

    monkeypatch.setattr(calibrate, "warm_up", lambda sizes: None)
    monkeypatch.setattr(calibrate, "_measure_loads", measure)
    timed = calibrate.time_loads(0, 2, (4096, 65536), 1, 5, "both")
    assert asked == [[4096, 65536], [4096], [4096]]
    assert "refused" not in timed and len(timed["rejected"]) == 2
    assert "the mean of its 4 repeats is uncertain by 47%" in timed["rejected"][0]
    assert timed["rejected"][1].startswith("queued all-reduce of 4096 B under load: 1.0 us")
    assert [len(samples) for _, samples in timed["none_times"]] == [20, 5]
    assert timed["none"] == [(4096, pytest.approx(550e-6)), (65536, pytest.approx(IDLE))]
    assert standard_error(timed["none_times"][0][1]) == pytest.approx(
        (4 * 450**2 / 19) ** 0.5 / 20**0.5 / 550)
    assert [len(samples) for _, samples in timed["stream_times"]] == [10, 5]


@pytest.fixture
def pipeline_calibrate() -> types.ModuleType:
    """The pipeline calibration module (it needs torch)."""
    pytest.importorskip("torch")
    from dlsched.runtime.pipeline import calibrate as pipeline_calibrate

    return pipeline_calibrate


def test_runtime_calibration_by_hand(pipeline_calibrate) -> None:
    """8 microbatches (16 actions), six rounds of (fastest iteration, its action sum, the
    profile right after): per round action sum / (8 x profile) = 88/80, 90/84, 92/88,
    88/80.8, 90/81.6, 92/83.2, median (88/80.8 + 88/80) / 2 = 1.0945545; the time between
    actions (iteration - actions) / 16 per round is 1.0, 1.0625, 1.125, 0.9375, 1.0, 1.0 ms:
    median 1.0 ms. Parts (rounds 0+3, 1+4, 2+5): factors (88/80 + 88/80.8) / 2,
    (90/84 + 90/81.6) / 2, (92/88 + 92/83.2) / 2 and overheads 0.96875, 1.03125, 1.0625 ms;
    mean action = median profile 10.3 ms / 2."""
    calibration = pipeline_calibrate.calibration_of(
        [(0.104, 0.088, 0.010), (0.107, 0.090, 0.0105), (0.110, 0.092, 0.011),
         (0.103, 0.088, 0.0101), (0.106, 0.090, 0.0102), (0.108, 0.092, 0.0104)], 8)
    assert calibration.compute_factor == pytest.approx((88 / 80.8 + 88 / 80) / 2)
    assert calibration.overhead_s == pytest.approx(1.0e-3)
    parts = [(88 / 80 + 88 / 80.8) / 2, (90 / 84 + 90 / 81.6) / 2, (92 / 88 + 92 / 83.2) / 2]
    assert [value for part in calibration.parts for value in part] == pytest.approx(
        [parts[0], 0.96875e-3, parts[1], 1.03125e-3, parts[2], 1.0625e-3])
    assert calibration.action_s == pytest.approx(5.15e-3)
    factor_spread, overhead_spread = calibration.spreads_s()
    assert factor_spread == pytest.approx((max(parts) - min(parts)) * 5.15e-3)
    assert overhead_spread == pytest.approx(0.09375e-3)
    assert pipeline_calibrate.implausible_calibration(calibration) is None


def test_implausible_calibrations_are_refused(pipeline_calibrate) -> None:
    """Refused: actions 20% faster than the profile (factor 0.8, 1 ms per 5 ms action, parts
    alike), an overhead larger than the action (20 ms between 5 ms actions), parts whose
    overheads are 1, 3 and 2 ms (spread 2 ms: 29% of a predicted action of 5 + 2 ms).
    Passes: overheads 0.1 ms apart (within the 0.2 ms tolerance); overheads 1, 1.5 and
    1.25 ms (40% of the overhead, but 8% of a 6.25 ms action); factors 1.1, 1.6 and 1.3
    (the one-rank factor plans nothing); factors 0.9, 1.1 and 0.96 (below 1 by 0.2 ms per
    action, within their 1 ms spread)."""
    def reason(samples: list[tuple[float, float, float]]) -> str | None:
        return pipeline_calibrate.implausible_calibration(
            pipeline_calibrate.calibration_of(samples, 8))

    assert reason([(0.070, 0.064, 0.010)] * 3) == (
        "compute factor 0.800: the runtime's actions were faster than its profiled blocks")
    assert reason([(0.400, 0.080, 0.010)] * 3) == (
        "overhead 20.00 ms per action is larger than the mean action itself (5.00 ms)")
    assert reason([(0.096, 0.080, 0.010), (0.128, 0.080, 0.010), (0.112, 0.080, 0.010)]) == (
        "overhead 2.00 ms per action, but its 3 parts give 1.00, 3.00, 2.00 ms: 29% of a "
        "predicted action of 7.00 ms (limit 15% or 0.2 ms)")
    assert reason([(0.096, 0.080, 0.010), (0.0976, 0.080, 0.010),
                   (0.0968, 0.080, 0.010)]) is None
    assert reason([(0.096, 0.080, 0.010), (0.104, 0.080, 0.010),
                   (0.100, 0.080, 0.010)]) is None
    assert reason([(0.098, 0.088, 0.010), (0.138, 0.128, 0.010), (0.114, 0.104, 0.010)]) is None
    assert reason([(0.082, 0.072, 0.010), (0.098, 0.088, 0.010),
                   (0.0868, 0.0768, 0.010)]) is None
    with pytest.raises(ConfigError, match="at least 3 rounds"):
        pipeline_calibrate.calibration_of([(0.1, 0.08, 0.01)] * 2, 8)


def test_runtime_measured_longer_then_refused(pipeline_calibrate,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """measure_runtime measures more rounds after an implausible measurement and pools them
    with the earlier ones, keeping the reason: 3 rounds 20 ms apart between 5 ms actions,
    then 6 of 1 ms: the median of the 9 is 1 ms (each part: one slow round of three). A
    machine whose every round says factor 0.8 is refused after three, saying what to do."""
    runs = [[(0.400, 0.080, 0.010)] * 3, [(0.096, 0.080, 0.010)] * 6]
    monkeypatch.setattr(pipeline_calibrate, "spawn", lambda *args: [runs.pop(0)])
    calibration = pipeline_calibrate.measure_runtime("gpt-tiny", 1, 8)
    assert calibration.overhead_s == pytest.approx(1e-3)
    assert [value for part in calibration.parts for value in part] == pytest.approx(
        [1.0, 1e-3] * 3)
    assert calibration.compute_factor == pytest.approx(1.0)
    assert len(calibration.rejected) == 1 and "larger than" in calibration.rejected[0]
    monkeypatch.setattr(pipeline_calibrate, "spawn",
                        lambda *args: [[(0.070, 0.064, 0.010)] * 3])
    with pytest.raises(ConfigError, match=r"refused after 3 measurements: compute factor 0\.8"
                       r".*; the machine's load changed too much while measuring: stop other "
                       r"work on it and run again"):
        pipeline_calibrate.measure_runtime("gpt-tiny", 1, 8)


@pytest.mark.parametrize(("factor", "parts", "transfer", "reason"), [
    (0.8, (0.78, 0.80, 0.84), (0.1e-3,) * 3, None),
    (1.0, (0.90, 1.00, 1.04), (0.1e-3,) * 3, None),
    (0.8, (0.70, 0.80, 0.90), (0.1e-3,) * 3, "its 3 parts give 0.700, 0.800, 0.900"),
    (1.2, (1.2,) * 3, (-0.5e-3,) * 3, "transfer overhead -0.50 ms is negative"),
])
def test_rank_fit_plausibility(pipeline_calibrate: types.ModuleType, factor: float,
                               parts: tuple, transfer: tuple, reason: str | None) -> None:
    """A multi-rank fit is refused when its factor's parts spread more than 15% of it (0.20
    around 0.8; 0.06 around 0.8 and 0.14 around 1.0 pass) or its transfer overhead is
    implausible."""
    fit = pipeline_calibrate.RankFit(factor, parts, transfer[0], transfer, 5e-3)
    found = pipeline_calibrate.implausible_ranks(fit)
    assert (found is None) if reason is None else (reason in found)


@pytest.mark.parametrize(("cost", "parts", "action", "reason"), [
    (0.3e-3, (0.25e-3, 0.3e-3, 0.35e-3), 5e-3, None),
    (1e-3, (0.5e-3, 1e-3, 1.5e-3), 5e-3, "its 3 parts give 0.50, 1.00, 1.50 ms: up to 2 x "
     "1.00 ms on a predicted action of 5.00 ms"),
    (1e-3, (0.5e-3, 1e-3, 1.5e-3), 20e-3, None),
    (-0.5e-3, (-0.5e-3,) * 3, 5e-3, "transfer overhead -0.50 ms is negative"),
    (-0.1e-3, (-0.1e-3, 0.0, 0.05e-3), 5e-3, None),
    (0.3e-3, (0.2e-3, 0.3e-3, 0.35e-3), 0.0, "(limit 15% or 0.2 ms)"),
])
def test_transfer_overhead_plausibility(pipeline_calibrate: types.ModuleType, cost: float,
                                        parts: tuple, action: float, reason: str | None
                                        ) -> None:
    """A transfer overhead is refused when below -0.2 ms or when its parts' spread, twice
    (an action's input and output), exceeds 15% of the predicted action and 0.2 ms: 1 ms
    apart around 5 ms actions is refused, around 20 ms actions not; 0.15 ms apart passes
    around 5 ms actions and is refused with no action known (2 x 0.15 > 0.2 ms)."""
    found = pipeline_calibrate.implausible_transfer(cost, parts, action)
    assert (found is None) if reason is None else (reason in found)


@pytest.mark.parametrize(("before", "during", "reason"), [
    (1.00, 1.09, None),
    (0.96, 0.87, None),
    (1.42, 0.97, "compute factor 1.420 at calibration but 0.970 during the plans (-32%"),
    (1.00, 1.11, "(+11%, limit 10%"),
])
def test_compute_drift(pipeline_calibrate: types.ModuleType, before: float, during: float,
                       reason: str | None) -> None:
    """The calibration workload measured again among the plans must give a factor within 10%
    of the one the plans were made with (0.87 / 0.96 = -9.4% passes; 1.42 then 0.97, as on
    the 16-core machine's second lease, is refused)."""
    found = pipeline_calibrate.compute_drift(before, during)
    assert (found is None) if reason is None else (reason in found)
