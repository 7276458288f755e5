"""Baseline planners, each ``(problem) -> PipelinePlan``.

* ``gpipe`` — GPipe (Huang et al., NeurIPS 2019): one stage per GPU in index order, balanced
  compute, all forwards then all backwards.
* ``1f1b`` — the same partition with 1F1B / PipeDream-Flush (Narayanan et al., ICML 2021).
* ``pipedream`` — PipeDream's planner (Narayanan et al., SOSP 2019): DP over block ranges and
  GPU counts (GPUs taken in index order, identical GPUs assumed) minimising the slowest stage
  including transfers and amortised all-reduce, run synchronously with PipeDream-Flush.
  Like DAPPLE's, its DP re-runs with room for 2, 4, ... in-flight microbatches per stage until
  the plan fits memory.
* ``dapple`` — DAPPLE (Fan et al., PPoPP 2021): DP over block ranges and GPU runs in index
  order (identical GPUs assumed) choosing stages and replication for the synchronous latency
  model, enumerating the bottleneck stage time; early-backward (1F1B) schedule.
* ``interleaved`` — interleaved 1F1B (Narayanan et al., SC 2021), 2 chunks per GPU on the
  largest GPU count that divides the microbatches.
* ``zb-h1`` — ZB-H1 (Qi et al., ICLR 2024): balanced stages, split backward, W's deferred
  by the stage index (the paper's handcrafted order).
"""

from __future__ import annotations

from collections.abc import Callable

from dlsched.errors import ConfigError
from dlsched.pipeline.estimate import best_sync_partitions
from dlsched.pipeline.memory import peak_memory
from dlsched.pipeline.partition import RangeCosts, balanced_stages, range_costs, throughput_dp
from dlsched.pipeline.plan import PipelinePlan, Stage
from dlsched.pipeline.problem import PipelineProblem
from dlsched.pipeline.schedules import (
    gpipe_orders,
    interleaved_orders,
    one_f_one_b_orders,
    zb_h1_orders,
)


def _index_order(problem: PipelineProblem) -> list[int]:
    return list(range(problem.graph.num_devices))


def plan_gpipe(problem: PipelineProblem) -> PipelinePlan:
    """GPipe: balanced one-GPU stages in index order, all forwards then all backwards."""
    stages = balanced_stages(problem, _index_order(problem))
    orders = gpipe_orders(stages, problem.graph.num_devices, problem.num_microbatches)
    return PipelinePlan("gpipe", stages, orders, problem.num_microbatches)


def plan_1f1b(problem: PipelineProblem) -> PipelinePlan:
    """Balanced one-GPU stages in index order with the 1F1B (PipeDream-Flush) schedule."""
    stages = balanced_stages(problem, _index_order(problem))
    orders = one_f_one_b_orders(stages, problem.graph.num_devices, problem.num_microbatches)
    return PipelinePlan("1f1b", stages, orders, problem.num_microbatches)


def _memory_aware(problem: PipelineProblem, name: str,
                  partition: Callable[[RangeCosts], tuple[Stage, ...] | None]) -> PipelinePlan:
    """Both planners check memory: partition assuming 1, 2, 4, ... microbatches in flight
    per stage until the 1F1B plan fits every GPU."""
    graph, m, in_flight = problem.graph, problem.num_microbatches, 1
    while True:
        costs = range_costs(problem, _index_order(problem), identical=True, in_flight=in_flight)
        stages = partition(costs)
        if stages is None:
            raise ConfigError(f"{name}: no partition fits the GPUs' memory")
        plan = PipelinePlan(name, stages, one_f_one_b_orders(stages, graph.num_devices, m), m)
        peaks = peak_memory(problem.chain, plan, graph.num_devices)
        if all(peak <= d.memory for peak, d in zip(peaks, graph.devices, strict=True)) \
                or in_flight >= m:
            return plan
        in_flight = min(2 * in_flight, m)


def plan_pipedream(problem: PipelineProblem) -> PipelinePlan:
    """PipeDream's throughput DP (identical GPUs, index order) with PipeDream-Flush."""
    return _memory_aware(problem, "pipedream", lambda costs: throughput_dp(
        costs, problem.chain.num_blocks, problem.num_microbatches))


def plan_dapple(problem: PipelineProblem) -> PipelinePlan:
    """DAPPLE: synchronous-latency DP (identical GPUs, index order) with early backward."""
    def best(costs: RangeCosts) -> tuple[Stage, ...] | None:
        ranked = best_sync_partitions(problem, costs, keep=1, identical=True)
        return ranked[0] if ranked else None
    return _memory_aware(problem, "dapple", best)


def plan_interleaved(problem: PipelineProblem, chunks: int = 2) -> PipelinePlan:
    """Interleaved 1F1B with ``chunks`` stages per GPU on GPUs 0..p-1 (p divides m)."""
    m, blocks = problem.num_microbatches, problem.chain.num_blocks
    limit = max(1, min(problem.graph.num_devices, blocks // chunks))
    p = max(k for k in range(1, limit + 1) if m % k == 0)
    devices = list(range(p))
    stages = balanced_stages(problem, devices * chunks)
    if len(stages) != p * chunks:
        raise ConfigError(f"interleaved: needs {p * chunks} blocks, the model has {blocks}")
    orders = interleaved_orders(chunks, m, tuple(devices), problem.graph.num_devices)
    return PipelinePlan("interleaved", stages, orders, m)


def plan_zb_h1(problem: PipelineProblem) -> PipelinePlan:
    """ZB-H1 on balanced one-GPU stages; needs a chain whose backward can be split."""
    if problem.chain.input_grad_fraction is None:
        raise ConfigError("zb-h1: the model's backward cannot be split into I and W "
                          "(input_grad_fraction is unset)")
    stages = balanced_stages(problem, _index_order(problem))
    orders = zb_h1_orders(stages, problem.graph.num_devices, problem.num_microbatches)
    return PipelinePlan("zb-h1", stages, orders, problem.num_microbatches)
