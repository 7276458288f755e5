"""Calibrate the links between CPU pipeline ranks and write them as a device graph.

On one CPU machine, gloo's "link" between ranks is loopback TCP plus copies: its nominal
bandwidth means nothing, so it is measured. Two ranks bounce tensors of several sizes (the
activations a pipeline sends); half the median round trip is one transfer. The smallest
message's time is the latency, and the extra time of the largest message over it, per extra
byte, gives the bandwidth (two measured points: robust on a loaded machine, where a
least-squares line through noisy points can give a negative latency). The device graph has
one "GPU" per rank at ``REFERENCE_FLOPS`` (profiled chains store seconds as FLOP on that
device), the calibrated link between every pair (loopback is the same for every pair), and the
memory given.

The torch pipeline runtime's iteration differs from the profile of its blocks in three ways:

- *compute factor*: inside a run of several ranks the blocks take another time than profiled
  alone (the stage module's autograd over its blocks, every microbatch's activations held at
  once, ranks sharing caches and memory bandwidth, a machine whose state moved since the
  profile). ``measure_ranks`` measures it where the plans run, against the very chain the
  plans are made from (``rank_compute``). The device graph's GPUs run at
  ``REFERENCE_FLOPS`` / factor, so every profiled action is stretched by it.
- *overhead*: the time between actions (the schedule's Python, argument and output
  handling), from one rank running the whole model as a single GPipe stage with every
  compute action stamped (no waits for other ranks): iteration - summed action time, per
  action, the median over rounds (a difference within one iteration: little noise). Without
  it a planner would favour plans with many small actions (interleaving: 4x the actions of
  1F1B). The same rounds give a one-rank factor (actions over blocks profiled in the same
  process) that is checked for plausibility but not used for planning.
- *transfer overhead*: the host time per activation or gradient sent or received
  (``transfer_gaps``), from the same multi-rank run as the compute factor; without it a
  planner favours plans with many stage boundaries (interleaving: 3x the transfers of 1F1B
  on 2 ranks).

On CPU both one-rank times are noisy: on an idle 16-core machine consecutive one-stage
iterations of `gpt-small` ranged 100-204 ms, so a difference of medians taken minutes apart
moved by more than 1 ms per action between calibrations (0.00, 13.83 and 21.78 ms on three
runs). So everything is measured interleaved in one warm process (``_calibration_rank``): a
first round not counted (the process's first autograd passes and allocations), then per round
two iterations and right after them one profile of every block. The one-rank factor is the
median over rounds of each round's fastest action sum over the profile taken right after it
(a slowdown of the machine that lasts a round stretches both and cancels); the overhead the
median over rounds of the time between actions.

Reproducibility is checked on the same data, and judged by what it does to a prediction: the
rounds are split into three interleaved parts, each gives its own factor and overhead. A
spread only makes predictions meaningless when it moves the predicted time of an action by
more than ``PREDICTION_SPREAD`` (15%, the validation protocol's tolerance; three parts that
span 15% put the estimate from all rounds within about +-5%, one standard error) and
``TOLERANCE_S``: the overhead's spread against the predicted action (factor x profiled action
+ overhead), the multi-rank factor's against itself, the transfer overhead's, times the most
transfers around one action (2: its input received, its output sent), against a rank's
predicted action (``implausible_calibration``, ``implausible_ranks``). The one-rank factor is
not used for planning, so its spread refuses nothing (it is recorded; a factor below 1 beyond
both its spread and the tolerance still means the profile is off). A measurement that does
not hold is not thrown away: the next one adds as many rounds (iterations) and the parts are
formed again over all of them, so each attempt measures longer; after the last attempt the
calibration is refused with the reason and what to do (``until_plausible``). Measured on the
project's 2-core VM at load 3-5 (BENCHMARKS.md, *Pipeline calibration under load*).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.distributed as dist

from dlsched.errors import ConfigError
from dlsched.pipeline.chains.chain import REFERENCE_FLOPS
from dlsched.pipeline.plans.plan import PipelinePlan, Stage
from dlsched.pipeline.plans.plan_file import SavedPlan
from dlsched.pipeline.plans.schedules import gpipe_orders
from dlsched.pipeline.plans.torch_export import to_torch
from dlsched.runtime.pipeline.model import load_model
from dlsched.runtime.pipeline.profile import microbatch_seconds, profile_blocks
from dlsched.runtime.pipeline.rank_compute import (
    even_stages,
    factor_and_parts,
    iteration_factors,
)
from dlsched.runtime.pipeline.run import (
    RunJob,
    check_model,
    run_pipeline,
    run_schedule,
    saved_for_model,
)
from dlsched.runtime.pipeline.transfer_gaps import transfer_cost, wait_free_gaps
from dlsched.runtime.spawn import SpawnOptions, spawn

SIZES = (4 * 2**10, 64 * 2**10, 2**20, 4 * 2**20)
"""Message sizes (bytes) bounced between two ranks."""


def _ping_pong(rank: int, world_size: int, sizes: tuple[int, ...], repeats: int) -> list[float]:
    """Median one-way seconds per size, measured on rank 0 (rank 1 echoes)."""
    times = []
    for size in sizes:
        buffer = torch.zeros(size // 4, dtype=torch.float32)
        samples = []
        for _ in range(repeats + 2):
            start = time.perf_counter()
            if rank == 0:
                dist.send(buffer, 1)
                dist.recv(buffer, 1)
            elif rank == 1:
                dist.recv(buffer, 0)
                dist.send(buffer, 0)
            samples.append((time.perf_counter() - start) / 2)
        times.append(statistics.median(samples[2:]))
    return times


def calibrate_link(sizes: tuple[int, ...] = SIZES, repeats: int = 20,
                   options: SpawnOptions | None = None) -> tuple[float, float, list[float]]:
    """(latency s, bandwidth B/s, measured one-way seconds per size) of the rank-to-rank link."""
    if len(sizes) < 2 or not 1 <= repeats <= 10_000:
        raise ConfigError(f"sizes: need at least 2 (got {len(sizes)}); repeats: {repeats} "
                          "must be in 1..10000")
    sizes = tuple(sorted(sizes))
    times = spawn(_ping_pong, 2, (sizes, repeats), options or SpawnOptions())[0]
    extra = times[-1] - times[0]
    if extra <= 0:
        raise ConfigError(f"calibration: transfer times {times} do not grow with size; the "
                          "machine is too loaded to calibrate, try again")
    return float(times[0]), (sizes[-1] - sizes[0]) / extra, list(times)


SPREAD_LIMIT = 0.25
"""Largest disagreement between the parts' estimates, relative to the estimate."""
TOLERANCE_S = 0.2e-3
"""Absolute tolerance per action (seconds): disagreements and negative values within it pass."""
PARTS = 3
"""Interleaved parts the rounds are split into to check the estimates' reproducibility."""
FACTOR_LIMIT = 0.10
"""Largest move of the compute factor between the calibration and the plans it serves
(``compute_drift``), relative to it."""
PREDICTION_SPREAD = 0.15
"""Largest move of a predicted action's time that the parts' disagreement on one estimate may
cause (the validation protocol's tolerance, see the module docstring)."""
TRANSFERS_PER_ACTION = 2
"""The most transfers around one compute action: its input received and its output sent."""
ADVICE = ("the machine's load changed too much while measuring: stop other work on it and "
          "run again, or give --devices a device graph measured on a quieter machine")
