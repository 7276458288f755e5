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
runs). Noise only ever adds time, so the one-rank factor compares the *fastest* of many
samples of each, taken in the same warm process and interleaved (``_calibration_rank``): a
first round not counted (the process's first autograd passes and allocations), then per round
two iterations and right after them one profile of every block. Reproducibility is checked
on the same data: the rounds are split into three interleaved parts, each gives its own
factor and overhead, and a calibration whose parts disagree by more than 10% of the factor or
25% of the overhead (and 0.2 ms of time per action) is measured again, then refused
(``implausible_calibration``, which also refuses a factor below 1 beyond the tolerance or an
overhead larger than the mean action itself). The multi-rank factor and transfer overhead are
checked the same way on three interleaved parts of their iterations (``implausible_ranks``).
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
from dlsched.pipeline.chain import REFERENCE_FLOPS
from dlsched.pipeline.plan import PipelinePlan, Stage
from dlsched.pipeline.plan_file import SavedPlan
from dlsched.pipeline.schedules import gpipe_orders
from dlsched.pipeline.torch_export import to_torch
from dlsched.runtime.pipeline.model import load_model
from dlsched.runtime.pipeline.profile import microbatch_seconds, profile_blocks
from dlsched.runtime.pipeline.rank_compute import even_stages, rank_compute_factor
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
"""Largest disagreement between the parts' compute factors, relative to the factor: the
validation protocol asks predictions within 15%, so a factor that holds to 10% is usable
(parts 1.09-1.25 at microbatch 8 on an idle 16-core machine are refused, 1.00-1.08 pass)."""


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
    """(compute factor, overhead s per action) of rounds ``samples``: fastest action sum /
    (``microbatches`` x fastest profile), and the median of (iteration - action sum) /
    (2 x ``microbatches``)."""
    factor = (min(actions for _, actions, _ in samples)
              / (microbatches * min(compute for *_, compute in samples)))
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
    more than ``TOLERANCE_S`` per action (the runtime's actions faster than its own blocks:
    the profile is off), an overhead larger than the mean action or below -``TOLERANCE_S``,
    or parts that disagree by more than ``FACTOR_LIMIT`` of the factor or ``SPREAD_LIMIT`` of
    the overhead, and more than ``TOLERANCE_S`` per action."""
    factor, overhead, action = (calibration.compute_factor, calibration.overhead_s,
                                calibration.action_s)
    if (1 - factor) * action > TOLERANCE_S:
        return (f"compute factor {factor:.3f}: the runtime's actions were faster than its "
                "profiled blocks")
    if overhead > action:
        return (f"overhead {overhead * 1e3:.2f} ms per action is larger than the mean action "
                f"itself ({action * 1e3:.2f} ms)")
    if overhead < -TOLERANCE_S:
        return f"overhead {overhead * 1e3:.2f} ms per action is negative"
    factor_spread, overhead_spread = calibration.spreads_s()
    if factor_spread > max(FACTOR_LIMIT * factor * action, TOLERANCE_S):
        parts = ", ".join(f"{part:.3f}" for part, _ in calibration.parts)
        return (f"compute factor {factor:.3f}, but its {PARTS} parts give {parts} (limit "
                f"{FACTOR_LIMIT:.0%} or {TOLERANCE_S * 1e3:.1f} ms per action; the machine is "
                "too busy to calibrate)")
    if overhead_spread > max(SPREAD_LIMIT * abs(overhead), TOLERANCE_S):
        parts = ", ".join(f"{part * 1e3:.2f}" for _, part in calibration.parts)
        return (f"overhead {overhead * 1e3:.2f} ms per action, but its {PARTS} parts give "
                f"{parts} ms (limit {SPREAD_LIMIT:.0%} or {TOLERANCE_S * 1e3:.1f} ms per "
                "action; the machine is too busy to calibrate)")
    return None


Measured = TypeVar("Measured")


def until_plausible(measure: Callable[[tuple[str, ...]], Measured],
                    implausible: Callable[[Measured], str | None], attempts: int,
                    what: str) -> Measured:
    """``measure(reasons so far)`` again while ``implausible`` gives a reason, at most
    ``attempts`` times; then ConfigError "``what``: refused after ..." with the last reason."""
    rejected: list[str] = []
    for _ in range(attempts):
        measured = measure(tuple(rejected))
        reason = implausible(measured)
        if reason is None:
            return measured
        rejected.append(reason)
    raise ConfigError(f"{what}: refused after {attempts} measurements: {rejected[-1]}")


def measure_runtime(model: str, microbatch_size: int, microbatches: int = 8,
                    rounds: int = 36, repeats: int = 1, attempts: int = 3,
                    options: SpawnOptions | None = None) -> RuntimeCalibration:
    """The runtime's compute factor and overhead per action (see the module docstring): one
    rank, the whole ``model`` as one stage, GPipe over ``microbatches`` microbatches of
    ``microbatch_size`` samples, ``rounds`` rounds (each 2 iterations and the blocks profiled
    with ``repeats``) in one process; measured again up to ``attempts`` times while
    ``implausible_calibration``, then ConfigError with the reason."""
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
    return until_plausible(
        lambda rejected: calibration_of(spawn(_calibration_rank, 1, (job, rounds, repeats),
                                              options or SpawnOptions())[0],
                                        microbatches, rejected),
        implausible_calibration, attempts, "runtime calibration")


def implausible_transfer(cost_s: float, parts: tuple[float, ...]) -> str | None:
    """Why a transfer overhead of ``cost_s`` seconds whose interleaved parts gave ``parts``
    cannot be used (one line), or None: below -``TOLERANCE_S``, or parts that disagree by
    more than ``SPREAD_LIMIT`` of it and ``TOLERANCE_S``."""
    if cost_s < -TOLERANCE_S:
        return f"transfer overhead {cost_s * 1e3:.2f} ms is negative"
    if max(parts) - min(parts) > max(SPREAD_LIMIT * abs(cost_s), TOLERANCE_S):
        text = ", ".join(f"{part * 1e3:.2f}" for part in parts)
        return (f"transfer overhead {cost_s * 1e3:.2f} ms, but its {len(parts)} parts give "
                f"{text} ms (limit {SPREAD_LIMIT:.0%} or {TOLERANCE_S * 1e3:.1f} ms; the "
                "machine is too busy to calibrate)")
    return None


@dataclass(frozen=True)
class RankFit:
    """What a run of several ranks gives: ``compute_factor`` (their actions over the chain's
    profile, ``rank_compute``) with its ``factor_parts``, and ``transfer_overhead_s`` (seconds
    per activation or gradient sent or received, ``transfer_gaps``; 0 on one rank) with its
    ``transfer_parts``."""

    compute_factor: float
    factor_parts: tuple[float, ...]
    transfer_overhead_s: float
    transfer_parts: tuple[float, ...]

    def runtime_fit(self, overhead_s: float) -> RuntimeFit:
        """The ``RuntimeFit`` with ``overhead_s`` seconds per compute action; a transfer
        overhead within the tolerance below 0 is 0."""
        return RuntimeFit(self.compute_factor, overhead_s, max(0.0, self.transfer_overhead_s))


def implausible_ranks(fit: RankFit) -> str | None:
    """Why a ``RankFit`` cannot be used (one line), or None: an implausible transfer overhead
    (``implausible_transfer``), or parts of the compute factor that disagree by more than
    ``FACTOR_LIMIT`` of it."""
    transfer = implausible_transfer(fit.transfer_overhead_s, fit.transfer_parts)
    if transfer is not None:
        return transfer
    if max(fit.factor_parts) - min(fit.factor_parts) > FACTOR_LIMIT * fit.compute_factor:
        parts = ", ".join(f"{part:.3f}" for part in fit.factor_parts)
        return (f"compute factor {fit.compute_factor:.3f} on the ranks, but its "
                f"{len(fit.factor_parts)} parts give {parts} (limit {FACTOR_LIMIT:.0%}; the "
                "machine is too busy to calibrate)")
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
    ``bandwidth`` (s, B/s) the link's time. Measured again up to ``attempts`` times while
    ``implausible_ranks``, then ConfigError with the reason."""
    if not 1 <= microbatches <= 1000 or not 1 <= iterations <= 1000 or not 1 <= attempts <= 10:
        raise ConfigError(f"microbatches: {microbatches} (1..1000), iterations: {iterations} "
                          f"(1..1000) and attempts: {attempts} (1..10) are out of range")
    names = tuple(f"rank{k}" for k in range(ranks))
    saved = rank_calibration_plan(model, microbatch_size, ranks, microbatches, names)
    stages = saved.plan.stages
    link_s = latency_s + max(saved.activation_bytes) / bandwidth

    def measure(_: tuple[str, ...]) -> RankFit:
        run = run_pipeline(saved, model, iterations, options=options)
        factor, factor_parts = rank_compute_factor(run.timeline, microbatches, profiled_s)
        if ranks == 1:
            return RankFit(factor, factor_parts, 0.0, (0.0,))
        cost, parts, _ = transfer_cost(wait_free_gaps(run.timeline, stages, names, link_s),
                                       overhead_s)
        return RankFit(factor, factor_parts, cost, parts)

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
