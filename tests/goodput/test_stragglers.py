"""Order statistics of goodput.stragglers: exact forms by hand and against sampling; p95 >=
p50; the expected slowest grows with the group."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dlsched.goodput.stragglers import (
    DEFAULT_SIGMA,
    SINHA_GPUS,
    SINHA_SPREAD,
    expected_max_normal,
    expected_slowest,
    sample_slowest,
    slowest_quantile,
    straggling,
)


def test_expected_max_of_normals_by_hand() -> None:
    """E[Z_(1)] = 0, E[Z_(2)] = 1 / sqrt(pi), E[Z_(3)] = 3 / (2 sqrt(pi))."""
    assert expected_max_normal(1) == pytest.approx(0.0, abs=1e-9)
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-7)
    assert expected_max_normal(3) == pytest.approx(1.5 / math.sqrt(math.pi), rel=1e-7)


def test_sigma_from_sinha_et_al() -> None:
    """8% spread over ~24,883 GPUs: sigma = ln 1.08 / (2 E[Z_(n)]), about 0.0095."""
    derived = math.log1p(SINHA_SPREAD) / (2 * expected_max_normal(SINHA_GPUS))
    assert derived == pytest.approx(DEFAULT_SIGMA, rel=1e-4)
    assert SINHA_GPUS == 24883


def test_one_gpu_is_the_lognormal_mean_and_median() -> None:
    sigma = 0.1
    assert expected_slowest(1, sigma) == pytest.approx(math.exp(sigma**2 / 2), rel=1e-8)
    assert slowest_quantile(1, 0.5, sigma) == pytest.approx(1.0)


@pytest.mark.parametrize("n", [2, 8, 64, 512])
def test_exact_forms_match_sampling(n: int) -> None:
    """Mean and quantiles of the slowest of n against 20,000 seeded samples."""
    sigma = 0.05
    draws = sample_slowest(n, 20000, sigma, seed=n)
    assert expected_slowest(n, sigma) == pytest.approx(draws.mean(), rel=5e-4)
    for q in (0.5, 0.95):
        assert slowest_quantile(n, q, sigma) == pytest.approx(np.quantile(draws, q), rel=2e-3)


def test_slowest_grows_with_the_group_and_p95_above_p50() -> None:
    sizes = [1, 2, 8, 64, 1024, 16384]
    means = [expected_slowest(n) for n in sizes]
    assert all(a < b for a, b in itertools.pairwise(means))
    for n in sizes:
        assert slowest_quantile(n, 0.95) >= slowest_quantile(n, 0.5)


def test_straggling_scales_only_the_compute() -> None:
    """Communication stays; compute times the slowest of the job's GPUs; p95 >= mean-ish."""
    out = straggling(10.0, 2.0, {"tp": 8, "pipeline": 64, "job": 1024}, sigma=0.02)
    assert out.mean_s == pytest.approx(2.0 + 8.0 * expected_slowest(1024, 0.02))
    assert out.p50_s == pytest.approx(2.0 + 8.0 * slowest_quantile(1024, 0.5, 0.02))
    assert out.p95_s >= out.p50_s > 10.0
    assert out.slowdowns["tp"] < out.slowdowns["pipeline"] < out.slowdowns["job"]