"""What to do when a calibration is refused."""


@dataclass(frozen=True)
class RuntimeCalibration:
    """The runtime's ``compute_factor`` (its actions over the profiled blocks) and
    ``overhead_s`` (seconds between compute actions, per action), from every round; the same
    two on each of the ``PARTS`` interleaved parts of the rounds (``parts``, (factor,
    overhead) pairs); the mean profiled compute action (``action_s``, seconds); the reasons
    earlier measurements were rejected."""

    compute_factor: float
    overhead_s: float
    parts: tuple[tuple[float, float], ...]
    action_s: float
    rejected: tuple[str, ...] = ()

    def spreads_s(self) -> tuple[float, float]:
        """(factor, overhead) disagreement of the parts, as seconds per action."""
        factors = [factor for factor, _ in self.parts]
        overheads = [overhead for _, overhead in self.parts]
        return ((max(factors) - min(factors)) * self.action_s, max(overheads) - min(overheads))


def _calibration_rank(rank: int, world_size: int, job: RunJob, rounds: int,
                      repeats: int) -> list[tuple[float, float, float]]:
    """On one rank: 1 + ``rounds`` rounds, the first not counted, each (the fastest of
    ``job.iterations`` one-stage iterations of ``job``, that iteration's summed compute
    action time, the summed forward + backward of every block on one microbatch measured
    right after, median of ``repeats``), seconds of the same wall clock."""
    model = load_model(job.model, job.seed)
    samples = []
    for _ in range(rounds + 1):
        steps = run_schedule(rank, job, job.schedules[0])["steps"]
        fastest = min(steps, key=lambda step: step["end"] - step["start"])
        actions = sum(end - start for *_, start, end in fastest["stamps"])
        profiles = profile_blocks(model, job.microbatch_size, repeats, warmup=0)
        samples.append((fastest["end"] - fastest["start"], actions,
                        microbatch_seconds(profiles)))
    return samples[1:]


