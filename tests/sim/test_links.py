"""Processor sharing: concurrent transfers split the bandwidth equally."""

import pytest

from dlsched.sim import Engine, SharedChannel


def _finish_times(starts: list[tuple[float, float]], bandwidth: float) -> list[float]:
    engine = Engine()
    channel = SharedChannel(engine, bandwidth)
    done = [0.0] * len(starts)

    def begin(index: int, num_bytes: float) -> None:
        channel.start(num_bytes, lambda: done.__setitem__(index, engine.now))

    for index, (at, num_bytes) in enumerate(starts):
        engine.at(at, begin, index, num_bytes)
    engine.run()
    return done


def test_single_transfer_takes_bytes_over_bandwidth():
    """Alone, a transfer runs at full bandwidth."""
    assert _finish_times([(0.0, 100.0)], 10.0) == [pytest.approx(10.0)]


def test_two_equal_transfers_share_then_finish_together():
    """Two equal transfers started together each get half the bandwidth."""
    assert _finish_times([(0.0, 100.0), (0.0, 100.0)], 10.0) == [pytest.approx(20.0)] * 2


def test_late_joiner_slows_the_first():
    """Hand computed: A=100 B at t=0, B=50 B at t=5, 10 B/s. A alone sends 50 B by t=5; then
    both at 5 B/s: B finishes at t=15 (50 B), A has 0 B left at t=15 too."""
    assert _finish_times([(0.0, 100.0), (5.0, 50.0)], 10.0) == [pytest.approx(15.0)] * 2


def test_short_transfer_leaves_and_long_one_speeds_up():
    """Hand computed: A=100 B, B=20 B at t=0, 10 B/s. Shared 5 B/s until B ends at t=4
    (A sent 20 B); A's 80 B then take 8 s at full rate: t=12."""
    a, b = _finish_times([(0.0, 100.0), (0.0, 20.0)], 10.0)
    assert b == pytest.approx(4.0)
    assert a == pytest.approx(12.0)
