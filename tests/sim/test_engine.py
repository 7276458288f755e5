"""The event engine: time order, deterministic ties, no scheduling in the past."""

import pytest

from dlsched.sim import Engine


def test_events_run_in_time_order_and_ties_in_schedule_order():
    """Equal times run in the order they were scheduled."""
    engine, seen = Engine(), []
    engine.at(2.0, seen.append, "late")
    engine.at(1.0, seen.append, "first-tie")
    engine.at(1.0, seen.append, "second-tie")
    engine.after(0.5, seen.append, "early")
    assert engine.run() == 2.0
    assert seen == ["early", "first-tie", "second-tie", "late"]
    assert engine.events_processed == 4


def test_callbacks_can_schedule_more_events():
    """A callback scheduling a follow-up advances time by its delay."""
    engine, seen = Engine(), []

    def tick(n: int) -> None:
        seen.append((engine.now, n))
        if n < 3:
            engine.after(1.5, tick, n + 1)

    engine.at(0.0, tick, 0)
    engine.run()
    assert seen == [(0.0, 0), (1.5, 1), (3.0, 2), (4.5, 3)]


def test_run_until_stops_before_later_events():
    """run(until) leaves later events in the queue and sets now to until."""
    engine, seen = Engine(), []
    engine.at(1.0, seen.append, 1)
    engine.at(5.0, seen.append, 5)
    assert engine.run(until=3.0) == 3.0
    assert seen == [1]
    engine.run()
    assert seen == [1, 5]


def test_past_events_are_refused():
    """Scheduling before now is an error, not a silent reorder."""
    engine = Engine()
    engine.at(1.0, lambda: engine.at(0.5, lambda: None))
    with pytest.raises(ValueError, match="past"):
        engine.run()


def test_run_until_past_the_last_event_moves_the_clock_there():
    """With no event left before ``until`` the clock still reaches it; next_time is the next
    event's time (inf when none)."""
    engine = Engine()
    engine.at(1.0, lambda: None)
    assert engine.next_time() == 1.0
    assert engine.run(until=2.5) == 2.5 and engine.now == 2.5
    assert engine.next_time() == float("inf")
    assert engine.run(until=float("inf")) == 2.5