def _estimate(samples: list[tuple[float, float, float]], microbatches: int
              ) -> tuple[float, float]:
    """(compute factor, overhead s per action) of rounds ``samples``: the median over rounds
    of the fastest action sum / (``microbatches`` x the profile right after it), and the
    median of (iteration - action sum) / (2 x ``microbatches``)."""
    factor = statistics.median(actions / (microbatches * compute)
                               for _, actions, compute in samples)
    overhead = statistics.median((iteration - actions) / (2 * microbatches)
                                 for iteration, actions, _ in samples)
    return factor, overhead


def calibration_of(samples: list[tuple[float, float, float]], microbatches: int,
                   rejected: tuple[str, ...] = ()) -> RuntimeCalibration:
    """The calibration of rounds ``samples`` ((fastest iteration s, its summed action s,
    forward + backward s of one microbatch)) of a one-stage GPipe run over ``microbatches``
    (2 x ``microbatches`` actions): ``_estimate`` on all rounds and on each of the ``PARTS``
    interleaved parts (rounds i, i + PARTS, ...)."""
    if len(samples) < PARTS or microbatches < 1:
        raise ConfigError(f"calibration: need at least {PARTS} rounds and microbatches >= 1 "
                          f"(got {len(samples)}, {microbatches})")
    factor, overhead = _estimate(samples, microbatches)
    parts = tuple(_estimate(samples[part::PARTS], microbatches) for part in range(PARTS))
    action = statistics.median(compute for *_, compute in samples) / 2
    return RuntimeCalibration(factor, overhead, parts, action, rejected)


def implausible_calibration(calibration: RuntimeCalibration) -> str | None:
    """Why the calibration cannot be used (one line), or None: a compute factor below 1 by
    more than ``TOLERANCE_S`` per action and its parts' spread (the runtime's actions faster
    than its own blocks: the profile is off), an overhead larger than the mean action or
    below -``TOLERANCE_S``, or an overhead whose parts disagree by more than
    ``PREDICTION_SPREAD`` of the predicted action (factor x action + overhead) and
    ``TOLERANCE_S``. The factor's spread alone refuses nothing: planning does not use it."""
    factor, overhead, action = (calibration.compute_factor, calibration.overhead_s,
                                calibration.action_s)
    factor_spread, overhead_spread = calibration.spreads_s()
    if (1 - factor) * action > max(TOLERANCE_S, factor_spread):
        return (f"compute factor {factor:.3f}: the runtime's actions were faster than its "
                "profiled blocks")
    if overhead > action:
        return (f"overhead {overhead * 1e3:.2f} ms per action is larger than the mean action "
                f"itself ({action * 1e3:.2f} ms)")
    if overhead < -TOLERANCE_S:
        return f"overhead {overhead * 1e3:.2f} ms per action is negative"
    predicted = factor * action + max(0.0, overhead)
    if overhead_spread > max(PREDICTION_SPREAD * predicted, TOLERANCE_S):
        parts = ", ".join(f"{part * 1e3:.2f}" for _, part in calibration.parts)
        return (f"overhead {overhead * 1e3:.2f} ms per action, but its {PARTS} parts give "
                f"{parts} ms: {overhead_spread / predicted:.0%} of a predicted action of "
                f"{predicted * 1e3:.2f} ms (limit {PREDICTION_SPREAD:.0%} or "
                f"{TOLERANCE_S * 1e3:.1f} ms)")
    return None


