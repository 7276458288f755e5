"""Seeded random small pipeline problems: the instances the differential checks (the planners'
records, the network layer's record, the plan checks) and the planner benchmark share.

The same seed gives the same problem on every machine (numpy's PCG64 ``default_rng``), so a
recorded number can be compared bit for bit.
"""

from __future__ import annotations

import numpy as np

from dlsched.hardware.device_graph import Device, DeviceGraph
from dlsched.pipeline.chains.chain import synthetic_chain
from dlsched.pipeline.chains.problem import PipelineProblem


def random_problem(seed: int) -> PipelineProblem:
    """2-10 blocks (forward 1-4 ms, backward 2-8 ms on 1 TFLOP/s; activations 0.1-100 MB,
    parameters and stashes 1 MB-1 GB), 2-8 GPUs of two speeds (1 or 2 TFLOP/s) in one or two
    servers with 4, 32 or 256 GiB each (so memory binds on some; bytes/s 10 or 100 GB/s inside
    a server, 1 or 10 GB/s between, latency 1 us inside, 10 us between), 1-8 microbatches,
    either network mode, split backward or not, with replication in 3 of 4."""
    rng = np.random.default_rng(seed)
    blocks, gpus = int(rng.integers(2, 11)), int(rng.integers(2, 9))
    columns = [rng.uniform(low, high, blocks).tolist()
               for low, high in ((1e-3, 4e-3), (2e-3, 8e-3), (1e5, 1e8), (1e6, 1e9), (1e6, 1e9))]
    chain = synthetic_chain(*columns, split=bool(rng.integers(0, 2)))
    servers = np.sort(rng.integers(0, 2, gpus))
    memory = int(rng.choice([2**32, 2**35, 2**38]))
    devices = tuple(Device(f"g{k}", float(rng.choice([1e12, 2e12])), memory, int(servers[k]))
                    for k in range(gpus))
    same = servers[:, None] == servers[None, :]
    bandwidth = np.where(same, rng.choice([1e10, 1e11]), rng.choice([1e9, 1e10]))
    latency = np.where(same, 1e-6, 1e-5)
    np.fill_diagonal(bandwidth, 0.0)
    np.fill_diagonal(latency, 0.0)
    graph = DeviceGraph("random", devices, bandwidth, latency)
    return PipelineProblem(chain, graph, int(rng.integers(1, 9)),
                           network=str(rng.choice(["fifo", "ps"])),
                           replicate=bool(rng.integers(0, 4) > 0))
