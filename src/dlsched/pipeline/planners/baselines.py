"""Baseline planners at full strength, each ``(problem) -> PipelinePlan`` searching its own
space; the chosen configuration is in ``plan.notes`` (schedule, pp, dp, tp, recompute, ...).
The Megatron-style grid (``grid``) is PP x DP x TP: tensor parallelism inside a server for
the zoo's transformers, every degree the problem allows (``PipelineProblem.degrees``).
PipeDream's and DAPPLE's planners search their own papers' spaces, which have no tensor
parallelism.

* ``gpipe`` — GPipe (Huang et al., NeurIPS 2019): all forwards then all backwards, with
  re-materialization (full recomputation, the paper's set-up) or without when it fits; PP x DP
  x TP grid with balanced cuts (``grid``).
* ``1f1b`` — 1F1B / PipeDream-Flush (Narayanan et al., ICML 2021), Megatron's default: PP x DP
  x TP grid, balanced cuts, every recomputation mode; when the full warm-up does not fit, the
  in-flight microbatches are lowered to what memory holds.
* ``pipedream`` — PipeDream's planner (Narayanan et al., SOSP 2019): DP over block ranges and
  GPU counts (GPUs taken in index order, identical GPUs assumed) minimising the slowest stage
  including transfers and amortised all-reduce, run synchronously with PipeDream-Flush.
  Memory-aware: its DP re-runs with room for 1, 2, 4, ... in-flight microbatches per stage
  (lowering 1F1B's warm-up to what memory holds when needed) until the plan fits, without
  recomputation first, then with selective, then full recomputation.
* ``dapple`` — DAPPLE (Fan et al., PPoPP 2021): DP over block ranges and GPU runs in index
  order (identical GPUs assumed) choosing stages and replication for the synchronous latency
  model, enumerating the bottleneck stage time; early-backward (1F1B) schedule; memory-aware
  like PipeDream's; searched under DAPPLE's three placement policies: append-first and
  scatter-first (GPU orders the DP cuts into runs) and fresh-first (each stage on servers no
  earlier stage uses; the DP's stages, priced on append-first runs, re-placed). As in DAPPLE,
  a replicated stage splits every microbatch across its replicas (``Stage.split``), in the
  DP's costs and in the plan; the round-robin alternative is searched too and the faster kept
  (``replicas`` note).
* ``interleaved`` — interleaved 1F1B (Narayanan et al., SC 2021): 2 or 4 chunks per GPU on
  the PP x DP x TP grid (every GPU used; microbatches need not be a multiple of PP).
* ``zb-h1`` — ZB-H1 (Qi et al., ICLR 2024): split backward, W's deferred by the stage index
  (the paper's handcrafted order), PP x DP x TP grid, warm-up lowered when memory requires.
* ``zb-h2`` — ZB-H2 (same paper): ZB-H1 with ``2(p - s) - 1`` warm-up forwards on stage ``s``
  (about 2p microbatches in flight on the first stage), same grid, warm-up lowered to what
  memory holds.
* ``zb-v`` — ZB-V (same paper, section 6): two stages per GPU in a V (``zb_v_orders``), the
  paper's handcrafted order, on the PP x DP x TP grid with ``2 pp`` balanced stages; its
  memory is about 1F1B's, so no lowered warm-up is needed beyond what recomputation gives.
* ``dualpipe`` — DualPipe (DeepSeek-AI, "DeepSeek-V3 Technical Report", 2024, section 3.2.1):
  microbatches fed from both ends, rank ``k`` holding stages ``k`` and ``pp - 1 - k``
  (``plans.dualpipe``), overlapped forward-backward pairs, on the PP x DP x TP grid with even
  ``pp`` (the report: "DualPipe requires that the pipeline stages and micro-batches be
  divisible by 2") and, per data-parallel replica, an even number of microbatches, at least
  ``2 pp`` (the authors' repository asserts it); other configurations are skipped, counted.
* ``dualpipev`` — DualPipeV (the deepseek-ai/DualPipe repository's cut-in-half DualPipe): one
  direction folded into ZB-V's V of ``2 pp`` stages, the same eight steps, on the grid with
  at least ``2 pp`` microbatches per replica.
"""

