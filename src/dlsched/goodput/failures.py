"""Failures, checkpoints and restarts in closed form (seconds throughout).

**The process** (Daly, "A higher order estimate of the optimum checkpoint interval for restart
dumps", Future Generation Computer Systems 22, 2006, Sec. 3): a job of ``work`` seconds of
failure-free compute is cut into segments of ``interval`` seconds, each followed by a checkpoint
that blocks training ``cost`` seconds. Failures of the whole job arrive as a Poisson process of
mean time between failures ``mtbf`` (any GPU's failure stops every synchronous rank, so the
job's rate is the per-GPU rate times the GPUs: the "nodes in series" model of Kokolis et al.,
HPCA 2025). A failure loses the segment in progress; the job then pays ``restart`` seconds
(relaunch plus loading the last checkpoint), during which it can fail again. The expected wall
time of one segment is exactly (Daly 2006, Eq. 13)

    E[T_segment] = M e^{R/M} (e^{(tau + C)/M} - 1),

and of the job ``E[T] = work / tau * E[T_segment]`` (a last partial segment priced pro rata).
Failures arrive at rate ``1/M`` over the whole wall time, so ``E[interruptions] = E[T] / M``.
The goodput (Kokolis et al.'s effective training time ratio) is ``work / E[T]``.

**Intervals**: Young ("A first order approximation to the optimum checkpoint interval",
CACM 17(9), 1974) minimises the first-order waste ``C / tau + tau / (2 M)``:
``tau = sqrt(2 C M)``. Daly 2006 (Eq. 37) gives the higher-order estimate for the exact form,
``sqrt(2 C M) [1 + sqrt(C / (2M)) / 3 + C / (18 M)] - C`` for ``C < 2M``, else ``M``.
``optimal_interval`` minimises the exact form numerically (the closed forms are its checks).

**Asynchronous checkpoints** block only ``cost`` (the snapshot to host memory); the write to
storage takes ``durable_delay`` more seconds in the background, and a failure during it rolls
back to the previous checkpoint. To first order that adds the delay to the work lost per failure
(a failure lands in a write window with probability ``W / tau`` and then loses ``tau`` more), so
it is priced as part of the restart: ``R -> R + W`` (the Monte-Carlo simulation,
``goodput.montecarlo``, runs the exact process and bounds the error).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dlsched.errors import ConfigError

BLOOM_GPU_FAILURES_PER_WEEK = 1.5
BLOOM_GPUS = 384
OPT_HARDWARE_RESTARTS = 35
OPT_GPUS = 992
OPT_DAYS = 61
HOURS_PER_DAY = 24.0
HOURS_PER_WEEK = 7 * HOURS_PER_DAY
PUBLISHED_RUN_RATES = (BLOOM_GPU_FAILURES_PER_WEEK / (BLOOM_GPUS * HOURS_PER_WEEK),
                       OPT_HARDWARE_RESTARTS / (OPT_GPUS * OPT_DAYS * HOURS_PER_DAY))
"""Job-stopping failures per GPU-hour of two published pre-training logs on dedicated clusters:
BigScience's BLOOM 176B ("BLOOM: A 176B-Parameter Open-Access Multilingual Language Model", arXiv
2211.05100, Sec. 3.4: 384 A100 GPUs, "on average 1-2 GPU failures each week", taken as 1.5):
2.33e-5; Meta's OPT-175B ("OPT: Open Pre-trained Transformer Language Models", arXiv 2205.01068,
Sec. 2.5: 992 A100 GPUs, hardware failures caused at least 35 manual restarts in about two months,
taken as 61 days): 2.41e-5."""
DEFAULT_MTBF_GPU_HOURS = len(PUBLISHED_RUN_RATES) / sum(PUBLISHED_RUN_RATES)
"""Mean GPU-hours between job-stopping failures, per GPU: 42,237 (2.37e-5 per GPU-hour), the
reciprocal of the mean of ``PUBLISHED_RUN_RATES`` (BLOOM and OPT-175B; the two agree within 4%).
Chosen independently of the Llama 3 405B run, which is held out to check it
(goodput/data/runs.yaml): Llama 3's 419 unexpected interruptions in 54 days on 16,384 H100s
("The Llama 3 Herd of Models", Sec. 3.3.4) are 1.97e-5 per GPU-hour, 20% below this default.
Cross-check, Kokolis et al., "Revisiting Reliability in Large-Scale Machine Learning Research
Clusters" (HPCA 2025): about 5e-3 failures per node-day on Meta's A100 research clusters
(2.6e-5 per GPU-hour at 8 GPUs a node), and a measured MTTF of 7.9 h for 1,024-GPU jobs (8,090
GPU-hours per failure, 5 times this rate, from clusters with many short, user-program failures)."""


@dataclass(frozen=True)
class Outcome:
    """Expected result of a job under failures: ``wall_s`` (seconds), ``interruptions``,
    ``goodput`` (work / wall), ``interval_s`` (compute seconds between checkpoints) and the wall
    time by cause (seconds): ``checkpoint_s`` blocked on saves, ``lost_s`` of recomputed work,
    ``restart_s`` restarting."""

    wall_s: float
    interruptions: float
    goodput: float
    interval_s: float
    checkpoint_s: float
    lost_s: float
    restart_s: float


def job_mtbf(gpus: int, mtbf_gpu_hours: float = DEFAULT_MTBF_GPU_HOURS) -> float:
    """Mean seconds between failures of a job on ``gpus`` GPUs (series model, module docs)."""
    if gpus < 1:
        raise ConfigError(f"gpus: {gpus} is not accepted; accepted: an integer >= 1")
    if not mtbf_gpu_hours > 0:
        raise ConfigError(f"{mtbf_gpu_hours} is not accepted; accepted: a number > 0",
                          "mtbf_gpu_hours")
    return mtbf_gpu_hours * 3600.0 / gpus


def young_interval(cost: float, mtbf: float) -> float:
    """Young 1974: ``sqrt(2 C M)`` seconds."""
    return math.sqrt(2.0 * cost * mtbf)


def daly_interval(cost: float, mtbf: float) -> float:
    """Daly 2006's higher-order optimum interval (seconds; module docstring)."""
    if cost >= 2.0 * mtbf:
        return mtbf
    ratio = cost / (2.0 * mtbf)
    return math.sqrt(2.0 * cost * mtbf) * (1.0 + math.sqrt(ratio) / 3.0 + ratio / 9.0) - cost


