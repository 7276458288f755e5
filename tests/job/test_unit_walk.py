"""The job evaluator's walk of ZB-V, DualPipe and DualPipeV (``job.evaluation.unit_walk``):
equal to the pipeline simulator on random replicas, the published bubbles by hand, and the
overlapped pair hiding each chunk's all-to-all behind the other's compute."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from dlsched.errors import ConfigError
from dlsched.hardware.device_graph import Device, DeviceGraph
from dlsched.job.evaluation.unit_walk import (
    UNIT_SCHEDULES,
    UnitTimes,
    stage_count,
    unit_layout,
    unit_seconds,
    walk_unit_lanes,
    walk_units,
)
from dlsched.pipeline import PipelinePlan, simulate
from dlsched.pipeline.chains.chain import Chain
from dlsched.pipeline.chains.problem import PipelineProblem

RATE, BANDWIDTH = 1e12, 1e9  # the stand-in GPUs' FLOP/s and links' B/s: seconds carried as is


def _times(schedule: str, pp: int, m: int, forward: list[float], backward: list[float],
           send: float, comm: tuple[list[float], list[float]] | None = None) -> UnitTimes:
    n = stage_count(schedule, pp)
    comm = comm or ([0.0] * n, [0.0] * n)
    return UnitTimes(schedule, pp, m, tuple(forward), tuple(backward), (send,) * (n - 1), 0.5,
                     tuple(comm[0]), tuple(comm[1]))


def _simulated(times: UnitTimes) -> float:
    """The replica's iteration by ``pipeline.simulate`` on stand-in GPUs and links."""
    n = len(times.forward)
    chain = Chain("job", tuple(f"stage{s}" for s in range(n)), np.array(times.forward) * RATE,
                  np.array(times.backward) * RATE, np.full(n, times.send[0] * BANDWIDTH),
                  np.zeros(n), np.zeros(n), input_grad_fraction=times.input_fraction)
    devices = tuple(Device(f"rank{k}", RATE, 2**40) for k in range(times.pp))
    graph = DeviceGraph("replica", devices, np.full((times.pp, times.pp), BANDWIDTH),
                        np.zeros((times.pp, times.pp)))
    layout = unit_layout(times.schedule, times.pp, times.num_microbatches)
    plan = PipelinePlan("job", layout.stages, layout.orders, times.num_microbatches,
                        joined=layout.joined)
    problem = PipelineProblem(chain, graph, times.num_microbatches, ("none",))
    return simulate(problem, plan).iteration_s


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("schedule", UNIT_SCHEDULES)
def test_walk_equals_the_simulator(schedule: str, seed: int) -> None:
    """Random per-stage seconds, transfers and microbatches: the walk's end is the event
    simulation's, to rounding (no communication to hide: the simulator's pairs take the sum
    of their chunks)."""
    rng = random.Random(seed)
    pp = rng.choice([2, 4, 6] if schedule == "dualpipe" else [2, 3, 4, 5])
    m = 2 * pp + 2 * rng.randrange(4) if schedule != "zb-v" else rng.randrange(1, 4 * pp)
    n = stage_count(schedule, pp)
    times = _times(schedule, pp, m, [rng.uniform(0.5, 2) for _ in range(n)],
                   [rng.uniform(1, 4) for _ in range(n)], rng.choice([0.0, 0.05, 0.3]))
    assert walk_units(times)[2] == pytest.approx(_simulated(times), rel=1e-9)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("schedule", UNIT_SCHEDULES)
def test_two_lanes_are_each_lane_walked_alone(schedule: str, seed: int) -> None:
    """Replicas of one schedule with their own seconds, sends and all-to-alls (and the first
    without its transfers, as an evaluation walks it): one walk gives each its own walk's
    timing, bit for bit (the same sums in the same order)."""
    rng = random.Random(seed)
    pp = rng.choice([2, 4, 6] if schedule == "dualpipe" else [2, 3, 4, 5])
    m = 2 * pp + 2 * rng.randrange(4) if schedule != "zb-v" else rng.randrange(1, 4 * pp)
    n = stage_count(schedule, pp)
    lanes = [_times(schedule, pp, m, [rng.uniform(0.5, 2) for _ in range(n)],
                    [rng.uniform(1, 4) for _ in range(n)], send,
                    ([rng.uniform(0, 0.3) for _ in range(n)],
                     [rng.uniform(0, 0.6) for _ in range(n)]))
             for send in (rng.choice([0.05, 0.3]), 0.0)]
    lanes.append(replace(lanes[0], send=(0.0,) * (n - 1)))  # the first without transfers
    walked = walk_unit_lanes(tuple(lanes))
    assert walked == [walk_units(lane) for lane in lanes]
    assert walked[0][2] >= walked[2][2]  # transfers never shorten the replica