from __future__ import annotations

from collections.abc import Callable

from dlsched.errors import ConfigError
from dlsched.pipeline.chains.problem import PipelineProblem
from dlsched.pipeline.planners.estimate import best_sync_partitions
from dlsched.pipeline.planners.grid import (
    GridPoint,
    Variants,
    best_plan,
    grid_points,
    in_flight_caps,
)
from dlsched.pipeline.planners.partition import RangeCosts, range_costs, throughput_dp
from dlsched.pipeline.plans.dualpipe import dualpipe_grid_units, dualpipev_units, flatten
from dlsched.pipeline.plans.plan import PipelinePlan, Stage
from dlsched.pipeline.plans.schedules import (
    gpipe_orders,
    interleaved_orders,
    one_f_one_b_orders,
    zb_h1_orders,
    zb_h2_orders,
    zb_v_orders,
)
from dlsched.pipeline.simulation.simulate import SimResult, remember, simulate

INTERLEAVE_CHUNKS = (2, 4)
OrdersMaker = Callable[..., tuple]
RankOrdersMaker = Callable[[GridPoint, int, tuple[tuple[int, ...], ...], int], tuple]


def _index_order(problem: PipelineProblem) -> list[int]:
    return list(range(problem.graph.num_devices))


def _scatter_order(problem: PipelineProblem) -> list[int]:
    """GPUs round-robin over the servers (first GPU of each server, then the second, ...)."""
    servers = problem.graph.server_gpus()
    columns = max(len(gpus) for gpus in servers.values())
    return [gpus[k] for k in range(columns) for gpus in servers.values() if k < len(gpus)]


def _fresh_first(problem: PipelineProblem, stages: tuple[Stage, ...]) -> tuple[Stage, ...]:
    """DAPPLE's fresh-first placement of ``stages`` (their GPU counts kept): each stage, in
    pipeline order, takes its GPUs from servers no earlier stage uses, in index order, and
    only when no such server is left from the used server with the most free GPUs."""
    free = problem.graph.server_gpus()
    used: set[int] = set()
    placed = []
    for stage in stages:
        devices: list[int] = []
        while len(devices) < len(stage.devices):
            fresh = [server for server, gpus in free.items() if gpus and server not in used]
            server = fresh[0] if fresh else max(free, key=lambda server: len(free[server]))
            take = free[server][:len(stage.devices) - len(devices)]
            free[server] = free[server][len(take):]
            devices.extend(take)
            used.add(server)
        placed.append(Stage(stage.first, stage.last, tuple(devices), stage.split))
    return tuple(placed)


# DAPPLE's device placement policies as the GPU order its DP cuts into contiguous runs:
# append-first fills a server before the next (consecutive stages share servers), scatter-first
# spreads every run over all servers; fresh-first is priced on append-first runs and its
# stages then re-placed (``RE_PLACEMENTS``) so that each starts on an unused server.
PLACEMENTS: dict[str, Callable[[PipelineProblem], list[int]]] = {
    "append-first": _index_order, "scatter-first": _scatter_order, "fresh-first": _index_order}
RE_PLACEMENTS: dict[str, Callable[[PipelineProblem, tuple[Stage, ...]], tuple[Stage, ...]]] = {
    "fresh-first": _fresh_first}


def _fixed(name: str, make: OrdersMaker, capped: bool) -> Variants:
    """Plans of one fixed-order schedule: as written, then (``capped``) with the warm-up
    lowered to the microbatches memory holds."""
    def variants(problem: PipelineProblem, point: GridPoint,
                 stages: tuple[Stage, ...]) -> list[PipelinePlan]:
        n, m = problem.graph.num_devices, problem.num_microbatches
        options = [make(stages, n, m)]
        if capped:
            options.append(make(stages, n, m, in_flight_caps(problem, stages)))
        return [PipelinePlan(name, stages, orders, m, point.notes(name) | {"warm-up": kind},
                             point.recompute, point.tp, point.ddp)
                for orders, kind in zip(options, ("full", "memory-capped"), strict=False)]
    return variants


