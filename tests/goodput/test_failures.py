"""The closed forms of goodput.failures: Young's and Daly's intervals against numeric
minimisation, the expected wall time and interruptions against the seeded Monte-Carlo
simulation of the same process (goodput.montecarlo)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize_scalar

from dlsched.errors import ConfigError
from dlsched.goodput.failures import (
    DEFAULT_MTBF_GPU_HOURS,
    daly_interval,
    exact_waste,
    expected_outcome,
    first_order_waste,
    job_mtbf,
    optimal_interval,
    young_interval,
)
from dlsched.goodput.montecarlo import simulate


def test_default_rate_is_the_mean_of_bloom_and_opt_logs() -> None:
    """BLOOM: 1.5 failures a week on 384 GPUs (2.325e-5 per GPU-hour); OPT-175B: 35 restarts in
    61 days on 992 GPUs (2.410e-5); the default is the reciprocal of their mean rate, 42,237
    GPU-hours, so a 16,384-GPU job fails every 2.58 h (Llama 3's own rate, held out: 3.09 h)."""
    bloom = 1.5 / (384 * 7 * 24)
    opt = 35 / (992 * 61 * 24)
    assert pytest.approx(2 / (bloom + opt)) == DEFAULT_MTBF_GPU_HOURS
    assert pytest.approx(42237.4, abs=0.1) == DEFAULT_MTBF_GPU_HOURS
    assert job_mtbf(16384) / 3600 == pytest.approx(42237.4 / 16384, rel=1e-5)


@pytest.mark.parametrize(("cost", "mtbf"), [(1.0, 1e4), (30.0, 3600.0), (300.0, 7200.0)])
def test_young_minimises_the_first_order_waste(cost: float, mtbf: float) -> None:
    """sqrt(2 C M) is the argmin of C / tau + tau / (2M), found by bounded minimisation."""
    found = minimize_scalar(first_order_waste, bounds=(1e-3, 100 * mtbf), method="bounded",
                            args=(cost, mtbf), options={"xatol": 1e-9})
    assert young_interval(cost, mtbf) == pytest.approx(found.x, rel=1e-5)


@pytest.mark.parametrize(("cost", "restart", "mtbf"),
                         [(1.0, 60.0, 1e4), (30.0, 600.0, 3600.0), (60.0, 0.0, 7200.0),
                          (5.0, 300.0, 11137.0)])
def test_daly_is_near_the_exact_optimum(cost: float, restart: float, mtbf: float) -> None:
    """Daly's higher-order interval is within 2% of the exact form's argmin (for C <= M / 60,
    Daly 2006 Fig. 2), its waste within 0.01% of the minimum; Young's within 1% of it."""
    best = optimal_interval(cost, restart, mtbf)
    grid = min(exact_waste(best * f, cost, restart, mtbf) for f in (0.9, 0.99, 1.01, 1.1))
    assert exact_waste(best, cost, restart, mtbf) <= grid
    assert daly_interval(cost, mtbf) == pytest.approx(best, rel=0.02)
    floor = exact_waste(best, cost, restart, mtbf)
    assert exact_waste(daly_interval(cost, mtbf), cost, restart, mtbf) <= floor * 1.0001
    assert exact_waste(young_interval(cost, mtbf), cost, restart, mtbf) <= floor * 1.01


def test_without_failures_the_job_is_work_plus_checkpoints() -> None:
    """M -> infinity: wall = work + checkpoints (work / tau each C), no interruptions."""
    out = expected_outcome(1000.0, 2.0, 60.0, 1e15, interval=100.0)
    assert out.wall_s == pytest.approx(1020.0)
    assert out.interruptions == pytest.approx(0.0, abs=1e-9)
    assert out.goodput == pytest.approx(1000 / 1020)


def test_first_order_limit() -> None:
    """For tau, C, R << M the waste is C / tau + (tau / 2 + C + R) / M (Daly 2006 Eq. 8)."""
    tau, cost, restart, mtbf = 100.0, 1.0, 10.0, 1e6
    out = expected_outcome(1e5, cost, restart, mtbf, interval=tau)
    first = cost / tau + (tau / 2 + cost + restart) / mtbf
    assert out.wall_s / 1e5 - 1 == pytest.approx(first, rel=1e-3)


def test_bad_input_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"^mtbf_gpu_hours: 0\.0 is not accepted"):
        job_mtbf(8, 0.0)
    with pytest.raises(ConfigError, match="restart"):
        expected_outcome(10.0, 1.0, -1.0, 100.0)


cases = st.tuples(
    st.integers(5, 40),  # segments
    st.floats(10.0, 500.0),  # interval (s)
    st.floats(0.0, 60.0),  # checkpoint cost (s)
    st.floats(0.0, 300.0),  # restart (s)
    st.floats(1.0, 20.0),  # mtbf as a multiple of interval + cost + restart
)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(cases)
def test_closed_form_inside_the_simulations_99_percent_interval(case: tuple) -> None:
    """Synchronous checkpoints: Daly's expected wall time and E[T]/M interruptions fall inside
    the 99% confidence interval of 3,000 simulated runs (fixed seeds: deterministic)."""
    segments, tau, cost, restart, ratio = case
    mtbf = ratio * (tau + cost + restart)  # at most e^2 attempts a segment: a short test
    sim = simulate(segments, tau, cost, restart, mtbf, runs=3000, seed=segments)
    out = expected_outcome(segments * tau, cost, restart, mtbf, interval=tau)
    low, high = sim.wall_interval()
    assert low <= out.wall_s <= high
    assert abs(out.interruptions - sim.interruptions) <= sim.interruptions_half_width


@settings(max_examples=20, deadline=None, derandomize=True)
@given(st.integers(10, 40), st.floats(0.0, 0.3), st.floats(10.0, 40.0))
def test_async_first_order_inside_the_interval(segments: int, write: float,
                                               ratio: float) -> None:
    """Asynchronous checkpoints (a write of W <= 0.3 tau after each snapshot, M >= 10 tau):
    pricing W as restart time is first order, so it is allowed 0.1% of the wall time beyond
    the simulation's 99% interval of the exact process (its second-order error is of the order
    of (W / M)(tau / M) <= 0.03%)."""
    tau, cost, restart = 100.0, 1.0, 30.0
    mtbf, delay = ratio * tau, write * tau
    sim = simulate(segments, tau, cost, restart, mtbf, runs=3000, seed=segments,
                   durable_delay=delay)
    out = expected_outcome(segments * tau, cost, restart, mtbf, interval=tau,
                           durable_delay=delay)
    low, high = sim.wall_interval()
    assert low - 1e-3 * sim.wall_s <= out.wall_s <= high + 1e-3 * sim.wall_s


def test_more_gpus_more_interruptions_less_goodput() -> None:
    """The job's failure rate grows with its GPUs: goodput falls, interruptions per day rise."""
    outs = [expected_outcome(86400.0 * 30, 3.0, 600.0, job_mtbf(n)) for n in (1024, 4096, 16384)]
    assert outs[0].goodput > outs[1].goodput > outs[2].goodput
    per_day = [o.interruptions / o.wall_s for o in outs]
    assert per_day[0] < per_day[1] < per_day[2]
    assert math.isclose(per_day[2] * 86400, 86400 / job_mtbf(16384))
