"""Collectives of a few bytes (issue 19, item 7): dlsched's tapered chunkings split 6-9 byte
buffers into zero-byte chunks, and its plan was refused as invalid."""

import pytest

from dlsched.collectives import run_collective, validate_plan
from dlsched.collectives.bounds import latency_bound
from dlsched.collectives.plan import weighted_chunks
from dlsched.collectives.policies.balanced import tapered_chunks
from dlsched.hardware import load_topology


@pytest.mark.parametrize("size", range(1, 40))
def test_tapered_chunks_are_never_empty(size: int) -> None:
    """Every count up to one chunk per byte: chunks of at least one byte adding up to size."""
    for count in range(1, min(size, 96) + 1):
        sizes = tapered_chunks(size, count)
        assert len(sizes) == count and min(sizes) >= 1 and sum(sizes) == size


def test_weighted_chunks_keep_proportions_when_nothing_rounds_to_zero() -> None:
    """Largest-remainder rounding as before; a zero-byte chunk becomes one byte each plus the
    rest in proportion; fewer bytes than chunks is refused."""
    assert weighted_chunks(12, [1.0, 2.0, 3.0]) == [2, 4, 6]
    assert weighted_chunks(6, [0.25, 0.5, 1.0, 1.0, 0.5, 0.25]) == [1, 1, 1, 1, 1, 1]
    assert weighted_chunks(8, [0.25, 1.0, 1.0, 0.25]) == [1, 3, 3, 1]
    with pytest.raises(ValueError, match="3 bytes cannot make 4 non-empty chunks"):
        weighted_chunks(3, [1.0] * 4)


@pytest.mark.parametrize("size", range(1, 17))
@pytest.mark.parametrize("op", ["all-reduce", "all-gather", "reduce-scatter", "all-to-all"])
def test_dlsched_policy_on_tiny_buffers(size: int, op: str) -> None:
    """dlsched plans 1-16 byte buffers (one chunk asked) on the default topology: a valid plan
    no faster than the latency-aware lower bound."""
    topology = load_topology("4D-Ring_FC_Ring_SW")
    result = run_collective(topology, op, size, 1, "dlsched")
    validate_plan(result.plan)
    assert result.time_s >= latency_bound(topology, result.plan.op, size) * (1 - 1e-9)