def plan_gpipe(problem: PipelineProblem) -> PipelinePlan:
    """GPipe on the PP x DP x TP grid, with or without re-materialization."""
    return best_plan(problem, "gpipe", grid_points(problem), _fixed("gpipe", gpipe_orders, False))


def plan_1f1b(problem: PipelineProblem) -> PipelinePlan:
    """1F1B (PipeDream-Flush) on the PP x DP x TP grid, memory-aware."""
    return best_plan(problem, "1f1b", grid_points(problem),
                     _fixed("1f1b", one_f_one_b_orders, True))


def _per_rank(name: str, make: RankOrdersMaker) -> Variants:
    """Plans of a schedule written per pipeline rank, each rank hosting several stages
    (interleaved, ZB-V): the ranks are the GPU groups of the first ``pp`` stages."""
    def variants(problem: PipelineProblem, point: GridPoint,
                 stages: tuple[Stage, ...]) -> list[PipelinePlan]:
        groups = tuple(stage.devices for stage in stages[:point.pp])
        orders = make(point, problem.num_microbatches, groups, problem.graph.num_devices)
        return [PipelinePlan(name, stages, orders, problem.num_microbatches, point.notes(name),
                             point.recompute, point.tp, point.ddp)]
    return variants


def _paired(name: str, make: Callable) -> Variants:
    """Plans of DualPipe (``make`` = ``dualpipe_grid_units``) or DualPipeV
    (``dualpipev_units``): per-rank units, kept as ``PipelinePlan.joined``; ConfigError when
    the configuration breaks the schedule's conditions (``best_plan`` counts it skipped)."""
    def variants(problem: PipelineProblem, point: GridPoint,
                 stages: tuple[Stage, ...]) -> list[PipelinePlan]:
        groups = tuple(stage.devices for stage in stages[:point.pp])
        if point.dual:
            groups = tuple(stage.devices[0::2] for stage in stages)
        orders, joined = flatten(make(problem.num_microbatches, groups,
                                      problem.graph.num_devices))
        return [PipelinePlan(name, stages, orders, problem.num_microbatches, point.notes(name),
                             point.recompute, point.tp, point.ddp, joined=joined)]
    return variants


def _zero_bubble(name: str, variants: Variants, chunks: tuple[int, ...] = (1,),
                 v_shape: bool = False, dual: bool = False
                 ) -> Callable[[PipelineProblem], PipelinePlan]:
    def plan(problem: PipelineProblem) -> PipelinePlan:
        if problem.chain.input_grad_fraction is None:
            raise ConfigError(f"{name}: the model's backward cannot be split into I and W "
                              "(input_grad_fraction is unset)")
        if dual and not problem.replicate:
            raise ConfigError(f"{name}: runs two copies of every stage; the problem allows "
                              "one GPU per stage (replicate is off)")
        return best_plan(problem, name, grid_points(problem, chunks, v_shape, dual), variants)
    plan.__doc__ = (f"{name.upper()} on the PP x DP x TP grid; needs a chain whose backward "
                    "can be split.")
    return plan


plan_zb_h1 = _zero_bubble("zb-h1", _fixed("zb-h1", zb_h1_orders, True))
plan_zb_h2 = _zero_bubble("zb-h2", _fixed("zb-h2", zb_h2_orders, True))
plan_zb_v = _zero_bubble("zb-v", _per_rank("zb-v", lambda point, m, groups, n: zb_v_orders(
    m, groups, n)), (2,), v_shape=True)
plan_dualpipe = _zero_bubble("dualpipe", _paired("dualpipe", dualpipe_grid_units), dual=True)
plan_dualpipev = _zero_bubble("dualpipev", _paired("dualpipev", dualpipev_units), (2,),
                              v_shape=True)


def plan_interleaved(problem: PipelineProblem) -> PipelinePlan:
    """Interleaved 1F1B with 2 or 4 chunks per GPU on the PP x DP x TP grid."""
    return best_plan(problem, "interleaved", grid_points(problem, INTERLEAVE_CHUNKS),
                     _per_rank("interleaved", lambda point, m, groups, n: interleaved_orders(
                         point.chunks, m, groups, n)))


Partitions = dict[tuple, tuple[Stage, ...] | None]