@pytest.mark.parametrize(("schedule", "pp", "m", "expected"), [
    ("dualpipe", 4, 8, 3 * 8 + 2), ("dualpipe", 8, 16, 3 * 16 + 6),
    ("dualpipev", 4, 8, 6 * 8 + 6), ("zb-v", 4, 8, 6 * 8 + 3)])
def test_published_bubbles(schedule: str, pp: int, m: int, expected: float) -> None:
    """F = 1, B = 2 (I = W = 1) s, free links. Per rank 3 s per chunk of each microbatch;
    DualPipe's bubble (PP/2 - 1)(F&B + B - 3W) = (pp/2 - 1) 2 s, DualPipeV's with PP = 2 pp
    stages (pp - 1) 2 s, ZB-V's (pp - 1) s (the first forward's way down, Qi et al.)."""
    n = stage_count(schedule, pp)
    times = _times(schedule, pp, m, [1.0] * n, [2.0] * n, 0.0)
    assert walk_units(times)[2] == pytest.approx(expected)


def test_pair_hides_each_all_to_all_behind_the_other_compute() -> None:
    """DualPipeV, 2 ranks, 4 microbatches, F = 1 s (0.3 s of it all-to-all), B = 2 s (0.6 s
    of it all-to-all). A pair F & B takes max(0.7 + 1.4, 0.3 + 0.6) = 2.1 s instead of 3 s;
    a lone chunk keeps its all-to-all exposed. Each rank runs 3 pairs: rank 0 two in step 4
    (m - 2pp + 1 = 1 round) and one in step 5 (pp - 1 = 1), rank 1 (the turn of the V) three
    in step 4 (2 rounds, its first F0 and B1 apart) and none in step 5. So each rank is busy
    24 - 3 x 0.9 = 21.3 s: the iteration (26 s without hiding) ends no earlier than that and
    at least 2.7 s earlier than without hiding."""
    pp, m = 2, 4
    n = stage_count("dualpipev", pp)
    plain = _times("dualpipev", pp, m, [1.0] * n, [2.0] * n, 0.0)
    hidden = _times("dualpipev", pp, m, [1.0] * n, [2.0] * n, 0.0, ([0.3] * n, [0.6] * n))
    layout = unit_layout("dualpipev", pp, m)
    pairs = [sum(1 for i in joined if order[i].kind == "F")
             for order, joined in zip(layout.orders, layout.joined, strict=True)]
    assert pairs == [3, 3]
    order = layout.orders[0]
    pair = next(order[i:i + 3] for i in sorted(layout.joined[0]) if order[i].kind == "F")
    assert unit_seconds(hidden, pair) == pytest.approx(2.1)
    assert unit_seconds(plain, pair) == pytest.approx(3.0)
    end_plain, end_hidden = walk_units(plain)[2], walk_units(hidden)[2]
    assert end_plain == pytest.approx(6 * m + 2 * (pp - 1))
    assert 6 * m - 3 * 0.9 <= end_hidden <= end_plain - 3 * 0.9 + 1e-9


def test_refused_shapes() -> None:
    """One rank, an odd DualPipe pipeline or too few microbatches: a one-line ConfigError."""
    with pytest.raises(ConfigError, match=r"^pp: the zb-v schedule needs 2 or more"):
        unit_layout("zb-v", 1, 4)
    with pytest.raises(ConfigError, match="pp"):
        unit_layout("dualpipe", 3, 12)
    with pytest.raises(ConfigError, match="num_microbatches"):
        unit_layout("dualpipev", 4, 6)

