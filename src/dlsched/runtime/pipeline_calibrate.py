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

The torch pipeline runtime also spends time on every compute action that the per-block profile
does not see (the schedule's Python, argument and output handling, posting sends and
receives, the whole stage module's autograd rather than each block's): one rank runs the whole
model as a single stage under GPipe, and the time it takes beyond the profiled forward and
backward of its microbatches, per action, is each device's ``overhead``. Without it a planner
would favour plans with many small actions (interleaving: 4x the actions of 1F1B) that the
runtime makes slow.

The overhead is the difference of two large times, and on CPU both are noisy: on an idle
16-core machine consecutive one-stage iterations of `gpt-small` ranged 100-204 ms, so a
median-based difference moved by more than 1 ms per action from one calibration to the next
(0.00, 13.83 and 21.78 ms on three runs before both were taken in one process; rounds spread
0.8-1.6 ms around 0.8-1.2 ms after). Noise only ever adds time, so the overhead is the
difference of the *fastest* of many samples of each, taken in the same warm process and
interleaved (``_overhead_rank``): a first round not counted (the process's first autograd
passes and allocations), then per round two one-stage GPipe iterations and right after them
one profile of every block; the overhead is (fastest iteration - microbatches x fastest
compute) / actions. Its reproducibility is checked on the same data: the rounds are split
into three interleaved thirds, each gives its own estimate, and an estimate whose thirds
disagree by more than 25% (or 0.2 ms) is measured again, then refused
(``implausible_overhead``, which also refuses an overhead larger than the mean action itself
or below zero beyond the tolerance).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from dlsched.errors import ConfigError
from dlsched.pipeline.chain import REFERENCE_FLOPS
from dlsched.pipeline.plan import PipelinePlan, Stage
from dlsched.pipeline.schedules import gpipe_orders
from dlsched.pipeline.torch_export import to_torch
from dlsched.runtime.pipeline_model import load_model
from dlsched.runtime.pipeline_profile import profile_blocks
from dlsched.runtime.pipeline_run import RunJob, check_model, run_schedule, saved_for_model
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
"""Largest disagreement between the three thirds' estimates, relative to the overhead."""
TOLERANCE_S = 0.2e-3
"""Absolute tolerance of the overhead (seconds): spreads and negative medians within it pass."""
PARTS = 3
"""Interleaved parts the rounds are split into to check the estimate's reproducibility."""


@dataclass(frozen=True)
class OverheadCalibration:
    """The runtime's overhead per compute action (``overhead_s``, seconds, from every round),
    the same estimate on each of the ``PARTS`` interleaved parts of the rounds (``parts_s``)
    and their spread (largest - smallest, seconds), the mean compute action of the one-stage
    run (``action_s``), and the reasons earlier measurements were rejected."""

    overhead_s: float
    parts_s: tuple[float, ...]
    spread_s: float
    action_s: float
    rejected: tuple[str, ...] = ()


def _overhead_rank(rank: int, world_size: int, job: RunJob, rounds: int,
                   repeats: int) -> list[tuple[float, float]]:
    """On one rank: 1 + ``rounds`` rounds, the first not counted, each (the fastest of
    ``job.iterations`` one-stage iterations of ``job``, the summed forward + backward of every
    block on one microbatch measured right after, median of ``repeats``), seconds of the same
    wall clock."""
    model = load_model(job.model, job.seed)
    samples = []
    for _ in range(rounds + 1):
        steps = run_schedule(rank, job, job.schedules[0])["steps"]
        fastest = min(step["end"] - step["start"] for step in steps)
        profiles = profile_blocks(model, job.microbatch_size, repeats, warmup=0)
        samples.append((fastest, sum(p.forward_s + p.backward_s for p in profiles)))
    return samples[1:]


def _fastest_difference(samples: list[tuple[float, float]], microbatches: int) -> float:
    """(fastest iteration - ``microbatches`` x fastest compute) / (2 x ``microbatches``)."""
    iteration = min(sample[0] for sample in samples)
    compute = min(sample[1] for sample in samples)
    return (iteration - microbatches * compute) / (2 * microbatches)


