"""Shared links (sim.links): processor sharing, max-min fair rates with caps, FIFO streams and
k transfers in flight, each against hand-computed finish times."""

from __future__ import annotations

import pytest

from dlsched.sim import Engine
from dlsched.sim.links import SharedLinks


def _finish_times(sends: list[tuple], capacity: dict, in_flight: int | None = None,
                  processor_sharing: bool = False) -> list[float]:
    """Each send: (start s, bytes, resources, cap B/s, stream)."""
    engine = Engine()
    links = SharedLinks(engine, capacity, in_flight, processor_sharing)
    done = [0.0] * len(sends)
    for index, (at, num_bytes, resources, cap, stream) in enumerate(sends):
        engine.at(at, links.send, num_bytes, resources, lambda i=index: done.__setitem__(
            i, engine.now), cap, stream)
    engine.run()
    return done


def _one_link(starts: list[tuple[float, float]], bandwidth: float, **kwargs) -> list[float]:
    inf = float("inf")
    return _finish_times([(at, size, ("l",), inf, None) for at, size in starts],
                         {"l": bandwidth}, **kwargs)


@pytest.mark.parametrize("equal", [True, False])
def test_single_transfer_takes_bytes_over_bandwidth(equal):
    assert _one_link([(0.0, 100.0)], 10.0, processor_sharing=equal) == [pytest.approx(10.0)]


@pytest.mark.parametrize("equal", [True, False])
def test_two_equal_transfers_share_then_finish_together(equal):
    assert _one_link([(0.0, 100.0), (0.0, 100.0)], 10.0, processor_sharing=equal) == \
        [pytest.approx(20.0)] * 2


@pytest.mark.parametrize("equal", [True, False])
def test_late_joiner_slows_the_first(equal):
    """A=100 B at t=0, B=50 B at t=5, 10 B/s. A alone sends 50 B by t=5; then both at 5 B/s:
    B finishes at t=15 (50 B), A has 0 B left at t=15 too."""
    assert _one_link([(0.0, 100.0), (5.0, 50.0)], 10.0, processor_sharing=equal) == \
        [pytest.approx(15.0)] * 2


@pytest.mark.parametrize("equal", [True, False])
def test_short_transfer_leaves_and_long_one_speeds_up(equal):
    """A=100 B, B=20 B at t=0, 10 B/s. Shared 5 B/s until B ends at t=4 (A sent 20 B); A's
    80 B then take 8 s at full rate: t=12."""
    a, b = _one_link([(0.0, 100.0), (0.0, 20.0)], 10.0, processor_sharing=equal)
    assert b == pytest.approx(4.0)
    assert a == pytest.approx(12.0)


def test_cap_binds_alone_and_leaves_the_rest_to_others():
    """Link of 10 B/s; A capped at 2 B/s (40 B), B uncapped (80 B). Max-min: A 2, B 8 B/s:
    B ends at t=10, A at t=20."""
    a, b = _finish_times([(0.0, 40.0, ("l",), 2.0, None), (0.0, 80.0, ("l",), 1e9, None)],
                         {"l": 10.0})
    assert (a, b) == (pytest.approx(20.0), pytest.approx(10.0))


def test_max_min_over_two_resources():
    """x (10 B/s) and y (4 B/s); A on x and y, B on x only, C on y only, 24 B each. Filling:
    y binds first at 2 B/s for A and C; B takes x's remaining 8 B/s -> B ends at t=3. Then A
    and C share y: 2 B/s each until t=12 (A and C sent 6 B by t=3, 18 B left at 2 B/s)."""
    inf = float("inf")
    a, b, c = _finish_times([(0.0, 24.0, ("x", "y"), inf, None), (0.0, 24.0, ("x",), inf, None),
                             (0.0, 24.0, ("y",), inf, None)], {"x": 10.0, "y": 4.0})
    assert b == pytest.approx(3.0)
    assert (a, c) == (pytest.approx(12.0), pytest.approx(12.0))


def test_fifo_stream_moves_one_transfer_at_a_time_in_order():
    """Stream s, in flight 1, link 10 B/s: 50 B then 30 B -> t=5 and t=8; another stream's
    20 B sent at t=0 shares the link with the first: both at 5 B/s, the 20 B end at t=4, the
    50 B have 30 B left at 10 B/s -> t=7; the 30 B then take 3 s -> t=10."""
    inf = float("inf")
    assert _finish_times([(0.0, 50.0, ("l",), inf, "s"), (0.0, 30.0, ("l",), inf, "s")],
                         {"l": 10.0}, in_flight=1) == [pytest.approx(5.0), pytest.approx(8.0)]
    first, second, other = _finish_times(
        [(0.0, 50.0, ("l",), inf, "s"), (0.0, 30.0, ("l",), inf, "s"),
         (0.0, 20.0, ("l",), inf, "t")], {"l": 10.0}, in_flight=1)
    assert (other, first, second) == (pytest.approx(4.0), pytest.approx(7.0),
                                      pytest.approx(10.0))


def test_k_in_flight_per_stream():
    """In flight 2 on one stream, 10 B/s, three 10 B transfers at t=0: two share (5 B/s)
    and end at t=2, the third then runs alone: t=3. Unlimited: all three end at t=3."""
    inf = float("inf")
    sends = [(0.0, 10.0, ("l",), inf, "s")] * 3
    assert _finish_times(sends, {"l": 10.0}, in_flight=2) == [
        pytest.approx(2.0), pytest.approx(2.0), pytest.approx(3.0)]
    assert _finish_times(sends, {"l": 10.0}) == [pytest.approx(3.0)] * 3


def test_bytes_are_conserved_on_a_busy_link():
    """Whatever the arrivals, a link that is never idle ends its last transfer at total bytes
    / bandwidth."""
    starts = [(0.0, 30.0), (1.0, 5.0), (2.5, 12.0), (2.5, 40.0), (8.0, 1.0)]
    assert max(_one_link(starts, 10.0)) == pytest.approx(88.0 / 10.0)


def test_slowed_transfer_keeps_its_share_and_leaves_the_rest_unused():
    """Processor sharing, 1 B/s, two 2 B transfers, slowdown 1 and 3, slowed throughout: the
    fast one moves 1/2 B/s, the slow one 1/6 B/s; the fast ends at t=4 (the slow sent 2/3 B),
    then the slow one alone moves 1/3 B/s: 4/3 B more take 4 s -> t=8."""
    engine = Engine()
    links = SharedLinks(engine, {"l": 1.0}, processor_sharing=True)
    links.set_slowed(True)
    done = []
    for slowdown in (1.0, 3.0):
        links.send(2.0, ("l",), lambda: done.append(engine.now), slowdown=slowdown)
    engine.run()
    assert done == [pytest.approx(4.0), pytest.approx(8.0)]


def test_processor_sharing_refuses_two_resources_or_a_cap():
    links = SharedLinks(Engine(), {"a": 1.0, "b": 1.0}, processor_sharing=True)
    with pytest.raises(ValueError, match="one resource"):
        links.send(1.0, ("a", "b"), lambda: None)
    with pytest.raises(ValueError, match="one resource"):
        links.send(1.0, ("a",), lambda: None, cap=0.5)


def test_in_flight_below_one_is_refused():
    with pytest.raises(ValueError, match="in_flight"):
        SharedLinks(Engine(), {}, 0)
