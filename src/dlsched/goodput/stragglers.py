"""Stragglers: the slowest of the GPUs a synchronous step waits for (order statistics).

**Variation**: each GPU's compute in a step takes the plan's time times a factor ``X``,
lognormal with median 1 and log-standard deviation ``sigma``, independent across GPUs and steps.
``sigma`` comes from Sinha et al., "Not All GPUs Are Created Equal: Characterizing Variability in
Large-Scale, Accelerator-Rich Systems" (SC 2022): identical GPUs of one cluster differ by 8% on
average (fastest to slowest; up to 22%, outliers 1.5x the median), measured on more than 90%
of Summit's 27,648 V100s. We read the 8% as the expected spread ``ln(1.08)`` of the extremes of
that many draws, ``2 sigma E[Z_(n)]`` (``Z_(n)`` the largest of n standard normals): sigma =
0.0095. Independence per step is our assumption (power management and clocks vary over time;
a persistently slow GPU gives the same expected slowest, without step-to-step spread).

**Synchronous groups**: a TP (x CP) group waits for its slowest member at every layer, a
pipeline replica for its slowest stage (the 1F1B steady state runs at its pace), and the
data-parallel gradient reduction for the slowest replica: the step ends when the slowest of
all ``tp x cp x pp x dp`` GPUs has computed. ``group_slowdowns`` reports each level's expected
factor; the iteration's compute (the plan's iteration minus its exposed communication) is scaled
by the slowest of all. Its distribution is exact: ``P(max <= x) = F(x)^n``, so the q-quantile
is ``exp(sigma Phi^-1(q^(1/n)))``; the mean is integrated numerically.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dlsched.errors import ConfigError

SINHA_SPREAD = 0.08  # average fastest-to-slowest performance variation (Sinha et al. 2022)
SINHA_GPUS = int(0.9 * 27648)  # "more than 90%" of Summit's GPUs measured


def expected_max_normal(n: int) -> float:
    """E[largest of ``n`` standard normals] (numerical integration)."""
    return _expected_max_exp(n, 0.0, 1)


def _expected_max_exp(n: int, sigma: float, power: int) -> float:
    """E[Z_(n)] (power 1, sigma ignored) or E[exp(sigma Z_(n))] (power 0)."""
    from scipy import integrate  # here: the CLI starts without scipy
    from scipy.special import log_ndtr

    def density(z: float) -> float:
        log_pdf = -0.5 * z * z - 0.5 * math.log(2 * math.pi)
        weight = math.exp(math.log(n) + log_pdf + (n - 1) * float(log_ndtr(z)))
        return weight * (z if power else math.exp(sigma * z))
    # the density of Z_(n) sits near sqrt(2 ln n); integrate over a wide window around it
    centre = math.sqrt(2.0 * math.log(n)) if n > 1 else 0.0
    value, _ = integrate.quad(density, centre - 9.0, centre + 9.0, limit=200, points=[centre])
    return value


DEFAULT_SIGMA = 0.0094543
"""``ln(1 + SINHA_SPREAD) / (2 E[Z_(SINHA_GPUS)])`` (module docstring), rounded; the test
recomputes it."""


@dataclass(frozen=True)
class Straggling:
    """Stragglers of a plan: expected slowdown factors of each synchronous level (``tp``,
    ``pipeline``, ``job``), and the iteration's mean, p50 and p95 (seconds)."""

    slowdowns: dict[str, float]
    mean_s: float
    p50_s: float
    p95_s: float


def _check(n: int, sigma: float) -> None:
    if n < 1:
        raise ConfigError(f"group size: {n} is not accepted; accepted: an integer >= 1")
    if not sigma >= 0:
        raise ConfigError(f"sigma: {sigma} is not accepted; accepted: a number >= 0")


def expected_slowest(n: int, sigma: float = DEFAULT_SIGMA) -> float:
    """E[max of ``n`` lognormal(0, sigma) factors]."""
    _check(n, sigma)
    if sigma == 0:
        return 1.0
    return _expected_max_exp(n, sigma, 0)


def slowest_quantile(n: int, q: float, sigma: float = DEFAULT_SIGMA) -> float:
    """The ``q``-quantile of the slowest of ``n`` factors (exact)."""
    _check(n, sigma)
    if not 0 < q < 1:
        raise ConfigError(f"quantile: {q} is not accepted; accepted: 0 < q < 1")
    from scipy.special import ndtri

    return math.exp(sigma * float(ndtri(q ** (1.0 / n))))


def straggling(iteration_s: float, exposed_s: float, groups: dict[str, int],
               sigma: float = DEFAULT_SIGMA) -> Straggling:
    """The plan's iteration with stragglers: ``exposed_s`` of communication unchanged, the rest
    scaled by the slowest of ``groups["job"]`` GPUs; ``groups`` maps level to GPUs it syncs."""
    compute = max(iteration_s - exposed_s, 0.0)
    slowdowns = {name: expected_slowest(size, sigma) for name, size in groups.items()}
    n = groups["job"]
    return Straggling(slowdowns, exposed_s + compute * slowdowns["job"],
                      exposed_s + compute * slowest_quantile(n, 0.5, sigma),
                      exposed_s + compute * slowest_quantile(n, 0.95, sigma))


def sample_slowest(n: int, draws: int, sigma: float, seed: int) -> np.ndarray:
    """``draws`` samples of the slowest of ``n`` factors (a check of the exact forms)."""
    rng = np.random.default_rng(seed)
    return np.exp(sigma * rng.standard_normal((draws, n))).max(axis=1)
