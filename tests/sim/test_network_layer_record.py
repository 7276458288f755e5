"""Differential check of the one network layer (issue 23, item 1): every simulator that shares
links gives, on seeded random cases, bit for bit the numbers recorded before the four models
were merged (the record was made with the code of commit
105188e). dlsched's data-parallel plans of seeds 1, 6 and 15 were recorded again when its
policy gained the final halving sweep (commit dc0ed74): only those three entries changed, each
iteration as fast or faster (156.49 -> 155.94 ms, 118.02 -> 117.15 ms, equal).

Each case maps to a list of floats (seconds): a collective's time and every transfer's start
and end; training iterations and every transfer's end; data-parallel iterations, per policy,
and every message's start and end; pipeline iterations and every span's start and end, under
both link-sharing modes. ``python tests/sim/test_network_layer_record.py record`` rewrites the
record ``tests/fixtures/network_layer.json``.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "network_layer.json"
CASES_PER_DOMAIN = 16


def _topology(rng: np.random.Generator):
    from dlsched.hardware import Dimension, Topology

    dims = []
    for _ in range(int(rng.integers(1, 4))):
        kind = str(rng.choice(["Ring", "Switch", "FullyConnected"]))
        size = int(rng.choice([2, 4, 8])) if kind == "Switch" else int(rng.integers(2, 7))
        dims.append(Dimension(kind, size, float(rng.choice([25e9, 50e9, 100e9, 200e9])),
                              float(rng.choice([0.0, 5e-7, 1e-6]))))
    return Topology("random", tuple(dims))


def collective_case(seed: int) -> list[float]:
    """A random collective: op, policy, chunks, intra order, concurrency 1-4."""
    from dlsched.collectives import run_collective

    rng = np.random.default_rng(seed)
    topology = _topology(rng)
    op = str(rng.choice(["all-reduce", "reduce-scatter", "all-gather", "all-to-all"]))
    result = run_collective(topology, op, int(rng.integers(1, 64)) * 2**20,
                            int(rng.choice([1, 4, 16])), str(rng.choice(["baseline", "themis"])),
                            str(rng.choice(["fifo", "scf"])), int(rng.integers(1, 5)))
    return [result.time_s] + [t for span in result.timeline.spans for t in (span.start, span.end)]


def training_case(seed: int) -> list[float]:
    """Four random layers (all-reduce of weight gradients, an all-to-all after one forward)
    on a random topology, every policy, one or two chunks per dimension at once."""
    from dlsched.training.run import run_policies
    from dlsched.training.workload import Comm, Workload, WorkloadLayer

    rng = np.random.default_rng(seed)
    topology = _topology(rng)
    layers = tuple(
        WorkloadLayer(f"l{i}", *rng.uniform(1e-4, 1e-3, 3).tolist(), float(rng.uniform(0, 1e-4)),
                      forward_comm=Comm("all-to-all", int(rng.integers(1, 8)) * 2**20)
                      if i == 1 else None,
                      weight_grad_comm=Comm("all-reduce", int(rng.integers(1, 32)) * 2**20))
        for i in range(4))
    values = []
    for result in run_policies(Workload("random", layers), topology,
                               ["baseline", "themis", "dlsched", "ideal"], 2,
                               int(rng.choice([4, 16])), int(rng.integers(1, 3)), False):
        values.append(result.iteration_s)
        values.extend(transfer[2] for transfer in result.run.transfers)
    return values


def _comm(rng: np.random.Generator):
    from dlsched.dataparallel.comm import AlphaBeta, Piecewise, Segment, TwoState, ring_allreduce

    kind = int(rng.integers(0, 4))
    idle = AlphaBeta(float(rng.uniform(1e-5, 1e-3)), float(rng.uniform(1e-10, 1e-9)))
    if kind == 0:
        return idle
    if kind == 1:
        return ring_allreduce(int(rng.integers(2, 17)), float(rng.choice([1.25e9, 12.5e9])), 5e-6)
    if kind == 2:
        return Piecewise((Segment(float(rng.uniform(1e5, 1e7)), 1e-5, 2e-9),
                          Segment(math.inf, idle.alpha, idle.beta)))
    loaded = AlphaBeta(idle.alpha * float(rng.uniform(1, 3)),
                       idle.beta * float(rng.uniform(1, 3)))
    stream = AlphaBeta(idle.alpha * float(rng.uniform(0.6, 2)),
                       idle.beta * float(rng.uniform(0.6, 2)))
    compute = ((1e3, float(rng.uniform(1, 1.5))), (1e8, float(rng.uniform(1, 2))))
    return TwoState(idle, loaded, compute=compute, stream=stream if rng.integers(0, 2) else None)


def dataparallel_case(seed: int) -> list[float]:
    """Random layers (3-12), a random all-reduce model (alpha-beta, ring, piecewise or
    two-state), in flight 1-4, every policy: its time, the count of span ends, every message's
    start and end."""
    from dlsched.dataparallel import POLICIES, DPProblem, run_dataparallel
    from dlsched.dataparallel.policies import clear_plan_caches

    rng = np.random.default_rng(seed)
    layers = int(rng.integers(3, 13))
    problem = DPProblem(tuple(rng.uniform(1e-4, 5e-3, layers).tolist()),
                        tuple(rng.uniform(2e-4, 1e-2, layers).tolist()),
                        tuple(int(b) for b in rng.integers(1e3, 5e7, layers)), _comm(rng),
                        in_flight=int(rng.integers(1, 5)))
    clear_plan_caches()
    values = []
    for name in POLICIES:
        result = run_dataparallel(problem, name)
        spans = [t for span in result.timeline.spans if span.resource == "network"
                 for t in (span.start, span.end)]
        values.extend([result.time_s, float(len(spans)), *spans])
    return values


def pipeline_case(seed: int) -> list[float]:
    """``dlsched.pipeline.chains.random_cases.random_problem(seed)`` planned by GPipe, 1F1B,
    DAPPLE and ZB-H1, each simulated under both link-sharing modes."""
    from dataclasses import replace

    from dlsched.errors import ConfigError
    from dlsched.pipeline import BASELINES, simulate
    from dlsched.pipeline.chains.random_cases import random_problem

    problem = random_problem(seed)
    values = []
    for name in ("gpipe", "1f1b", "dapple", "zb-h1"):
        try:
            plan = BASELINES[name](problem)
        except ConfigError:
            values.append(-1.0)
            continue
        for mode in ("fifo", "ps"):
            result = simulate(replace(problem, network=mode), plan)
            values.append(result.iteration_s)
            values.extend(t for span in result.timeline.spans for t in (span.start, span.end))
    return values


DOMAINS: dict[str, Callable[[int], list[float]]] = {
    "collectives": collective_case, "training": training_case,
    "dataparallel": dataparallel_case, "pipeline": pipeline_case,
}


def record(path: Path = FIXTURE) -> None:
    """Run every case and write the record (floats as ``repr`` strings, exact)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {domain: {str(seed): [repr(v) for v in case(seed)]
                     for seed in range(CASES_PER_DOMAIN)} for domain, case in DOMAINS.items()}
    path.write_text(json.dumps(data, indent=0, sort_keys=True))
    print(f"wrote {path}")


@pytest.mark.parametrize("domain", sorted(DOMAINS))
@pytest.mark.parametrize("seed", range(CASES_PER_DOMAIN))
def test_same_numbers_as_recorded(domain: str, seed: int) -> None:
    expected = [float(v) for v in json.loads(FIXTURE.read_text())[domain][str(seed)]]
    assert DOMAINS[domain](seed) == expected


if __name__ == "__main__":
    if sys.argv[1:] != ["record"]:
        raise SystemExit("usage: python tests/sim/test_network_layer_record.py record")
    record()
