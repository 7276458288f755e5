"""Timeline queries: busy time as a union, lanes never overlapping."""

from dlsched.sim import Span, Timeline


def _timeline() -> Timeline:
    return Timeline([
        Span("net", 0.0, 2.0, "RS", "a", 10), Span("net", 1.0, 3.0, "RS", "b", 20),
        Span("net", 5.0, 6.0, "AG", "c", 5), Span("gpu", 0.0, 6.0, "F", "d"),
    ])


def test_busy_time_counts_overlaps_once():
    """Overlapping spans count once: [0,3] and [5,6] make 4 s."""
    timeline = _timeline()
    assert timeline.busy_time("net") == 4.0
    assert timeline.makespan == 6.0
    assert timeline.busy_fraction("net") == 4.0 / 6.0


def test_bytes_by_resource():
    """Bytes add up per resource."""
    assert _timeline().bytes_by_resource() == {"net": 35, "gpu": 0}


def test_lanes_separate_overlapping_spans():
    """Overlapping spans on one resource get different lanes; a later span reuses lane 0."""
    timeline = _timeline()
    lanes = timeline.lanes()
    assert lanes == [0, 1, 0, 0]
    for i, a in enumerate(timeline.spans):
        for j, b in enumerate(timeline.spans):
            if i < j and a.resource == b.resource and lanes[i] == lanes[j]:
                assert a.end <= b.start or b.end <= a.start