def overhead_of(samples: list[tuple[float, float]], microbatches: int,
                rejected: tuple[str, ...] = ()) -> OverheadCalibration:
    """The calibration of rounds ``samples`` ((fastest iteration s, forward + backward s of
    one microbatch)) of a one-stage GPipe run over ``microbatches`` (2 x ``microbatches``
    actions): the fastest-sample difference on all rounds, and on each of the ``PARTS``
    interleaved parts (rounds i, i + PARTS, ...) for the spread."""
    if len(samples) < PARTS or microbatches < 1:
        raise ConfigError(f"overhead: need at least {PARTS} rounds and microbatches >= 1 "
                          f"(got {len(samples)}, {microbatches})")
    parts = tuple(_fastest_difference(samples[part::PARTS], microbatches)
                  for part in range(PARTS))
    action = statistics.median(compute for _, compute in samples) / 2
    return OverheadCalibration(_fastest_difference(samples, microbatches), parts,
                               max(parts) - min(parts), action, rejected)


def implausible_overhead(calibration: OverheadCalibration) -> str | None:
    """Why the calibration cannot be used (one line), or None: an overhead larger than the
    mean compute action it is added to, below -``TOLERANCE_S`` (the runtime faster than its
    own blocks: the profile is off), or parts that disagree by more than ``SPREAD_LIMIT`` of
    the overhead and more than ``TOLERANCE_S``."""
    overhead, action = calibration.overhead_s, calibration.action_s
    if overhead > action:
        return (f"overhead {overhead * 1e3:.2f} ms per action is larger than the mean action "
                f"itself ({action * 1e3:.2f} ms)")
    if overhead < -TOLERANCE_S:
        return (f"overhead {overhead * 1e3:.2f} ms per action is negative: the run was faster "
                "than its profiled blocks")
    if calibration.spread_s > max(SPREAD_LIMIT * abs(overhead), TOLERANCE_S):
        parts = ", ".join(f"{part * 1e3:.2f}" for part in calibration.parts_s)
        return (f"overhead {overhead * 1e3:.2f} ms per action, but its {PARTS} parts give "
                f"{parts} ms (spread {calibration.spread_s * 1e3:.2f} ms; limit "
                f"{SPREAD_LIMIT:.0%} or {TOLERANCE_S * 1e3:.1f} ms; the machine is too busy "
                "to calibrate)")
    return None


def measure_action_overhead(model: str, microbatch_size: int, microbatches: int = 8,
                            rounds: int = 36, repeats: int = 1, attempts: int = 3,
                            options: SpawnOptions | None = None) -> OverheadCalibration:
    """The runtime's overhead per compute action (see the module docstring): one rank, the
    whole ``model`` as one stage, GPipe over ``microbatches`` microbatches of
    ``microbatch_size`` samples, ``rounds`` rounds (each 2 iterations and the blocks profiled
    with ``repeats``) in one process; measured again up to ``attempts`` times while
    ``implausible_overhead``, then ConfigError with the reason."""
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
    rejected: list[str] = []
    for _ in range(attempts):
        samples = spawn(_overhead_rank, 1, (job, rounds, repeats),
                        options or SpawnOptions())[0]
        calibration = overhead_of(samples, microbatches, tuple(rejected))
        reason = implausible_overhead(calibration)
        if reason is None:
            return calibration
        rejected.append(reason)
    raise ConfigError(f"overhead calibration: refused after {attempts} measurements: "
                      f"{rejected[-1]}")


def calibrate_action_overhead(model: str, microbatch_size: int, microbatches: int = 8,
                              options: SpawnOptions | None = None) -> float:
    """Seconds the torch pipeline runtime adds to each compute action
    (``measure_action_overhead``), at least 0 (a median within the tolerance below 0 is 0)."""
    return max(0.0, measure_action_overhead(model, microbatch_size, microbatches,
                                            options=options).overhead_s)


def cpu_devices_document(ranks: int, latency_s: float, bandwidth: float, memory: int,
                         name: str = "cpu-ranks", overhead_s: float = 0.0) -> dict:
    """A device-graph file (servers form): ``ranks`` devices at ``REFERENCE_FLOPS`` with
    ``memory`` bytes each and ``overhead_s`` seconds per compute action, the calibrated link
    between every pair."""
    if ranks < 1 or memory <= 0 or overhead_s < 0:
        raise ConfigError(f"ranks: {ranks} must be >= 1, memory: {memory} > 0 bytes and "
                          f"overhead: {overhead_s} >= 0 s")
    link = {"bandwidth": f"{bandwidth:.6g} B/s", "latency": f"{latency_s:.6g} s"}
    gpu = {"flops": f"{REFERENCE_FLOPS:g} FLOP/s", "memory": f"{memory} B",
           "overhead": f"{overhead_s:.6g} s"}
    return {"name": name, "description": f"{ranks} CPU gloo ranks, link calibrated by ping-pong",
            "servers": [{"count": ranks, "gpu": gpu, "link": link}]}
