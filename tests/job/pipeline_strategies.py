"""What the pipeline walks' exactness tests share: the stage seconds they draw and the check
that a fast walk equals the full one (imported by name: the test folder is on ``sys.path``
under pytest's default import mode)."""

from __future__ import annotations

import pytest
from hypothesis import strategies as st

from dlsched.job.evaluation.pipeline_walk import ReplicaTiming


@st.composite
def stage_seconds(draw: st.DrawFn, n: int) -> tuple[tuple[float, ...], ...]:
    """Forwards, backwards and sends (seconds) of ``n`` stages: equal middle stages or each its
    own, sends none, equal, each its own, or some none and some not (a stream used by one
    direction only)."""
    equal = draw(st.booleans())
    base = draw(st.floats(0.5, 1.5))
    forward = tuple(base if equal and 0 < s < n - 1 else draw(st.floats(0.5, 1.5))
                    for s in range(n))
    backward = tuple(f * draw(st.floats(1.8, 3.2)) for f in forward)
    kind = draw(st.sampled_from(["none", "equal", "each", "some"]))
    one = draw(st.floats(0.01, 0.8))
    send = tuple(0.0 if kind == "none" else one if kind == "equal" else
                 draw(st.sampled_from([0.0, one])) if kind == "some" else
                 draw(st.floats(0.0, 0.8)) for _ in range(n - 1))
    return forward, backward, send


def assert_same_timing(fast: ReplicaTiming, full: ReplicaTiming) -> None:
    """The end and every rank's last backward start and end equal to 1e-9 (floating-point
    rounding of the sums a fast walk adds at once)."""
    assert fast.end == pytest.approx(full.end, rel=1e-9, abs=1e-12)
    assert fast.last_backward_start == pytest.approx(full.last_backward_start, rel=1e-9,
                                                     abs=1e-12)
    assert fast.last_backward_end == pytest.approx(full.last_backward_end, rel=1e-9,
                                                   abs=1e-12)