Measured = TypeVar("Measured")


def until_plausible(measure: Callable[[tuple[str, ...]], Measured],
                    implausible: Callable[[Measured], str | None], attempts: int,
                    what: str) -> Measured:
    """``measure(reasons so far)`` again while ``implausible`` gives a reason, at most
    ``attempts`` times (``measure`` pools each new measurement with the earlier ones); then
    ConfigError "``what``: refused after ..." with the last reason and ``ADVICE``."""
    rejected: list[str] = []
    for _ in range(attempts):
        measured = measure(tuple(rejected))
        reason = implausible(measured)
        if reason is None:
            return measured
        rejected.append(reason)
    raise ConfigError(f"{what}: refused after {attempts} measurements: {rejected[-1]}; "
                      f"{ADVICE}")


def measure_runtime(model: str, microbatch_size: int, microbatches: int = 8,
                    rounds: int = 36, repeats: int = 1, attempts: int = 3,
                    options: SpawnOptions | None = None) -> RuntimeCalibration:
    """The runtime's compute factor and overhead per action (see the module docstring): one
    rank, the whole ``model`` as one stage, GPipe over ``microbatches`` microbatches of
    ``microbatch_size`` samples, ``rounds`` rounds (each 2 iterations and the blocks profiled
    with ``repeats``) in one process; while ``implausible_calibration``, ``rounds`` more
    rounds are measured and pooled with the earlier ones, up to ``attempts`` times, then
    ConfigError with the reason."""
    if (not 1 <= microbatches <= 1000 or not PARTS <= rounds <= 1000
            or not 1 <= attempts <= 10):
        raise ConfigError(f"microbatches: {microbatches} (1..1000), rounds: {rounds} "
                          f"({PARTS}..1000) and attempts: {attempts} (1..10) are out of range")
    built = load_model(model)
    stages = (Stage(0, len(built.block_names), (0,)),)
    plan = PipelinePlan("calibration", stages, gpipe_orders(stages, 1, microbatches),
                        microbatches)
    saved = saved_for_model(plan, built, microbatch_size, ("rank0",))
    check_model(saved, built)
    job = RunJob(model, 0, microbatch_size, (to_torch(plan),), ("rank0",), iterations=2,
                 warmup=0)
    pooled: list[tuple[float, float, float]] = []

    def measure(rejected: tuple[str, ...]) -> RuntimeCalibration:
        pooled.extend(spawn(_calibration_rank, 1, (job, rounds, repeats),
                            options or SpawnOptions())[0])
        return calibration_of(pooled, microbatches, rejected)

    return until_plausible(measure, implausible_calibration, attempts, "runtime calibration")


def implausible_transfer(cost_s: float, parts: tuple[float, ...], action_s: float = 0.0
                         ) -> str | None:
    """Why a transfer overhead of ``cost_s`` seconds whose interleaved parts gave ``parts``
    cannot be used (one line), or None: below -``TOLERANCE_S``, or parts whose disagreement,
    times ``TRANSFERS_PER_ACTION``, exceeds ``PREDICTION_SPREAD`` of ``action_s`` (a rank's
    predicted seconds per action) and ``TOLERANCE_S``."""
    if cost_s < -TOLERANCE_S:
        return f"transfer overhead {cost_s * 1e3:.2f} ms is negative"
    spread = max(parts) - min(parts)
    if TRANSFERS_PER_ACTION * spread > max(PREDICTION_SPREAD * action_s, TOLERANCE_S):
        text = ", ".join(f"{part * 1e3:.2f}" for part in parts)
        return (f"transfer overhead {cost_s * 1e3:.2f} ms, but its {len(parts)} parts give "
                f"{text} ms: up to {TRANSFERS_PER_ACTION} x {spread * 1e3:.2f} ms on a "
                f"predicted action of {action_s * 1e3:.2f} ms (limit {PREDICTION_SPREAD:.0%} "
                f"or {TOLERANCE_S * 1e3:.1f} ms)")
    return None


