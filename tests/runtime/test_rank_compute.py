"""The multi-rank compute factor against the chain's profile, from stamped actions laid out
by hand, and the even GPipe cut it is measured on (torch-free)."""

from __future__ import annotations

import pytest

from dlsched.errors import ConfigError
from dlsched.pipeline.plans.plan import Stage
from dlsched.runtime.pipeline.rank_compute import even_stages, rank_compute_factor
from dlsched.sim import Span, Timeline


def _timeline(action_sums: list[float]) -> Timeline:
    """Per iteration, two ranks with one forward and one backward each, whose four durations
    (s) add up to the iteration's entry; a transfer span (not compute) on each rank beside."""
    spans = []
    for iteration, total in enumerate(action_sums):
        origin = 10.0 * iteration
        for rank in ("rank0", "rank1"):
            for kind, start, share in (("forward", 0.0, 0.2), ("backward", 1.0, 0.3)):
                spans.append(Span(rank, origin + start, origin + start + share * total, kind,
                                  "", args={"stage": 0, "microbatch": 0,
                                            "iteration": iteration}))
            spans.append(Span(rank, origin + 5.0, origin + 9.0, "transfer", "",
                              args={"iteration": iteration}))
    return Timeline(spans)


def test_factor_by_hand() -> None:
    """4 microbatches, profile 0.5 s per microbatch: 2 s of profiled compute. Iterations whose
    actions sum to 1.6, 1.5, 2.4, 1.7, 1.4, 1.5 s give factors 0.8, 0.75, 1.2, 0.85, 0.7, 0.75:
    median 0.775; the parts (iterations 0 and 3, 1 and 4, 2 and 5) 0.825, 0.725, 0.975. The
    transfer spans count for nothing."""
    factor, parts = rank_compute_factor(_timeline([1.6, 1.5, 2.4, 1.7, 1.4, 1.5]), 4, 0.5)
    assert factor == pytest.approx(0.775)
    assert parts == pytest.approx((0.825, 0.725, 0.975))


def test_factor_needs_iterations_and_a_profile() -> None:
    """Fewer than 3 iterations or a profile of 0 s is an error naming what is missing."""
    with pytest.raises(ConfigError, match="2 measured iterations, need at least 3"):
        rank_compute_factor(_timeline([1.0, 1.0]), 4, 0.5)
    with pytest.raises(ConfigError, match=r"profiled compute 0\.0 s"):
        rank_compute_factor(_timeline([1.0] * 3), 4, 0.0)


def test_even_stages() -> None:
    """10 blocks on 4 ranks: 2, 3, 2, 3 consecutive blocks, one rank each; more ranks than
    blocks is refused."""
    assert even_stages(10, 4) == (Stage(0, 2, (0,)), Stage(2, 5, (1,)), Stage(5, 7, (2,)),
                                  Stage(7, 10, (3,)))
    assert even_stages(3, 1) == (Stage(0, 3, (0,)),)
    with pytest.raises(ConfigError, match=r"ranks: 11 must be in 1\.\.10"):
        even_stages(10, 11)
