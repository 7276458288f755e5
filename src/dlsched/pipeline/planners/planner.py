"""The dlsched planner: synchronous pipeline planning after Luo et al., "Efficient Pipeline
Planning for Expedited Distributed DNN Training", IEEE INFOCOM 2022.

1. Device mapping: order the GPUs by recursive bisection along the weakest cuts
   (``ordering.device_order``), so that contiguous runs are well connected; on graphs of at most
   ``EXHAUSTIVE_ORDER_GPUS`` GPUs every ordering is tried as well, and with at most
   ``EXHAUSTIVE_BLOCKS`` blocks too every partition and mapping is ranked by ``estimate``.
2. Partition: for each ordering, ``sync_dp`` over (block prefix, unit prefix) with the actual
   FLOP/s of each run's slowest GPU, for every candidate bottleneck time and with the
   all-reduce counted or not; the ``KEEP_PARTITIONS`` partitions of lowest ``estimate`` go on
   (``KEEP_PARTITIONS_SMALL`` on graphs of at most ``SMALL_GPUS`` GPUs). Memory-aware
   candidates join them (``front_light_partitions``): every GPU used, the first stages
   lighter, since they hold the most microbatches in flight.
3. Scheduling: for each kept partition, list scheduling in the simulator with several priority
   rules (backward first, highest remaining path first; split or full backwards; in-flight caps
   of unbounded-but-memory, 1F1B's ``p - s``) plus the fixed 1F1B, GPipe and ZB-H1 orders.
4. Steps 1-3 run for every tensor-parallel degree the problem allows (``PipelineProblem.
   degrees``: on the instance whose devices are the TP groups). Every baseline planner's plan
   is a candidate too; the simulated fastest plan wins, so the
   result is never slower than any baseline on the same instance.
5. Refinement on small instances (stages x microbatches <= ``REFINE_ACTIONS``), from each
   of the ``REFINE_STARTS`` fastest plans with distinct partitions (hill-climbing is
   path-dependent: the fastest start need not climb highest): hill-climb
   on the simulated time over neighbouring partitions — one cut moved by one block, a
   replicated stage split in two (its GPUs halved, at every block cut), two adjacent stages
   on disjoint GPUs merged into one replicated stage, an unused GPU added as a replica or
   running the second
   part of a split stage (graphs of at most ``GROW_GPUS`` GPUs) — re-running step 3 for
   each, for at most
   ``REFINE_PASSES`` improving passes.

6. Two stages per rank (``two_stage``), searched apart from steps 2-5 so that they never
   displace those starts: dlsched's V partitions (its device order in ``p`` rank groups,
   ``2p`` stages balanced on each group's speed) under every TP degree and recomputation
   mode, scheduled by step 3 and by ZB-V's and DualPipeV's fixed orders, and the ZB-V,
   DualPipe and DualPipeV baselines' plans; refinement from the fastest re-runs their fixed
   order and backward-first list scheduling on each cut move, re-balancing the V (or the
   two directions) for heterogeneous GPUs and links. The faster of the two searches wins.

Steps 3-6 simulate only the candidates that can still win: one whose lower bound
(``bounds.plan_bound`` of its stages) is above the time of the ``REFINE_STARTS``-th fastest
partition simulated so far (the current best, in refinement) is skipped (``pruning``); the
plan chosen is the same as with every candidate simulated.

Without replication (``PipelineProblem.replicate`` False, e.g. for ``torch.distributed.pipelining``,
which runs one rank per stage) every step keeps to one GPU per stage: the partition DP and the
memory-aware candidates use single-GPU units, balanced one-stage-per-GPU cuts on the first
``k`` GPUs of the device order join the candidates for every ``k``, refinement only moves cuts
and places unused GPUs as new stages, and the baselines search their own unreplicated spaces.
With ``PipelineProblem.runnable_only`` every plan kept (start, refinement, baselines) is one an
existing runtime executes (``runtimes.runtime_for``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from itertools import chain, islice, permutations
from weakref import WeakKeyDictionary

from dlsched.errors import ConfigError
from dlsched.pipeline.chains.problem import PipelineProblem
from dlsched.pipeline.planners.enumeration import all_partitions
from dlsched.pipeline.planners.estimate import best_sync_partitions, estimate, memory_slots
from dlsched.pipeline.planners.ordering import device_order
from dlsched.pipeline.planners.partition import balanced_partitions, balanced_stages, range_costs
from dlsched.pipeline.planners.pruning import MARGIN, Candidate, evaluate
from dlsched.pipeline.planners.two_stage import (
    NOTE_NAMES,
    PAIRED_ONLY,
    TWO_STAGE,
    two_stage_orders,
    v_partitions,
)
from dlsched.pipeline.plans.actions import Action
from dlsched.pipeline.plans.plan import PipelinePlan, Stage, stages_error
from dlsched.pipeline.plans.runtimes import runtime_for
from dlsched.pipeline.plans.schedules import (
    backward_first_dispatch,
    critical_path_dispatch,
    gpipe_orders,
    one_f_one_b_orders,
    zb_h1_orders,
    zb_h2_orders,
)
from dlsched.pipeline.simulation.bounds import plan_bound
from dlsched.pipeline.simulation.simulate import (
    Dispatch,
    SimResult,
    list_schedule,
    remember,
    simulate,
)

KEEP_PARTITIONS = 3
REFINE_ACTIONS = 256
REFINE_PASSES = 3
REFINE_MOVES = 150
REFINE_STARTS = 3
GROW_GPUS = 8
KEEP_PARTITIONS_SMALL = 8
SMALL_GPUS = 16
EXHAUSTIVE_ORDER_GPUS = 4
EXHAUSTIVE_BLOCKS = 8
FRONT_LIGHT_RATIOS = (4 / 3, 1.5, 2.0)
FRONT_LIGHT_STEPS = 16
KEEP_FRONT_LIGHT = 2


def _orders(problem: PipelineProblem) -> list[list[int]]:
    first = device_order(problem.graph)
    n = problem.graph.num_devices
    if n > EXHAUSTIVE_ORDER_GPUS:
        return [first]
    return [first] + [list(p) for p in permutations(range(n)) if list(p) != first]


def allowed(problem: PipelineProblem, stages: tuple[Stage, ...]) -> bool:
    """Whether a partition is in the problem's space (one GPU per stage unless replication
    is allowed)."""
    return problem.replicate or all(len(stage.devices) == 1 for stage in stages)


def admissible(problem: PipelineProblem, plan: PipelinePlan) -> bool:
    """Whether a plan is in the problem's space: ``allowed`` stages and, with
    ``runnable_only``, a runtime that executes it (``runtimes.runtime_for``)."""
    return allowed(problem, plan.stages) and (not problem.runnable_only
                                              or runtime_for(plan) is not None)


def _small_space(problem: PipelineProblem) -> list[tuple[Stage, ...]]:
    """On tiny instances, every partition and mapping (replicas fastest first), ranked by
    ``estimate``; the best ``KEEP_PARTITIONS_SMALL`` are kept."""
    graph, chain = problem.graph, problem.chain
    if graph.num_devices > EXHAUSTIVE_ORDER_GPUS or chain.num_blocks > EXHAUSTIVE_BLOCKS:
        return []
    speeds = graph.flops
    ranked = sorted(
        (tuple(Stage(st.first, st.last, tuple(sorted(st.devices, key=lambda d: -speeds[d])))
               for st in stages)
         for stages in all_partitions(chain.num_blocks, graph.num_devices, every_order=False)
         if allowed(problem, stages)),
        key=lambda stages: estimate(problem, stages))
    return ranked[:KEEP_PARTITIONS_SMALL]


def front_light_partitions(problem: PipelineProblem, order: list[int]) -> list[tuple[Stage, ...]]:
    """Memory-aware candidates (step 2b): the GPUs of ``order`` in groups of ``r`` replicas
    (``r`` a power of two dividing the GPU count, one stage per group, every GPU used), cut
    compute-balanced with the first ``a`` stages given ``1/rho`` of the work of the others,
    for ``rho`` in ``FRONT_LIGHT_RATIOS`` and ``a`` from 0 to every stage (at most
    ``FRONT_LIGHT_STEPS`` values): early stages hold the most microbatches in flight, so
    lighter ones there let the later, heavier ones fit. The ``KEEP_FRONT_LIGHT`` of lowest
    ``estimate`` (which counts the in-flight slots) are kept."""
    n, blocks = len(order), problem.chain.num_blocks
    seen: dict[tuple[Stage, ...], float] = {}
    r = 1
    while r <= (n if problem.replicate else 1):
        p = n // r
        if n % r == 0 and p <= blocks and p > 1:
            groups = [tuple(order[k * r:(k + 1) * r]) for k in range(p)]
            weightings = [[rho] * a + [1.0] * (p - a) for rho in FRONT_LIGHT_RATIOS
                          for a in sorted({round(i * p / FRONT_LIGHT_STEPS)
                                           for i in range(FRONT_LIGHT_STEPS + 1)})]
            for stages in balanced_partitions(problem, groups, weightings):
                if len(stages) == p and stages not in seen:
                    seen[stages] = estimate(problem, stages)
        r *= 2
    return sorted(seen, key=lambda st: seen[st])[:KEEP_FRONT_LIGHT]


def propose_partitions(problem: PipelineProblem) -> list[tuple[Stage, ...]]:
    """Candidate partitions and mappings (steps 1-2 of the module docstring)."""
    found: list[tuple[Stage, ...]] = _small_space(problem)
    orders = _orders(problem)
    for order in orders:
        costs = range_costs(problem, order, identical=False)
        keep = KEEP_PARTITIONS_SMALL if len(order) <= SMALL_GPUS else KEEP_PARTITIONS
        for stages in best_sync_partitions(problem, costs, keep):
            if stages not in found:
                found.append(stages)
    extra = front_light_partitions(problem, orders[0])
    if not problem.replicate:
        extra += [balanced_stages(problem, orders[0][:k]) for k in range(1, len(orders[0]) + 1)]
    for stages in extra:
        if stages not in found:
            found.append(stages)
    return found


def _remaining(problem: PipelineProblem, stages: tuple[Stage, ...]) -> list[tuple[float, float]]:
    times = [problem.stage_times(stage).max(axis=0) for stage in stages]
    after_backward, result = 0.0, []
    for s in range(len(stages)):
        result.append((0.0, after_backward))
        after_backward += times[s][1]
    total_forward = 0.0
    for s in range(len(stages) - 1, -1, -1):
        result[s] = (total_forward + times[s][1] + result[s][1], result[s][1])
        total_forward += times[s][0]
    return result


def dispatch_rules(problem: PipelineProblem, stages: tuple[Stage, ...]) -> list[Dispatch]:
    """The list-scheduling rules tried on a partition (step 3)."""
    p, m = len(stages), problem.num_microbatches
    splits = (False, True) if problem.chain.input_grad_fraction is not None else (False,)
    rules = []
    for split in splits:
        for caps in ((m,) * p, tuple(p - s for s in range(p))):
            rules.append(backward_first_dispatch(p, caps, split))
        rules.append(critical_path_dispatch(_remaining(problem, stages), (m,) * p, split))
    return rules


def _attempt(run: Callable[[], SimResult]) -> SimResult | None:
    try:
        return run()
    except ConfigError:
        return None


# ``_stages_bound`` per instance, stages and kind of backward (refinement meets the same
# neighbours again from later passes and other starts).
_BOUNDS: WeakKeyDictionary[PipelineProblem, dict[tuple, float]] = WeakKeyDictionary()


def _stages_bound(problem: PipelineProblem, stages: tuple[Stage, ...], split: bool,
                  orders: Callable[[], tuple[tuple[Action, ...], ...]]) -> float:
    """``plan_bound`` of ``stages`` run in ``orders()`` (1F1B's for full backwards, ZB-H1's
    for ``split`` ones: the bound holds for every schedule of the stages with the same kind
    of backward; seconds; infinite when the stages are no valid partition, which no schedule
    runs). Found once per instance, stages and ``split``."""
    known = _BOUNDS.setdefault(problem, {})
    if (stages, split) not in known:
        n, m = problem.graph.num_devices, problem.num_microbatches
        known[(stages, split)] = math.inf if stages_error(
            stages, problem.chain.num_blocks, n) is not None else plan_bound(
            problem, PipelinePlan("dlsched", stages, orders(), m, {}, problem.chain.recompute,
                                  problem.degree))
    return known[(stages, split)]


def schedule_candidates(problem: PipelineProblem, stages: tuple[Stage, ...],
                        only: str | None = None) -> list[Candidate]:
    """The schedules of one partition: list-scheduling rules, 1F1B, GPipe, ZB-H1 and ZB-H2
    orders, and on a V or bidirectional partition ZB-V's, DualPipeV's and DualPipe's
    (``two_stage``; only the schedule called ``only`` when given), as candidates grouped by
    partition and TP degree and bounded by ``_stages_bound``. A candidate's result is None when it
    fails, does not fit memory or is outside the problem's space (``admissible``). Fixed
    orders are written once, when first needed (by the bound or the simulation)."""
    n, m = problem.graph.num_devices, problem.num_microbatches
    group = (stages, problem.degree)
    written: dict[Callable, tuple[tuple[Action, ...], ...]] = {}
    bounds: dict[bool, float] = {}

    def orders_of(make: Callable) -> tuple[tuple[Action, ...], ...]:
        if make not in written:
            written[make] = make(stages, n, m)
        return written[make]

    def candidate(split: bool, run: Callable[[float], SimResult]) -> Candidate:
        if split not in bounds:
            bounds[split] = _stages_bound(problem, stages, split, lambda: orders_of(
                zb_h1_orders if split else one_f_one_b_orders))
        return Candidate(bounds[split], group,
                         lambda deadline: _scored(problem, lambda: run(deadline)))

    def fixed(make: Callable, name: str, deadline: float) -> SimResult:
        return simulate(problem, PipelinePlan("dlsched", stages, orders_of(make), m,
                                              {"schedule": name}, problem.chain.recompute,
                                              problem.degree), deadline)
    found = [candidate(rule.split, lambda deadline, rule=rule: list_schedule(
                 problem, stages, rule, "dlsched", deadline))
             for rule in dispatch_rules(problem, stages) if only in (None, rule.name)]
    makers = [one_f_one_b_orders, gpipe_orders]
    if problem.chain.input_grad_fraction is not None:
        makers.extend((zb_h1_orders, zb_h2_orders))
    for make in makers:
        name = make.__name__.removesuffix("_orders")
        if only in (None, name):
            found.append(candidate(make in (zb_h1_orders, zb_h2_orders),
                                   lambda deadline, make=make, name=name: fixed(make, name,
                                                                                deadline)))
    for name in TWO_STAGE if problem.chain.input_grad_fraction is not None else ():
        paired = two_stage_orders(name, stages, n, m) if only in (None, name) else None
        if paired is not None:
            found.append(candidate(True, lambda deadline, name=name, paired=paired: simulate(
                problem, PipelinePlan("dlsched", stages, paired[0], m, {"schedule": name},
                                      problem.chain.recompute, problem.degree,
                                      joined=paired[1]), deadline)))
    return found


def _scored(problem: PipelineProblem, run: Callable[[], SimResult]) -> SimResult | None:
    """``run()``'s result when it runs, fits every GPU's memory and is ``admissible``."""
    result = _attempt(run)
    if result is None or not admissible(problem, result.plan) or max(
            a - d.memory for a, d in zip(result.peak_memory,
                                         problem.for_plan(result.plan).graph.devices,
                                         strict=True)) > 0:
        return None
    return result


def plan_dlsched(problem: PipelineProblem,
                 baselines: dict[str, Callable[[PipelineProblem], PipelinePlan]] | None = None
                 ) -> PipelinePlan:
    """The fastest simulated plan among our partitions x schedules under every allowed
    tensor-parallel degree and recomputation mode, and the baselines' plans. Only the
    candidates that can be among the ``REFINE_STARTS`` fastest partitions are simulated
    (``pruning.evaluate``); the selection over them is the same as over all. Plans of two
    stages per rank are searched apart (step 6 of the module docstring)."""
    planned = _baseline_plans(problem, baselines or {})
    candidates = [candidate for t in problem.degrees()
                  for sub, stages in _mode_partitions(problem.tensor(t))
                  for candidate in schedule_candidates(sub, stages)]
    best = _search(problem, candidates + _baseline_candidates(problem, (
        plan for name, plan in planned.items() if name not in PAIRED_ONLY)))
    # Two stages per rank (``two_stage``), searched on their own so that they never displace
    # the starts above: dlsched's V partitions and the baselines' V and DualPipe plans,
    # refined with their fixed orders as well as list scheduling.
    pairs = [candidate for t in problem.degrees() for mode in problem.recompute_modes
             for sub in (problem.tensor(t).under(mode),)
             for stages in v_partitions(sub, device_order(sub.graph))
             for candidate in schedule_candidates(sub, stages)]
    pairs += _baseline_candidates(problem, (plan for name, plan in planned.items()
                                            if name in NOTE_NAMES))
    if pairs:
        paired = _search(problem, pairs, two_stage=True)
        if paired is not None and (best is None
                                   or paired.iteration_s < best.iteration_s * (1 - 1e-12)):
            best = paired
    if best is None:
        raise ConfigError("dlsched: no plan fits the GPUs' memory")
    remember(problem, best)
    notes = {key: value for key, value in best.plan.notes.items() if key != "skipped"} | {
        "origin": best.plan.planner}
    return replace(best.plan, planner="dlsched", notes=notes)


def _search(problem: PipelineProblem, candidates: list[Candidate],
            two_stage: bool = False) -> SimResult | None:
    """The fastest of ``candidates`` (simulated where they can win) and of the refinements
    from the ``REFINE_STARTS`` fastest partitions among them; None when none runs."""
    starts: list[SimResult] = []  # the fastest plan of each of the fastest partitions
    for _, result in evaluate(candidates, REFINE_STARTS):
        same = next((st for st in starts if st.plan.stages == result.plan.stages
                     and st.plan.tensor_parallel == result.plan.tensor_parallel), None)
        if same is not None:
            if result.iteration_s >= same.iteration_s * (1 - 1e-12):
                continue
            starts.remove(same)
        starts.append(result)
        starts.sort(key=lambda start: start.iteration_s)
        del starts[REFINE_STARTS:]
    if not starts:
        return None
    best = starts[0]
    for start in starts:
        if start.plan.num_stages * problem.num_microbatches <= REFINE_ACTIONS:
            refined = refine(problem.for_plan(start.plan), start, two_stage)
            if refined.iteration_s < best.iteration_s * (1 - 1e-12):
                best = refined
    return best


def _memory_bound(problem: PipelineProblem, stages: tuple[Stage, ...]) -> bool:
    """True when some stage cannot hold the microbatches a 1F1B warm-up puts in flight."""
    return any(memory_slots(problem, stage) * stage.lanes
               < min(problem.num_microbatches, sum(st.lanes for st in stages[s:]))
               for s, stage in enumerate(stages))


def _mode_partitions(problem: PipelineProblem) -> Iterator[tuple[PipelineProblem,
                                                                 tuple[Stage, ...]]]:
    """Candidate partitions under the allowed recomputation modes, in order (none,
    selective, full): a further mode is tried only while some candidate of the previous
    one is memory-bound (recomputation costs compute and only pays where memory binds)."""
    for mode in problem.recompute_modes:
        sub = problem.under(mode)
        found = propose_partitions(sub)
        yield from ((sub, stages) for stages in found)
        if found and not any(_memory_bound(sub, stages) for stages in found):
            return


def _baseline_plans(problem: PipelineProblem,
                    baselines: dict[str, Callable[[PipelineProblem], PipelinePlan]]
                    ) -> dict[str, PipelinePlan]:
    """Each baseline's plan by name (none for a baseline that finds no plan)."""
    plans = {name: _attempt(lambda planner=planner: planner(problem))
             for name, planner in baselines.items()}
    return {name: plan for name, plan in plans.items() if plan is not None}