@dataclass(frozen=True)
class RankFit:
    """What a run of several ranks gives: ``compute_factor`` (their actions over the chain's
    profile, ``rank_compute``) with its ``factor_parts``, and ``transfer_overhead_s`` (seconds
    per activation or gradient sent or received, ``transfer_gaps``; 0 on one rank) with its
    ``transfer_parts``; ``action_s``: a rank's predicted seconds per compute action (its
    share of the profiled blocks x the factor, + the overhead per action)."""

    compute_factor: float
    factor_parts: tuple[float, ...]
    transfer_overhead_s: float
    transfer_parts: tuple[float, ...]
    action_s: float = 0.0

    def runtime_fit(self, overhead_s: float) -> RuntimeFit:
        """The ``RuntimeFit`` with ``overhead_s`` seconds per compute action; a transfer
        overhead within the tolerance below 0 is 0."""
        return RuntimeFit(self.compute_factor, overhead_s, max(0.0, self.transfer_overhead_s))


def implausible_ranks(fit: RankFit) -> str | None:
    """Why a ``RankFit`` cannot be used (one line), or None: an implausible transfer overhead
    (``implausible_transfer`` against the fit's ``action_s``), or parts of the compute factor
    that disagree by more than ``PREDICTION_SPREAD`` of it (the factor scales every
    predicted action)."""
    transfer = implausible_transfer(fit.transfer_overhead_s, fit.transfer_parts, fit.action_s)
    if transfer is not None:
        return transfer
    if max(fit.factor_parts) - min(fit.factor_parts) > PREDICTION_SPREAD * fit.compute_factor:
        parts = ", ".join(f"{part:.3f}" for part in fit.factor_parts)
        return (f"compute factor {fit.compute_factor:.3f} on the ranks, but its "
                f"{len(fit.factor_parts)} parts give {parts} (limit {PREDICTION_SPREAD:.0%})")
    return None


def rank_calibration_plan(model: str, microbatch_size: int, ranks: int, microbatches: int,
                          device_names: tuple[str, ...]) -> SavedPlan:
    """The fixed workload ``measure_ranks`` times: ``model`` cut into ``ranks`` GPipe stages
    of consecutive blocks (``rank_compute.even_stages``), ``microbatches`` microbatches of
    ``microbatch_size`` samples, on ``device_names``."""
    built = load_model(model)
    stages = even_stages(len(built.block_names), ranks)
    plan = PipelinePlan("rank-calibration", stages, gpipe_orders(stages, ranks, microbatches),
                        microbatches)
    return saved_for_model(plan, built, microbatch_size, device_names)


def compute_drift(before: float, during: float) -> str | None:
    """Why a compute factor measured ``before`` the plans no longer describes the machine
    (one line), or None: the same workload measured again ``during`` the plans (interleaved
    with them) gives a factor more than ``FACTOR_LIMIT`` away, relative to ``before``."""
    if abs(during / before - 1) <= FACTOR_LIMIT:
        return None
    return (f"compute factor {before:.3f} at calibration but {during:.3f} during the plans "
            f"({(during / before - 1) * 100:+.0f}%, limit {FACTOR_LIMIT:.0%}; the machine's "
            "speed moved)")


def measure_ranks(model: str, microbatch_size: int, ranks: int, profiled_s: float,
                  overhead_s: float, latency_s: float, bandwidth: float, microbatches: int = 8,
                  iterations: int = 12, attempts: int = 3,
                  options: SpawnOptions | None = None) -> RankFit:
    """The ``RankFit`` of ``ranks`` ranks running ``model`` cut into ``ranks`` GPipe stages of
    consecutive blocks (``rank_compute.even_stages``) over ``microbatches`` microbatches of
    ``microbatch_size`` samples, ``iterations`` stamped iterations after one warm-up:
    ``profiled_s`` is the chain's forward + backward seconds of one microbatch over every
    block, ``overhead_s`` the runtime's seconds per action and ``latency_s`` + bytes /
    ``bandwidth`` (s, B/s) the link's time. While ``implausible_ranks``, ``iterations`` more
    are measured and pooled with the earlier ones, up to ``attempts`` times, then ConfigError
    with the reason."""
    if not 1 <= microbatches <= 1000 or not 1 <= iterations <= 1000 or not 1 <= attempts <= 10:
        raise ConfigError(f"microbatches: {microbatches} (1..1000), iterations: {iterations} "
                          f"(1..1000) and attempts: {attempts} (1..10) are out of range")
    names = tuple(f"rank{k}" for k in range(ranks))
    saved = rank_calibration_plan(model, microbatch_size, ranks, microbatches, names)
    stages = saved.plan.stages
    link_s = latency_s + max(saved.activation_bytes) / bandwidth
    factors: list[float] = []
    gaps: list[tuple[int, float, int]] = []

    def measure(_: tuple[str, ...]) -> RankFit:
        run = run_pipeline(saved, model, iterations, options=options)
        offset = len(factors)  # this run's iterations follow the earlier runs'
        factors.extend(iteration_factors(run.timeline, microbatches, profiled_s))
        factor, factor_parts = factor_and_parts(factors)
        action = factor * profiled_s / (2 * ranks) + overhead_s
        if ranks == 1:
            return RankFit(factor, factor_parts, 0.0, (0.0,), action)
        gaps.extend((offset + iteration, gap, count) for iteration, gap, count
                    in wait_free_gaps(run.timeline, stages, names, link_s))
        cost, parts, _ = transfer_cost(gaps, overhead_s)
        return RankFit(factor, factor_parts, cost, parts, action)

    return until_plausible(measure, implausible_ranks, attempts, "rank calibration")


