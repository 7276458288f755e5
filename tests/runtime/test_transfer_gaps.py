"""The host time per transfer of CPU pipeline ranks, from stamped actions laid out by hand:
which gaps between actions waited for an input, how many transfers each holds, and the
median cost per transfer over the wait-free ones (torch-free)."""

from __future__ import annotations

import pytest

from dlsched.errors import ConfigError
from dlsched.pipeline.plans.actions import Action
from dlsched.pipeline.plans.plan import Stage
from dlsched.pipeline.simulation.sim_result import KIND_NAMES
from dlsched.runtime.pipeline.transfer_gaps import gap_transfers, transfer_cost, wait_free_gaps
from dlsched.sim import Span, Timeline

STAGES = (Stage(0, 1, (0,)), Stage(1, 2, (1,)))
NAMES = ("rank0", "rank1")
LINK_S = 0.05
# GPipe over 2 microbatches, overhead 0.1 s per action, 0.2 s per transfer. rank1's first
# forward is slow, so its second finds its input waiting (wait-free, one receive); rank0's
# backwards wait for rank1's gradients (not wait-free).
LAYOUT = {
    "rank0": [("0F0", 0.0, 1.0), ("0F1", 1.3, 2.3), ("0B1", 6.8, 7.8), ("0B0", 8.1, 9.1)],
    "rank1": [("1F0", 1.1, 3.1), ("1F1", 3.4, 5.4), ("1B1", 5.5, 6.5), ("1B0", 6.8, 7.8)],
}


def _timeline(iterations: int, waits: bool = False) -> Timeline:
    spans = []
    for iteration in range(iterations):
        for rank, row in LAYOUT.items():
            for label, start, end in row:
                action = Action.parse(label)
                if waits and rank == "rank1" and label == "1F0":
                    end = 2.0  # rank1 waits for every input
                spans.append(Span(rank, start + 10 * iteration, end + 10 * iteration,
                                  KIND_NAMES[action.kind], label, group=rank,
                                  args={"stage": action.stage, "microbatch": action.microbatch,
                                        "iteration": iteration}))
    return Timeline(spans)


def test_gap_transfers_by_hand() -> None:
    """A first stage's F sends (1); the last stage's F sends nothing and its B receives
    nothing (0); its B sends a gradient (1); an F after a first-stage F receives nothing."""
    assert gap_transfers(STAGES, Action(0, "F", 0), Action(0, "F", 1), 0) == 1
    assert gap_transfers(STAGES, Action(1, "F", 1), Action(1, "B", 1), 1) == 0
    assert gap_transfers(STAGES, Action(1, "B", 1), Action(1, "B", 0), 1) == 1
    assert gap_transfers(STAGES, Action(0, "F", 1), Action(0, "B", 1), 0) == 2


def test_wait_free_gaps_and_cost_by_hand() -> None:
    """Of the 6 gaps per iteration, rank0's two before its backwards waited; the other four
    are (0.3 s, 1), (0.3 s, 1), (0.1 s, 0), (0.3 s, 1), so the cost is (0.3 - 0.1) / 1."""
    gaps = wait_free_gaps(_timeline(1), STAGES, NAMES, LINK_S)
    assert sorted((round(gap, 9), count) for _, gap, count in gaps) == [
        (0.1, 0), (0.3, 1), (0.3, 1), (0.3, 1)]
    cost, parts, samples = transfer_cost(wait_free_gaps(_timeline(6), STAGES, NAMES, LINK_S),
                                         0.1)
    assert cost == pytest.approx(0.2)
    assert parts == pytest.approx((0.2, 0.2, 0.2))
    assert samples == 18


def test_cost_refused_when_the_ranks_waited() -> None:
    """When rank1's forward is quick, its second forward waits for rank0's: fewer wait-free
    gaps than a part needs gives a one-line reason."""
    gaps = wait_free_gaps(_timeline(3, waits=True), STAGES, NAMES, LINK_S)
    assert sorted((round(gap, 9), count) for iteration, gap, count in gaps
                  if iteration == 0) == [(0.1, 0), (0.3, 1), (0.3, 1)]
    with pytest.raises(ConfigError, match="where no action waited for its input"):
        transfer_cost(gaps, 0.1)