def _baseline_candidates(problem: PipelineProblem,
                         plans: Iterable[PipelinePlan]) -> list[Candidate]:
    """The baselines' plans as candidates; bound 0 puts them first, as their results are
    usually kept from their own search (``simulate.remember``) and set the bar the other
    candidates must pass."""
    return [Candidate(0.0, (plan.stages, plan.tensor_parallel),
                      lambda deadline, plan=plan: _scored(
                          problem, lambda: simulate(problem, plan, deadline)))
            for plan in plans]


def _cut_moves(stages: tuple[Stage, ...]) -> Iterator[tuple[Stage, ...]]:
    """Partitions that move one cut between adjacent stages by one block."""
    for s in range(len(stages) - 1):
        left, right = stages[s], stages[s + 1]
        for cut in (left.last - 1, left.last + 1):
            if left.first < cut < right.last:
                yield (*stages[:s], Stage(left.first, cut, left.devices),
                       Stage(cut, right.last, right.devices), *stages[s + 2:])


def _split_merge_moves(stages: tuple[Stage, ...]) -> Iterator[tuple[Stage, ...]]:
    """Partitions that split one replicated stage in two or merge two adjacent stages on
    disjoint GPUs (two neighbours on one GPU, as in a V of ZB-V, would make a stage list that
    GPU twice)."""
    for s, stage in enumerate(stages):
        half = len(stage.devices) // 2
        for cut in range(stage.first + 1, stage.last) if half else ():
            yield (*stages[:s], Stage(stage.first, cut, stage.devices[:half]),
                   Stage(cut, stage.last, stage.devices[half:]), *stages[s + 1:])
        if s + 1 < len(stages) and not set(stage.devices) & set(stages[s + 1].devices):
            merged = Stage(stage.first, stages[s + 1].last,
                           stage.devices + stages[s + 1].devices)
            yield (*stages[:s], merged, *stages[s + 2:])


