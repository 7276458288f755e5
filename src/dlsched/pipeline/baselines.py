"""Baseline planners, each ``(problem) -> PipelinePlan``.

* ``gpipe`` — GPipe (Huang et al., NeurIPS 2019): one stage per GPU in index order, balanced
  compute, all forwards then all backwards.
* ``1f1b`` — the same partition with 1F1B / PipeDream-Flush (Narayanan et al., ICML 2021).
* ``pipedream`` — PipeDream's planner (Narayanan et al., SOSP 2019): DP over block ranges and
  GPU counts (GPUs taken in index order, identical GPUs assumed) minimising the slowest stage
  including transfers and amortised all-reduce, run synchronously with PipeDream-Flush.
* ``dapple`` — DAPPLE (Fan et al., PPoPP 2021): DP over block ranges and GPU runs in index
  order (identical GPUs assumed) choosing stages and replication for the synchronous latency
  model, enumerating the bottleneck stage time; early-backward (1F1B) schedule.
* ``interleaved`` — interleaved 1F1B (Narayanan et al., SC 2021), 2 chunks per GPU on the
  largest GPU count that divides the microbatches.
* ``zb-h1`` — ZB-H1 (Qi et al., ICLR 2024): balanced stages, split backward, W's deferred
  by the stage index (the paper's handcrafted order).
"""

from __future__ import annotations

from dlsched.errors import ConfigError
from dlsched.pipeline.estimate import best_sync_partitions
from dlsched.pipeline.partition import balanced_stages, range_costs, throughput_dp
from dlsched.pipeline.plan import PipelinePlan
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


def plan_pipedream(problem: PipelineProblem) -> PipelinePlan:
    """PipeDream's throughput DP (identical GPUs, index order) with PipeDream-Flush."""
    costs = range_costs(problem, _index_order(problem), identical=True)
    stages = throughput_dp(costs, problem.chain.num_blocks, problem.num_microbatches)
    if stages is None:
        raise ConfigError("pipedream: no partition fits the GPUs' memory")
    orders = one_f_one_b_orders(stages, problem.graph.num_devices, problem.num_microbatches)
    return PipelinePlan("pipedream", stages, orders, problem.num_microbatches)


def plan_dapple(problem: PipelineProblem) -> PipelinePlan:
    """DAPPLE: synchronous-latency DP (identical GPUs, index order) with early backward."""
    costs = range_costs(problem, _index_order(problem), identical=True)
    ranked = best_sync_partitions(problem, costs, keep=1, identical=True)
    if not ranked:
        raise ConfigError("dapple: no partition fits the GPUs' memory")
    orders = one_f_one_b_orders(ranked[0], problem.graph.num_devices, problem.num_microbatches)
    return PipelinePlan("dapple", ranked[0], orders, problem.num_microbatches)


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
