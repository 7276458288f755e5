"""Pipeline planner speed: planning a 96-layer GPT-3-like model on 64 and 512 GPUs, and
simulating one iteration with 64 microbatches.

Run: ``python -m benchmarks.bench_pipeline`` (rewrites its section of BENCHMARKS.md).
"""

from __future__ import annotations

import time

import numpy as np

from benchmarks.common import host_facts, host_text, write_section
from dlsched.hardware.device_graph import cluster_graph
from dlsched.models.zoo import get_model
from dlsched.pipeline import (
    Chain,
    PipelineProblem,
    chain_from_model,
    get_planner,
    plan_bound,
    simulate,
)

LAYERS, HIDDEN, SEQUENCE = 96, 12288, 2048


def gpt3_like_chain() -> Chain:
    """96 identical GPT-3-175B-like transformer layers, one sequence of 2048 tokens per
    microbatch, fp16 (2-byte) weights and activations; stash of about 34 x s x h bytes."""
    forward = 24 * SEQUENCE * HIDDEN**2 + 4 * SEQUENCE**2 * HIDDEN
    return Chain("gpt3-like-96 (synthetic)", tuple(f"layer{i}" for i in range(LAYERS)),
                 np.full(LAYERS, float(forward)), np.full(LAYERS, 2.0 * forward),
                 np.full(LAYERS, 2.0 * SEQUENCE * HIDDEN), np.full(LAYERS, 24.0 * HIDDEN**2),
                 np.full(LAYERS, 34.0 * SEQUENCE * HIDDEN), 0.5, samples=1)


def _planning_rows(chain: Chain, planners: tuple[str, ...]) -> list[str]:
    rows = []
    for servers in (8, 64):
        graph = cluster_graph(servers, 8, flops=400e12)
        problem = PipelineProblem(chain, graph, 16)
        for name in planners:
            start = time.process_time()
            plan = get_planner(name)(problem)
            seconds = time.process_time() - start
            iteration = simulate(problem, plan).iteration_s
            rows.append(f"| {chain.name} | {graph.num_devices} | {name} | {seconds:.2f} "
                        f"| {plan.num_stages} | {plan.tensor_parallel} "
                        f"| {iteration:.3f} | {iteration / plan_bound(problem, plan):.3f} |")
    return rows


def _simulation_row(chain: Chain) -> str:
    problem = PipelineProblem(chain, cluster_graph(8, 8, flops=400e12), 64)
    plan = get_planner("dlsched")(problem)
    start = time.perf_counter()
    result = simulate(problem, plan)
    seconds = time.perf_counter() - start
    actions = sum(len(order) for order in plan.orders)
    return (f"| 64 | 64 | {plan.num_stages} | {actions} | {len(result.timeline)} "
            f"| {seconds:.3f} |")


def main() -> None:
    """Measure and write the pipeline section of BENCHMARKS.md."""
    chain = gpt3_like_chain()
    zoo = chain_from_model(get_model("gpt3-175b"), 1)
    lines = ["## Pipeline planning", "",
             "Planning 96-layer models, 16 microbatches, on homogeneous clusters of 8-GPU "
             "servers (400 TFLOP/s, 80 GiB, NVLink 300 GB/s inside, 100 Gb/s between); CPU "
             "seconds (time.process_time) of one call, on " + host_text(host_facts())
             + " (`dlsched` includes evaluating every baseline's plan as a "
             "candidate: since issue 8 these are full-strength grid searches, which is most of "
             "the time at 512 GPUs). The synthetic model has fp16-sized weights and "
             "activations and no tensor layout (TP 1 only); the zoo's GPT-3 175B has 98 "
             "blocks, the default memory model, and dlsched searches TP 1, 2, 4 and 8 on it.",
             "", "| model | GPUs | planner | planning (CPU-s) | stages | TP | iteration (s) "
             "| time/bound |", "|---|---:|---|---:|---:|---:|---:|---:|",
             *_planning_rows(chain, ("dlsched", "dapple", "pipedream", "gpipe")),
             *_planning_rows(zoo, ("dlsched",)), "",
             "Simulating one iteration of the dlsched plan (validation, memory check and "
             "event simulation) with 64 microbatches:", "",
             "| GPUs | microbatches | stages | actions | spans | simulate (s) |",
             "|---:|---:|---:|---:|---:|---:|", _simulation_row(chain)]
    write_section("pipeline", "\n".join(lines))


if __name__ == "__main__":
    main()