def first_order_waste(interval: float, cost: float, mtbf: float) -> float:
    """Young's waste per second of work: ``C / tau + tau / (2 M)``."""
    return cost / interval + interval / (2.0 * mtbf)


def segment_wall(interval: float, cost: float, restart: float, mtbf: float) -> float:
    """Daly 2006's exact expected wall seconds of one segment of ``interval`` work."""
    return mtbf * math.exp(restart / mtbf) * math.expm1((interval + cost) / mtbf)


def exact_waste(interval: float, cost: float, restart: float, mtbf: float) -> float:
    """Expected wall seconds per second of work, minus one (exact form)."""
    return segment_wall(interval, cost, restart, mtbf) / interval - 1.0


def optimal_interval(cost: float, restart: float, mtbf: float) -> float:
    """The interval minimising the exact expected wall time (bounded scalar minimisation around
    Daly's estimate; seconds)."""
    from scipy.optimize import minimize_scalar  # here: the CLI starts without scipy

    guess = max(daly_interval(cost, mtbf), 1e-9)
    found = minimize_scalar(exact_waste, bounds=(guess / 20.0, guess * 20.0), method="bounded",
                            args=(cost, restart, mtbf), options={"xatol": guess * 1e-7})
    return float(found.x)


def expected_outcome(work: float, cost: float, restart: float, mtbf: float,
                     interval: float | None = None, durable_delay: float = 0.0) -> Outcome:
    """The expected job under failures (module docstring); ``interval`` None: the optimum,
    at least ``durable_delay`` (an asynchronous save must finish before the next)."""
    for name, value in (("work", work), ("mtbf", mtbf)):
        if not value > 0:
            raise ConfigError(f"{name}: {value} is not accepted; accepted: a number > 0")
    for name, value in (("cost", cost), ("restart", restart), ("durable_delay", durable_delay)):
        if not value >= 0:
            raise ConfigError(f"{name}: {value} is not accepted; accepted: a number >= 0")
    effective_restart = restart + durable_delay
    if interval is None:
        interval = max(optimal_interval(cost, effective_restart, mtbf), durable_delay)
    wall = work / interval * segment_wall(interval, cost, effective_restart, mtbf)
    interruptions = wall / mtbf
    checkpoints = work / interval * cost
    restarting = interruptions * restart
    return Outcome(wall, interruptions, work / wall, interval, checkpoints,
                   max(wall - work - checkpoints - restarting, 0.0), restarting)
