"""Hypothesis strategies shared by the pipeline walks' exactness tests (imported by name: the
test folder is on ``sys.path`` under pytest's default import mode)."""

from __future__ import annotations

from hypothesis import strategies as st


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