@dataclass(frozen=True)
class RuntimeFit:
    """What the torch pipeline runtime adds to the profiled blocks on ``ranks`` ranks:
    ``compute_factor`` (its actions over the chain's profile), ``overhead_s``
    per compute action and ``transfer_overhead_s`` per activation or gradient sent or
    received (seconds, >= 0)."""

    compute_factor: float
    overhead_s: float
    transfer_overhead_s: float


def calibrate_runtime(model: str, microbatch_size: int, profiled_s: float, latency_s: float,
                      bandwidth: float, ranks: int = 1, microbatches: int = 8,
                      options: SpawnOptions | None = None) -> RuntimeFit:
    """The torch pipeline runtime's ``RuntimeFit`` on ``ranks`` ranks whose link takes
    ``latency_s`` + bytes / ``bandwidth`` (s, B/s), for plans made from a chain whose forward
    + backward of one microbatch over every block is ``profiled_s`` seconds: the overhead per
    action from ``measure_runtime`` (one rank, no waits), the compute factor and transfer
    overhead from ``measure_ranks``; overheads within the tolerance below 0 are 0."""
    calibration = measure_runtime(model, microbatch_size, microbatches, options=options)
    overhead = max(0.0, calibration.overhead_s)
    return measure_ranks(model, microbatch_size, ranks, profiled_s, overhead, latency_s,
                         bandwidth, microbatches, options=options).runtime_fit(overhead)


def cpu_devices_document(ranks: int, latency_s: float, bandwidth: float, memory: int,
                         name: str = "cpu-ranks", fit: RuntimeFit | None = None) -> dict:
    """A device-graph file (servers form): ``ranks`` devices with ``memory`` bytes each at
    ``REFERENCE_FLOPS`` / the ``fit``'s compute factor with its overheads per compute action
    and per transfer (none without a fit), the calibrated link between every pair."""
    fit = fit or RuntimeFit(1.0, 0.0, 0.0)
    compute_factor = fit.compute_factor
    if (ranks < 1 or memory <= 0 or fit.overhead_s < 0 or fit.transfer_overhead_s < 0
            or not compute_factor > 0):
        raise ConfigError(f"ranks: {ranks} must be >= 1, memory: {memory} > 0 bytes, "
                          f"overheads: {fit.overhead_s}, {fit.transfer_overhead_s} >= 0 s and "
                          f"compute factor: {compute_factor} > 0")
    link = {"bandwidth": f"{bandwidth:.6g} B/s", "latency": f"{latency_s:.6g} s"}
    gpu = {"flops": f"{REFERENCE_FLOPS / compute_factor:.6g} FLOP/s", "memory": f"{memory} B",
           "overhead": f"{fit.overhead_s:.6g} s",
           "transfer_overhead": f"{fit.transfer_overhead_s:.6g} s"}
    return {"name": name, "description": f"{ranks} CPU gloo ranks, link calibrated by "
            f"ping-pong, runtime compute factor {compute_factor:.3f}",
            "servers": [{"count": ranks, "gpu": gpu, "link": link}]}
