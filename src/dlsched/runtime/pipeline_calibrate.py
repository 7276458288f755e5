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
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from dlsched.errors import ConfigError
from dlsched.pipeline.chain import REFERENCE_FLOPS
from dlsched.pipeline.plan import PipelinePlan, Stage
from dlsched.pipeline.schedules import gpipe_orders
from dlsched.runtime.pipeline_model import load_model
from dlsched.runtime.pipeline_profile import BlockProfile
from dlsched.runtime.pipeline_run import run_pipeline, saved_for_model
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


def calibrate_action_overhead(model: str, microbatch_size: int, profiles: list[BlockProfile],
                              microbatches: int = 8, iterations: int = 5,
                              options: SpawnOptions | None = None) -> float:
    """Seconds the torch pipeline runtime adds to each compute action (see the module
    docstring): one rank, the whole ``model`` as one stage, GPipe over ``microbatches``
    microbatches of ``microbatch_size`` samples; (median iteration - the profiled forward and
    backward of every microbatch) / (2 x microbatches), at least 0."""
    if not 1 <= microbatches <= 1000 or not 1 <= iterations <= 1000:
        raise ConfigError(f"microbatches: {microbatches} and iterations: {iterations} must be "
                          "in 1..1000")
    built = load_model(model)
    stages = (Stage(0, len(built.block_names), (0,)),)
    plan = PipelinePlan("calibration", stages, gpipe_orders(stages, 1, microbatches),
                        microbatches)
    saved = saved_for_model(plan, built, microbatch_size, ("rank0",))
    measured = run_pipeline(saved, model, iterations, options=options).median_iteration_s
    profiled = microbatches * sum(p.forward_s + p.backward_s for p in profiles)
    return max(0.0, (measured - profiled) / (2 * microbatches))


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