def _grow_moves(stages: tuple[Stage, ...], num_devices: int) -> Iterator[tuple[Stage, ...]]:
    """Partitions that bring in one unused GPU: as an extra replica of a stage, or running
    the second part of a stage split at any block cut."""
    used = {d for stage in stages for d in stage.devices}
    for device in (d for d in range(num_devices) if d not in used):
        for s, stage in enumerate(stages):
            yield (*stages[:s], Stage(stage.first, stage.last, (*stage.devices, device)),
                   *stages[s + 1:])
            for cut in range(stage.first + 1, stage.last):
                yield (*stages[:s], Stage(stage.first, cut, stage.devices),
                       Stage(cut, stage.last, (device,)), *stages[s + 1:])


def _reorder_moves(stages: tuple[Stage, ...]) -> Iterator[tuple[Stage, ...]]:
    """Partitions that rotate the GPUs of one replicated stage: the order decides which
    replica each microbatch goes to, and so which link feeds it (a slow replica behind a fast
    link can beat the fastest-first order)."""
    for s, stage in enumerate(stages):
        for shift in range(1, len(stage.devices)):
            devices = stage.devices[shift:] + stage.devices[:shift]
            yield (*stages[:s], Stage(stage.first, stage.last, devices), *stages[s + 1:])


def _refine_schedules(problem: PipelineProblem, plan: PipelinePlan,
                      two_stage: bool = False) -> tuple[str, ...]:
    """The schedules refinement re-runs on neighbours: the one that produced ``plan`` when it
    is one of ours, else backward-first list scheduling; with ``two_stage``, a ZB-V,
    DualPipeV or DualPipe plan's fixed order (``two_stage.TWO_STAGE``) and backward-first
    list scheduling both."""
    ours = {rule.name for rule in dispatch_rules(problem, plan.stages)} | {
        "one_f_one_b", "gpipe", "zb_h1", "zb_h2"}
    name = plan.notes.get("schedule", "")
    name = {"1f1b": "one_f_one_b", "zb-h1": "zb_h1", "zb-h2": "zb_h2"}.get(name, name)
    split = problem.chain.input_grad_fraction is not None
    listed = backward_first_dispatch(plan.num_stages, (1,), split).name
    fixed = NOTE_NAMES.get(name, name)
    if two_stage and fixed in TWO_STAGE:
        return fixed, listed
    return (name,) if name in ours else (listed,)


def refine(problem: PipelineProblem, best: SimResult, two_stage: bool = False) -> SimResult:
    """Hill-climb on simulated time over neighbouring partitions (step 5), each scheduled
    with the schedules of the current best plan (``_refine_schedules``); at most
    ``REFINE_PASSES`` passes and ``REFINE_MOVES`` neighbours in all."""
    budget = REFINE_MOVES
    for _ in range(REFINE_PASSES):
        start = best
        stages = start.plan.stages
        n = problem.graph.num_devices
        moves = chain(_cut_moves(stages), _split_merge_moves(stages),
                      _grow_moves(stages, n) if n <= GROW_GPUS else (), _reorder_moves(stages))
        schedules = _refine_schedules(problem, start.plan, two_stage)
        for stages in islice((move for move in moves if allowed(problem, move)), budget):
            budget -= 1
            for candidate in (candidate for schedule in schedules
                              for candidate in schedule_candidates(problem, stages, schedule)):
                if candidate.bound > best.iteration_s * (1 + MARGIN):
                    continue  # cannot beat the best (``pruning``)
                result = candidate.within(best.iteration_s)
                if result is not None and result.iteration_s < best.iteration_s * (1 - 1e-12):
                    best = result
        if best is start:
            break
    return best
