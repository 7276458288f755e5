"""The one collective cost per algorithm (sim.collective_cost) against hand-computed values."""

from __future__ import annotations

import math

import pytest

from dlsched.sim.collective_cost import (
    DIRECT,
    HALVING_DOUBLING,
    RING,
    TREE,
    allreduce_alpha_beta,
    phase_bytes,
    phase_steps,
    ring_allreduce_steps,
    ring_allreduce_time,
)


def test_phase_steps_per_algorithm():
    assert phase_steps(RING, 8) == 7
    assert phase_steps(HALVING_DOUBLING, 8) == 3
    assert phase_steps(DIRECT, 8) == 1


def test_reduce_scatter_and_all_gather_send_p_minus_1_over_p_of_the_data():
    for algorithm in (RING, HALVING_DOUBLING, DIRECT):
        assert phase_bytes(algorithm, 4, 8e6) == 6e6


def test_all_to_all_bytes_per_algorithm():
    # ring of 5: pieces of 2 MB travel 1, 2, 2, 1 hops -> 12 MB
    assert phase_bytes(RING, 5, 10e6, all_to_all=True) == pytest.approx(12e6)
    # Bruck on 8: 4 MB in each of 3 steps
    assert phase_bytes(HALVING_DOUBLING, 8, 8e6, all_to_all=True) == 12e6
    assert phase_bytes(DIRECT, 8, 8e6, all_to_all=True) == 7e6


def test_allreduce_alpha_beta_by_hand():
    # ring of 4 on 1 GB/s links with 1 us steps: 6 us + 1.5 ns/B
    alpha, beta = allreduce_alpha_beta(RING, 4, 1e9, 1e-6)
    assert (alpha, beta) == (pytest.approx(6e-6), pytest.approx(1.5e-9))
    # tree of 5: depth 3 -> 6 steps; 2 ns/B
    assert allreduce_alpha_beta(TREE, 5, 1e9, 1e-6) == (pytest.approx(6e-6), 2e-9)
    # halving-doubling of 8: 2 x 3 steps, 2 x 7/8 bytes per byte
    assert allreduce_alpha_beta(HALVING_DOUBLING, 8, 1e9, 1e-6) == (
        pytest.approx(6e-6), pytest.approx(1.75e-9))
    assert allreduce_alpha_beta(DIRECT, 8, 1e9, 1e-6) == (pytest.approx(2e-6),
                                                          pytest.approx(1.75e-9))


def test_ring_allreduce_time_is_2_p_minus_1_slowest_steps():
    assert ring_allreduce_steps(4) == 6
    # 4 MB over 4 NPUs: 1 MB steps on the slowest link (2 us + 1 MB at 1 GB/s)
    assert ring_allreduce_time(4, 4e6, lambda b: 2e-6 + b / 1e9) == pytest.approx(
        6 * (2e-6 + 1e-3))
    assert ring_allreduce_time(1, 4e6, lambda b: math.inf) == 0.0
