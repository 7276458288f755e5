"""Pipeline planner speed: planning a 96-layer GPT-3-like model and the zoo's GPT-3 175B on 64
and 512 GPUs and simulating one iteration with 64 microbatches (section ``pipeline``); with
``reproduce``, the wall and CPU time of ``dlsched reproduce pipeline`` instead (section
``pipeline-reproduce``; a separate run, as it keeps both cores busy for minutes).

Run: ``python -m benchmarks.bench_pipeline [reproduce]`` (rewrites its section of
BENCHMARKS.md). Each planning call gets a fresh chain and device graph, so it reuses nothing
an earlier call computed (``dlsched`` runs every baseline itself).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace

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


def _planning_rows(make_chain: Callable[[], Chain], planners: tuple[str, ...]) -> list[str]:
    rows = []
    for servers in (8, 64):
        for name in planners:
            problem = PipelineProblem(make_chain(), cluster_graph(servers, 8, flops=400e12), 16)
            gc.collect()  # earlier calls' garbage is not this call's cost
            start = time.process_time()
            plan = get_planner(name)(problem)
            seconds = time.process_time() - start
            iteration = simulate(problem, plan).iteration_s
            rows.append(f"| {problem.chain.name} | {problem.graph.num_devices} | {name} "
                        f"| {seconds:.2f} | {plan.num_stages} | {plan.tensor_parallel} "
                        f"| {iteration:.3f} | {iteration / plan_bound(problem, plan):.3f} |")
    return rows


def _zoo_chain() -> Chain:
    return chain_from_model(get_model("gpt3-175b"), 1)


def _simulation_row(chain: Chain) -> str:
    problem = PipelineProblem(chain, cluster_graph(8, 8, flops=400e12), 64)
    plan = get_planner("dlsched")(problem)
    # A new instance on a new graph: results are kept per device graph, none for this one yet.
    fresh = replace(problem, graph=replace(problem.graph))
    start = time.perf_counter()
    result = simulate(fresh, plan)
    seconds = time.perf_counter() - start
    actions = sum(len(order) for order in plan.orders)
    return (f"| 64 | 64 | {plan.num_stages} | {actions} | {len(result.timeline)} "
            f"| {seconds:.3f} |")


def reproduce_section() -> str:
    """Wall and CPU seconds (its processes and their workers) of ``dlsched reproduce
    pipeline`` (default: a process pool on the usable cores, both network modes), with the
    load around it."""
    facts = host_facts()
    before, start = os.times(), time.perf_counter()
    subprocess.run([sys.executable, "-m", "dlsched", "reproduce", "pipeline", "--json"],
                   check=True, stdout=subprocess.DEVNULL)
    wall, after = time.perf_counter() - start, os.times()
    cpu = (after.children_user - before.children_user
           + after.children_system - before.children_system)
    return "\n".join([
        "## Pipeline reproduction time", "",
        "`dlsched reproduce pipeline` (22 scenarios: 11 under each network mode, every planner "
        "and dlsched, each planner again on runnable plans where its best is not; process "
        f"pool): **{wall:.1f} s wall, {cpu:.1f} s CPU** on {host_text(facts)} before the run, "
        f"{os.getloadavg()[0]:.1f} after (issue 23's target: under 90 s on an idle 2-core "
        "machine)."])


def main(argv: list[str]) -> None:
    """Measure and write the pipeline section of BENCHMARKS.md (``reproduce``: the
    pipeline-reproduce section instead)."""
    if argv == ["reproduce"]:
        write_section("pipeline-reproduce", reproduce_section())
        return
    if argv:
        raise SystemExit(__doc__)
    lines = ["## Pipeline planning", "",
             "Planning 96-layer models, 16 microbatches, on homogeneous clusters of 8-GPU "
             "servers (400 TFLOP/s, 80 GiB, NVLink 300 GB/s inside, 100 Gb/s between); CPU "
             "seconds (time.process_time) of one call on a fresh instance, on "
             + host_text(host_facts())
             + " (`dlsched` includes running every baseline planner and evaluating its plan as "
             "a candidate: these are full-strength grid searches). The synthetic model has "
             "fp16-sized weights and activations and no tensor layout (TP 1 only); the zoo's "
             "GPT-3 175B has 98 blocks, the default memory model, and dlsched searches TP 1, "
             "2, 4 and 8 on it. Issue 23's targets: GPT-3 175B on 64 GPUs and the 96-layer "
             "model on 512 GPUs under 10 CPU-s each with plans no slower than before; "
             "`python -m benchmarks.bench_planner_diff check` compares every planner's plan "
             "and time with a record made before the speed work.",
             "", "| model | GPUs | planner | planning (CPU-s) | stages | TP | iteration (s) "
             "| time/bound |", "|---|---:|---|---:|---:|---:|---:|---:|",
             *_planning_rows(gpt3_like_chain, ("dlsched", "dapple", "pipedream", "gpipe")),
             *_planning_rows(_zoo_chain, ("dlsched",)), "",
             "Simulating one iteration of the dlsched plan (validation, memory check and "
             "event simulation) with 64 microbatches:", "",
             "| GPUs | microbatches | stages | actions | spans | simulate (s) |",
             "|---:|---:|---:|---:|---:|---:|", _simulation_row(gpt3_like_chain())]
    write_section("pipeline", "\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
