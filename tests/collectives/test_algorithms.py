"""Stage costs of each per-dimension algorithm, computed by hand (Themis paper, Table 1)."""

import pytest

from dlsched.collectives.algorithms import (
    Phase,
    data_after,
    stage_bytes,
    stage_data,
    stage_time,
)
from dlsched.hardware import Dimension, DimKind

GB = 1e9


def test_ring_reduce_scatter():
    """Ring, P=4, 100 GB/s, 700 ns: 3 steps + 0.75 GB / 100 GB/s = 2.1 us + 7.5 ms."""
    dim = Dimension(DimKind.RING, 4, 100 * GB, 700e-9)
    assert stage_time(dim, Phase.REDUCE_SCATTER, 1 * GB) == pytest.approx(3 * 700e-9 + 7.5e-3)


def test_direct_one_step():
    """Direct, P=8: one step, 7/8 of the data: 1 us + 0.875 GB / 175 GB/s = 5.001 ms."""
    dim = Dimension(DimKind.FULLY_CONNECTED, 8, 175 * GB, 1e-6)
    assert stage_time(dim, Phase.ALL_GATHER, 1 * GB) == pytest.approx(1e-6 + 5e-3)


def test_halving_doubling_log_steps():
    """Halving-doubling, P=16: log2 16 = 4 steps; bytes D/2+D/4+D/8+D/16 = 15/16 D."""
    dim = Dimension(DimKind.SWITCH, 16, 50 * GB, 1.7e-6)
    assert stage_bytes(dim, Phase.REDUCE_SCATTER, 1 * GB) == pytest.approx(15 / 16 * GB)
    assert stage_time(dim, Phase.REDUCE_SCATTER, 1 * GB) == pytest.approx(
        4 * 1.7e-6 + 15 / 16 * GB / (50 * GB))


def test_all_gather_works_on_its_output_size():
    """An AG whose input is 1 MB on P=4 works on 4 MB and sends 3 MB."""
    dim = Dimension(DimKind.RING, 4, 1 * GB)
    data = stage_data(dim, Phase.ALL_GATHER, 1e6)
    assert data == 4e6
    assert stage_bytes(dim, Phase.ALL_GATHER, data) == pytest.approx(3e6)
    assert data_after(dim, Phase.ALL_GATHER, 1e6) == 4e6
    assert data_after(dim, Phase.REDUCE_SCATTER, 4e6) == 1e6


def test_all_to_all_bytes_per_algorithm():
    """All-to-All: direct (P-1)/P D; ring P=4 sends pieces D/4 over 1,2,1 hops = D;
    halving-doubling P=8 sends D/2 in each of 3 steps."""
    d = 8e6
    assert stage_bytes(Dimension(DimKind.FULLY_CONNECTED, 4, GB), Phase.ALL_TO_ALL, d) == 6e6
    assert stage_bytes(Dimension(DimKind.RING, 4, GB), Phase.ALL_TO_ALL, d) == pytest.approx(d)
    assert stage_bytes(Dimension(DimKind.SWITCH, 8, GB), Phase.ALL_TO_ALL, d) == pytest.approx(
        1.5 * d)