def _memory_aware(problem: PipelineProblem, name: str,
                  partition: Callable[[PipelineProblem, RangeCosts], tuple[Stage, ...] | None],
                  placement: str = "append-first", split: bool = False,
                  found: Partitions | None = None) -> SimResult:
    """Partition assuming 1, 2, 4, ... microbatches in flight per stage until the 1F1B plan
    fits every GPU; without recomputation first, then selective, then full: the first mode
    that fits. Only when none does, the same again with 1F1B's warm-up lowered to what
    memory holds. GPUs in the order of ``placement`` (``PLACEMENTS``); with ``split``
    replicated stages split every microbatch across their replicas. ``found`` keeps the
    partitions computed (per mode, GPU order, in-flight count and split), shared by calls
    whose GPU orders coincide."""
    found = {} if found is None else found
    for capped in (False, True):
        for mode in problem.recompute_modes:
            result = _memory_aware_mode(problem.under(mode), name, partition, capped, placement,
                                        split, found)
            if result is not None:
                remember(problem, result)
                return result
    raise ConfigError(f"{name}: no partition fits the GPUs' memory")


def _memory_aware_mode(problem: PipelineProblem, name: str,
                       partition: Callable[[PipelineProblem, RangeCosts],
                                           tuple[Stage, ...] | None],
                       capped: bool, placement: str, split: bool,
                       found: Partitions) -> SimResult | None:
    graph, m, in_flight = problem.graph, problem.num_microbatches, 1
    order = PLACEMENTS[placement](problem)
    while True:
        key = (problem.chain.recompute, tuple(order), in_flight, split)
        if key not in found:
            found[key] = partition(problem, range_costs(problem, order, identical=True,
                                                        in_flight=in_flight, split=split))
        stages = found[key]
        if stages is None:
            return None
        if placement in RE_PLACEMENTS:
            stages = RE_PLACEMENTS[placement](problem, stages)
        notes = {"schedule": "1f1b", "pp": len(stages), "dp": "per stage", "tp": problem.degree,
                 "recompute": problem.chain.recompute, "mapping": placement,
                 "replicas": "split" if split else "round-robin"}
        warm_ups = [(in_flight_caps(problem, stages), "memory-capped")] if capped else \
            [(None, "full")]
        for caps, kind in warm_ups:
            orders = one_f_one_b_orders(stages, graph.num_devices, m, caps)
            plan = PipelinePlan(name, stages, orders, m, notes | {"warm-up": kind},
                                problem.chain.recompute, problem.degree,
                                len(stages) == 1 and len(stages[0].devices) > 1)
            try:
                return simulate(problem, plan)
            except ConfigError:
                continue
        if in_flight >= m:
            return None
        in_flight = min(2 * in_flight, m)


def plan_pipedream(problem: PipelineProblem) -> PipelinePlan:
    """PipeDream's throughput DP (identical GPUs, index order) with PipeDream-Flush."""
    return _memory_aware(problem, "pipedream", lambda sub, costs: throughput_dp(
        costs, sub.chain.num_blocks, sub.num_microbatches)).plan


def plan_dapple(problem: PipelineProblem) -> PipelinePlan:
    """DAPPLE: synchronous-latency DP (identical GPUs) with early backward, under each of its
    placement policies (append-first, scatter-first, fresh-first), with microbatches split
    across a stage's replicas (DAPPLE's runtime) and, at full strength, also taken
    round-robin; the fastest simulated plan (its ``replicas`` note says which)."""
    def best(sub: PipelineProblem, costs: RangeCosts) -> tuple[Stage, ...] | None:
        ranked = best_sync_partitions(sub, costs, keep=1, identical=True)
        return ranked[0] if ranked else None
    results, found = [], {}
    placements = PLACEMENTS if len({d.server for d in problem.graph.devices}) > 1 else \
        ("append-first",)
    for placement in placements:
        for split in (True, False):
            try:
                results.append(_memory_aware(problem, "dapple", best, placement, split, found))
            except ConfigError:
                continue
    if not results:
        raise ConfigError("dapple: no partition fits the GPUs' memory")
    return min(results, key=lambda result: result.iteration_s).plan
